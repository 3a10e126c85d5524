package shellconnect_test

import (
	"bytes"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/envd/shell/v1"
	"github.com/envd-dev/envd/internal/shell/shelltest"
)

// TestPTY: a session with a terminal: output (stdout and stderr) arrives as
// pty data, without envd's lines or a prompt; commands read the terminal,
// and SendInput types into it; Ctrl+C typed ends the command as a signal.
func TestPTY(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shelltest.Options{}, &pb.CreateRequest{Pty: &pb.TerminalSize{Cols: 80, Rows: 24}})
	r := e.runOK(`echo out; echo err >&2; printf tail`)
	if string(r.PTY) != "out\r\nerr\r\ntail" || len(r.Stdout)+len(r.Stderr) != 0 {
		t.Errorf("pty output: %s", r)
	}
	r = e.runOK(`[ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo tty; stty size; echo "$TERM"`)
	if string(r.PTY) != "tty\r\n24 80\r\nxterm-256color\r\n" {
		t.Errorf("the terminal: %s", r)
	}
	r = shelltest.Run(t, e.c, &pb.RunRequest{SessionId: e.id, Command: `read -r x; echo "got [$x]"`, Input: []byte("typed\n")})
	if !strings.HasSuffix(string(r.PTY), "got [typed]\r\n") {
		t.Errorf("input typed into the terminal: %s", r)
	}
	st := e.start(&pb.RunRequest{Command: `read -r x; echo "got [$x]"; cat; echo "cat ended"`})
	send := func(b string) {
		if _, err := e.c.SendInput(e.ctx(), connect.NewRequest(&pb.SendInputRequest{SessionId: e.id, Data: []byte(b)})); err != nil {
			t.Fatalf("SendInput %q: %v", b, err)
		}
	}
	send("line\n")
	if _, err := e.c.CloseInput(e.ctx(), connect.NewRequest(&pb.CloseInputRequest{SessionId: e.id})); err != nil {
		t.Fatal(err)
	}
	r = rest(st)
	if !bytes.Contains(r.PTY, []byte("got [line]\r\n")) || !bytes.HasSuffix(r.PTY, []byte("cat ended\r\n")) {
		t.Errorf("SendInput and Ctrl+D: %s", r)
	}
	st = e.start(&pb.RunRequest{Command: `sleep 1000`})
	e.waitProcs("sleep")
	send("\x03")
	r = rest(st)
	if r.End.GetReason() != pb.EndReason_END_REASON_SIGNALED || r.End.GetSignal() != 2 || r.End.GetExitCode() != 130 {
		t.Errorf("Ctrl+C typed: %s", r)
	}
	st = e.start(&pb.RunRequest{Command: `sleep 1000`})
	e.waitProcs("sleep")
	e.interrupt()
	if r := rest(st); r.End.GetReason() != pb.EndReason_END_REASON_INTERRUPTED {
		t.Errorf("Interrupt: %s", r)
	}
	if r := e.runOK(`echo still`); string(r.PTY) != "still\r\n" {
		t.Errorf("after: %s", r)
	}
}
