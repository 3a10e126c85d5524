package procconnect_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/gen/process/processconnect"
	"github.com/envd-dev/envd/internal/process/processtest"
)

// The adapter's tests serve the real service (processtest) and drive it
// through the generated clients; the domain's tests, in package process,
// do the same for what the domain does.

// Aliases for the shared timeouts, to keep test lines short.
const (
	waitShort = processtest.WaitShort
	waitLong  = processtest.WaitLong
)

func ptr[T any](v T) *T { return &v }

// start starts cfg and watches its stream.
func start(t *testing.T, c processconnect.ProcessClient, req *pb.StartRequest) *processtest.Watcher {
	t.Helper()
	return processtest.Start(t, c, req, processtest.WatchOptions{})
}

// checkExit0 checks that the end is a clean exit, and that its error is
// absent, as upstream.
func checkExit0(t *testing.T, s processtest.Snapshot) {
	t.Helper()
	e := s.End
	if e == nil {
		t.Fatalf("no end event\n%s", s)
	}
	if e.GetExitCode() != 0 || !e.GetExited() || e.GetStatus() != "exit status 0" {
		t.Errorf("end = {code %d, exited %v, status %q}, want {code 0, exited true, status \"exit status 0\"}\n%s",
			e.GetExitCode(), e.GetExited(), e.GetStatus(), s)
	}
	if e.Error != nil {
		t.Errorf("end.error = %q, want none", e.GetError())
	}
}

// wantErr checks that err is a Connect error with code and a message that
// contains every one of subs.
func wantErr(t *testing.T, err error, code connect.Code, subs ...string) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a %v Connect error", err, code)
	}
	if ce.Code() != code {
		t.Errorf("code = %v (%q), want %v", ce.Code(), ce.Message(), code)
	}
	// The domain's sentinel text is not repeated on the wire.
	for _, prefix := range []string{"process not found: ", "invalid request: ", "process cannot do that: ", "not allowed: "} {
		if strings.HasPrefix(ce.Message(), prefix) {
			t.Errorf("message %q starts with the sentinel %q", ce.Message(), prefix)
		}
	}
	for _, s := range subs {
		if !strings.Contains(ce.Message(), s) {
			t.Errorf("message %q does not contain %q", ce.Message(), s)
		}
	}
}

// listed returns the List entry of pid, or nil.
func listed(t *testing.T, c processconnect.ProcessClient, pid uint32) *pb.ProcessInfo {
	t.Helper()
	res, err := c.List(bounded(t), connect.NewRequest(&pb.ListRequest{}))
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for _, p := range res.Msg.GetProcesses() {
		if p.GetPid() == pid {
			return p
		}
	}
	return nil
}

// bounded is the context of a unary call: it cannot hang the test.
func bounded(t *testing.T) context.Context { return processtest.Context(t, waitShort) }

// paceContext bounds a test's waits on the mock clock: it only turns a hang
// into a failure.
func paceContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitLong)
	t.Cleanup(cancel)
	return ctx
}

// quietLogger keeps the mock clock's log out of the test's.
type quietLogger struct{}

func (quietLogger) Log(...any)          {}
func (quietLogger) Logf(string, ...any) {}
