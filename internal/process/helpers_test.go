package process_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/gen/process/processconnect"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/process/processtest"
)

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

// end describes an expected end event.
type end struct {
	code   int32
	exited bool
	status string
}

var (
	exit0  = end{0, true, "exit status 0"}
	killed = end{-1, false, "signal: killed"}
)

// checkEnd checks an end event against want; its error must be absent for a
// clean exit and equal the status otherwise, as upstream.
func checkEnd(t *testing.T, s processtest.Snapshot, want end) {
	t.Helper()
	e := s.End
	if e == nil {
		t.Fatalf("no end event\n%s", s)
	}
	if e.GetExitCode() != want.code || e.GetExited() != want.exited || e.GetStatus() != want.status {
		t.Errorf("end = {code %d, exited %v, status %q}, want {code %d, exited %v, status %q}\n%s",
			e.GetExitCode(), e.GetExited(), e.GetStatus(), want.code, want.exited, want.status, s)
	}
	if want.code == 0 && want.exited {
		if e.Error != nil {
			t.Errorf("end.error = %q, want none", e.GetError())
		}
	} else if e.Error == nil || e.GetError() != want.status {
		t.Errorf("end.error = %v, want %q", e.Error, want.status)
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

// lookup returns the account a client option's user stands for.
func lookup(t *testing.T, name string) *identity.User {
	t.Helper()
	if name == "" {
		name = "root"
	}
	u, err := identity.Lookup(name)
	if err != nil {
		t.Fatalf("lookup %s: %v", name, err)
	}
	return u
}

// loginPath is the PATH a process gets: envd's own, cleaned, as
// identity.LoginEnv.
func loginPath() string { return identity.SandboxPath() }

// requireRoot skips tests that run processes as other users.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run processes as another user")
	}
	if _, err := identity.Lookup("user"); err != nil {
		t.Skip("needs the account 'user' (scripts/install-deps.sh creates it)")
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

// kill sends SIGKILL to pid through the service.
func kill(t *testing.T, c processconnect.ProcessClient, pid uint32) {
	t.Helper()
	if _, err := c.SendSignal(bounded(t), connect.NewRequest(&pb.SendSignalRequest{Process: processtest.PidSel(pid), Signal: pb.Signal_SIGNAL_SIGKILL})); err != nil {
		t.Fatalf("SendSignal KILL %d: %v", pid, err)
	}
}

// bounded is the context of a unary call: it cannot hang the test.
func bounded(t *testing.T) context.Context { return processtest.Context(t, waitShort) }
