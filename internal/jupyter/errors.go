package jupyter

import (
	"errors"
	"fmt"
)

// Sentinel errors. Callers test them with errors.Is; the layer above maps
// them to wire codes in one place.
var (
	// ErrKernelNotFound: the server does not know the kernel id (deleted,
	// or removed after exceeding its restart limit).
	ErrKernelNotFound = errors.New("jupyter: kernel not found")
	// ErrNoSuchKernelSpec: no kernelspec has the requested name.
	ErrNoSuchKernelSpec = errors.New("jupyter: no such kernel spec")
	// ErrKernelRestarted: the kernel process died and was restarted (by the
	// server's auto-restarter, or by Kernel.Restart) while a request was in
	// flight. The kernel id still works but all its state is lost.
	ErrKernelRestarted = errors.New("jupyter: kernel restarted, its state is lost")
	// ErrKernelDied: the kernel is gone for good (it kept dying, or it was
	// shut down). Start a new one.
	ErrKernelDied = errors.New("jupyter: kernel died")
	// ErrConnectionLost: the kernel WebSocket dropped while a request was in
	// flight. The request's outcome is unknown; the next call reconnects.
	ErrConnectionLost = errors.New("jupyter: connection to kernel lost")
	// ErrServerRestarted: the Jupyter server this client was bound to has
	// exited (and the supervisor started a new one). Every kernel of the old
	// server is gone; get a new client from Supervisor.Client.
	ErrServerRestarted = errors.New("jupyter: server restarted, all kernels are gone")
	// ErrNoReply: the kernel finished an execute_request without sending
	// its execute_reply (ipykernel does so when the code closed
	// sys.stdout). The outcome is unknown; the kernel may be unusable.
	ErrNoReply = errors.New("jupyter: kernel finished the request without replying")
	// ErrKernelUnresponsive: the kernel stopped answering while running a
	// request (see KernelOptions.ProbeAfter): it is hung or stopped.
	// Interrupt or restart it.
	ErrKernelUnresponsive = errors.New("jupyter: kernel stopped answering")
	// ErrClosed: the Kernel connection was closed with Close.
	ErrClosed = errors.New("jupyter: kernel connection closed")
	// ErrStopped: the supervisor was stopped.
	ErrStopped = errors.New("jupyter: supervisor stopped")
)

// HTTPError is a non-2xx answer from the Jupyter REST API that maps to no
// sentinel. Body holds at most the first 4 KiB of the response, for logs.
type HTTPError struct {
	Op     string // e.g. "start kernel"
	Status int
	Body   string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("jupyter: %s: http %d: %s", e.Op, e.Status, e.Body)
}
