package shellconnect_test

import (
	"bytes"
	"context"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/envd/shell/v1"
	"github.com/envd-dev/envd/internal/shell/shelltest"
)

// connectTo reads command's stream from its start.
func (e *env) connectTo(command string) shelltest.Result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	st, err := e.c.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{SessionId: e.id, CommandId: command}))
	if err != nil {
		return shelltest.Result{Err: err}
	}
	return shelltest.Read(st, (*pb.ConnectResponse).GetEvent)
}

// TestConnect: Connect replays a command's output from the log, then
// follows it live, then sends its end: the one running, the last, or one
// by id.
func TestConnect(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shelltest.Options{}, &pb.CreateRequest{})
	first := e.runOK(`echo one; echo two >&2; printf three`)
	e.runOK(`echo last`)
	r := e.connectTo(first.End.GetCommandId())
	if string(r.Stdout) != "one\nthree" || string(r.Stderr) != "two\n" || r.End.GetCommandId() != first.End.GetCommandId() || r.Order != "soe" {
		t.Errorf("Connect to the first command: %s", r)
	}
	if r := e.connectTo(""); string(r.Stdout) != "last\n" {
		t.Errorf("Connect to the last command: %s", r)
	}
	// The one running: its output so far, then the rest.
	st := e.start(&pb.RunRequest{Command: `echo before; head -c 1 >/dev/null; echo after`, Stdin: true})
	done := make(chan shelltest.Result, 1)
	go func() { done <- e.connectTo("") }()
	rest2(st, func(out []byte) bool { return bytes.Contains(out, []byte("before\n")) })
	if _, err := e.c.SendInput(e.ctx(), connect.NewRequest(&pb.SendInputRequest{SessionId: e.id, Data: []byte("x")})); err != nil {
		t.Fatal(err)
	}
	r = rest(st)
	if c := <-done; string(c.Stdout) != "before\nafter\n" || c.End.GetCommandId() != r.End.GetCommandId() {
		t.Errorf("Connect to the command running: %s; Run: %s", c, r)
	}
}

// rest2 reads st until cond holds of its stdout so far.
func rest2(st *connect.ServerStreamForClient[pb.RunResponse], cond func([]byte) bool) shelltest.Result {
	var r shelltest.Result
	for !cond(r.Stdout) && st.Receive() {
		r.Add(st.Msg().GetEvent())
	}
	return r
}

// TestLostOutput: output the log no longer holds is counted in a late
// reader's end, which gets the rest; a reader that keeps up loses nothing.
func TestLostOutput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shelltest.Options{LogSize: 64 << 10}, &pb.CreateRequest{})
	r := e.runOK(`head -c 1048576 /dev/zero | tr '\0' x; printf END`)
	if len(r.Stdout) != 1<<20+3 || r.End.GetLostBytes() != 0 {
		t.Fatalf("Run with a log of 64 KiB: %d bytes, lost %d", len(r.Stdout), r.End.GetLostBytes())
	}
	c := e.connectTo(r.End.GetCommandId())
	if !bytes.HasSuffix(c.Stdout, []byte("xEND")) || c.End.GetLostBytes() == 0 || int(c.End.GetLostBytes())+len(c.Stdout) != 1<<20+3 {
		t.Errorf("Connect later: %d bytes, lost %d", len(c.Stdout), c.End.GetLostBytes())
	}
}
