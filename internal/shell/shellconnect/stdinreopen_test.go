package shellconnect_test

import (
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/envd/shell/v1"
	"github.com/envd-dev/envd/internal/shell/shelltest"
)

// TestStdinReopenAfterCloseInput: a program that opens /dev/stdin by name
// (cat /dev/stdin, jq . /dev/stdin, node's readFileSync('/dev/stdin'),
// python's open('/dev/stdin')) after the client already sent its input and
// CloseInput reads that input, then end-of-file, as it does with a
// process.Process stdin pipe or bash's own pipes (`printf hello | { sleep
// 0.5; cat /dev/stdin; }`). With the FIFO its open waits for a writer
// that never comes: the command hangs until its timeout.
func TestStdinReopenAfterCloseInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shelltest.Options{}, &pb.CreateRequest{})
	st := e.start(&pb.RunRequest{Command: `sleep 0.5; cat /dev/stdin`, Stdin: true, Timeout: dur(5 * time.Second)})
	if _, err := e.c.SendInput(e.ctx(), connect.NewRequest(&pb.SendInputRequest{SessionId: e.id, Data: []byte("hello")})); err != nil {
		t.Fatalf("SendInput: %v", err)
	}
	if _, err := e.c.CloseInput(e.ctx(), connect.NewRequest(&pb.CloseInputRequest{SessionId: e.id})); err != nil {
		t.Fatalf("CloseInput: %v", err)
	}
	r := rest(st)
	if string(r.Stdout) != "hello" || r.End.GetReason() != pb.EndReason_END_REASON_EXITED || r.End.GetExitCode() != 0 {
		t.Errorf("cat /dev/stdin after SendInput and CloseInput: %s", r)
	}
}
