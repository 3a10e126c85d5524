package daemon

import (
	"fmt"
	"os"

	"github.com/mdlayher/vsock"
	"golang.org/x/sys/unix"
)

// vsockListener is a vsock listener on a socket envd made itself, so that a
// live upgrade can hand its descriptor on like a TCP or unix listener's
// (vsock.Listener does not expose its own): a vsock connection made during
// the exec then waits in the backlog for the new envd instead of being
// refused.
type vsockListener struct {
	*vsock.Listener
	f *os.File // the listening socket; Listener serves a copy of it
}

// listenVsock listens on port of every CID of this machine.
func listenVsock(port uint32) (*vsockListener, error) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("vsock socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), fmt.Sprintf("vsock:%d", port))
	if err := unix.Bind(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: port}); err != nil {
		f.Close()
		return nil, fmt.Errorf("bind vsock port %d: %w", port, err)
	}
	if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
		f.Close()
		return nil, fmt.Errorf("listen on vsock port %d: %w", port, err)
	}
	return vsockFromFile(f)
}

// vsockFromFile serves the listening vsock socket f, which it owns.
func vsockFromFile(f *os.File) (*vsockListener, error) {
	ln, err := vsock.FileListener(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &vsockListener{Listener: ln, f: f}, nil
}

// Close stops listening: it closes both descriptors of the socket.
func (l *vsockListener) Close() error {
	err := l.Listener.Close()
	if ferr := l.f.Close(); err == nil {
		err = ferr
	}
	return err
}

// file is a descriptor of the socket (a dup, close-on-exec).
func (l *vsockListener) file() (*os.File, error) {
	fd, err := unix.FcntlInt(l.f.Fd(), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, fmt.Errorf("dup the vsock listener: %w", err)
	}
	return os.NewFile(uintptr(fd), l.f.Name()), nil
}
