package shellconnect_test

import (
	"testing"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/envd/shell/v1"
	"github.com/envd-dev/envd/internal/shell/shelltest"
)

// TestStdin: a command reads end-of-file unless its Run gives input; Run's
// input bytes, then SendInput and CloseInput when it asked for stdin.
func TestStdin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shelltest.Options{}, &pb.CreateRequest{})
	if r := e.runOK(`cat; read x; echo "read=$? [$x]"`); string(r.Stdout) != "read=1 []\n" {
		t.Errorf("stdin by default: %s", r)
	}
	r := shelltest.Run(t, e.c, &pb.RunRequest{SessionId: e.id, Command: `cat; echo; cat`, Input: []byte("in\x00put")})
	if string(r.Stdout) != "in\x00put\n" {
		t.Errorf("input: %s", r)
	}
	st := e.start(&pb.RunRequest{Command: `head -c 3; echo; read -r line; echo "line=[$line]"; cat`, Stdin: true, Input: []byte("ab")})
	for _, in := range []string{"c", "next line\n", "tail"} {
		if _, err := e.c.SendInput(e.ctx(), connect.NewRequest(&pb.SendInputRequest{SessionId: e.id, Data: []byte(in)})); err != nil {
			t.Fatalf("SendInput %q: %v", in, err)
		}
	}
	if _, err := e.c.CloseInput(e.ctx(), connect.NewRequest(&pb.CloseInputRequest{SessionId: e.id})); err != nil {
		t.Fatalf("CloseInput: %v", err)
	}
	r = rest(st)
	if string(r.Stdout) != "abc\nline=[next line]\ntail" || r.End.GetExitCode() != 0 {
		t.Errorf("SendInput and CloseInput: %s", r)
	}
	// Input to a command that did not ask for stdin, or when none runs.
	st = e.start(&pb.RunRequest{Command: `sleep 1000`})
	_, err := e.c.SendInput(e.ctx(), connect.NewRequest(&pb.SendInputRequest{SessionId: e.id, Data: []byte("x")}))
	wantErr(t, err, connect.CodeFailedPrecondition, "stdin")
	e.interrupt()
	rest(st)
	_, err = e.c.SendInput(e.ctx(), connect.NewRequest(&pb.SendInputRequest{SessionId: e.id, Data: []byte("x")}))
	wantErr(t, err, connect.CodeFailedPrecondition, "no command runs")
	_, err = e.c.CloseInput(e.ctx(), connect.NewRequest(&pb.CloseInputRequest{SessionId: e.id}))
	wantErr(t, err, connect.CodeFailedPrecondition, "no command runs")
}

// interrupt interrupts the command running and fails unless one was.
func (e *env) interrupt() {
	e.t.Helper()
	res, err := e.c.Interrupt(e.ctx(), connect.NewRequest(&pb.InterruptRequest{SessionId: e.id}))
	if err != nil || !res.Msg.GetInterrupted() {
		e.t.Fatalf("Interrupt: %v, %v", res, err)
	}
}
