package shellconnect_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/envd/shell/v1"
	"github.com/envd-dev/envd/internal/shell/shelltest"
)

// TestSessionEnds: a command that ends the shell (exit, exec, kill -9 $$)
// ends the session: its stream and those waiting end with SESSION_ENDED
// and a message saying so, and later requests are refused.
func TestSessionEnds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cmd     string
		code    int32
		signal  uint32
		message string
	}{
		{"exit 3", 3, 0, "the command ended the session: exit status 3"},
		{"exec true", 0, 0, "the command ended the session: exit status 0"},
		{"kill -9 $$", -1, 9, "the command ended the session: signal: killed"},
		{"set -e; false", 1, 0, "the command ended the session: exit status 1"},
	} {
		t.Run(c.cmd, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, shelltest.Options{}, &pb.CreateRequest{})
			// A command waits for input while the one that ends the
			// session is queued behind it, and another behind that.
			first := e.start(&pb.RunRequest{Command: `head -c 1 >/dev/null`, Stdin: true})
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			ending, err := e.c.Run(ctx, connect.NewRequest(&pb.RunRequest{SessionId: e.id, Command: c.cmd}))
			if err != nil {
				t.Fatal(err)
			}
			after, err := e.c.Run(ctx, connect.NewRequest(&pb.RunRequest{SessionId: e.id, Command: "echo never"}))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.c.SendInput(e.ctx(), connect.NewRequest(&pb.SendInputRequest{SessionId: e.id, Data: []byte("x")})); err != nil {
				t.Fatal(err)
			}
			wantEnd(t, rest(first), pb.EndReason_END_REASON_EXITED, 0)
			r := rest(ending)
			if r.End.GetReason() != pb.EndReason_END_REASON_SESSION_ENDED || r.End.GetExitCode() != c.code || r.End.GetSignal() != c.signal || r.End.GetMessage() != c.message {
				t.Errorf("the command that ends the session: %s", r)
			}
			r = rest(after)
			if r.End.GetReason() != pb.EndReason_END_REASON_SESSION_ENDED || !strings.Contains(r.End.GetMessage(), "before the command started: "+c.message) || r.Started != nil || len(r.Stdout) != 0 {
				t.Errorf("the command queued behind it: %s", r)
			}
			r = e.run("echo too late")
			wantErr(t, r.Err, connect.CodeFailedPrecondition, "has ended", c.message)
			_, err = e.c.State(e.ctx(), connect.NewRequest(&pb.StateRequest{SessionId: e.id}))
			wantErr(t, err, connect.CodeFailedPrecondition, "has ended")
			// Connect still replays the last command, and List leaves the
			// session out; Close forgets it.
			cst, err := e.c.Connect(e.ctx(), connect.NewRequest(&pb.ConnectRequest{SessionId: e.id}))
			if err != nil {
				t.Fatal(err)
			}
			if r := shelltest.Read(cst, (*pb.ConnectResponse).GetEvent); r.End.GetMessage() == "" {
				t.Errorf("Connect to the ended session: %s", r)
			}
			if res, err := e.c.List(e.ctx(), connect.NewRequest(&pb.ListRequest{})); err != nil || len(res.Msg.GetSessions()) != 0 {
				t.Errorf("List after the end: %v %v", res, err)
			}
			if _, err := e.c.Close(e.ctx(), connect.NewRequest(&pb.CloseRequest{SessionId: e.id})); err != nil {
				t.Errorf("Close of the ended session: %v", err)
			}
			_, err = e.c.State(e.ctx(), connect.NewRequest(&pb.StateRequest{SessionId: e.id}))
			wantErr(t, err, connect.CodeNotFound)
		})
	}
}

// TestClose: Close ends the command running, the shell and its whole
// process tree (a background job, a process that left the group).
func TestClose(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shelltest.Options{}, &pb.CreateRequest{})
	r := e.runOK(`sleep 1000 & setsid sleep 1001 & echo $!`)
	pid := int(e.state().GetSession().GetPid())
	st := e.start(&pb.RunRequest{Command: `trap "" HUP; sleep 1002`})
	e.waitProcs("sleep", "sleep", "sleep")
	tree := descendantsOf(pid)
	if len(tree) != 3 {
		t.Fatalf("the shell's processes: %v (%s)", tree, r)
	}
	if _, err := e.c.Close(e.ctx(), connect.NewRequest(&pb.CloseRequest{SessionId: e.id})); err != nil {
		t.Fatal(err)
	}
	r = rest(st)
	if r.End.GetReason() != pb.EndReason_END_REASON_SESSION_ENDED || r.End.GetMessage() != "the session was closed" {
		t.Errorf("the command running at Close: %s", r)
	}
	for _, p := range tree {
		if procAlive(p) {
			t.Errorf("process %d (%s) of the closed session still runs", p.Pid, p.Comm)
		}
	}
	_, err := e.c.Close(e.ctx(), connect.NewRequest(&pb.CloseRequest{SessionId: e.id}))
	wantErr(t, err, connect.CodeNotFound)
}
