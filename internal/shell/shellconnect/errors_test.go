package shellconnect_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/envd-dev/envd/gen/envd/shell/v1"
	"github.com/envd-dev/envd/internal/shell"
	"github.com/envd-dev/envd/internal/shell/shelltest"
)

// TestBadInput: each RPC refuses a bad request with a precise code and a
// message that says what is wrong, and changes nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shelltest.Options{Shell: shell.Options{MaxSessions: 2}}, &pb.CreateRequest{})
	ctx := e.ctx()
	const unknown = "0123456789abcdef"
	unary := []struct {
		name string
		call func() error
		code connect.Code
		subs []string
	}{
		{"Create, unknown user", func() error {
			_, err := e.c.Create(ctx, connect.NewRequest(&pb.CreateRequest{User: "no-such-user-xyz"}))
			return err
		}, connect.CodeInvalidArgument, []string{"no-such-user-xyz", "does not exist"}},
		{"Create, missing cwd", func() error {
			_, err := e.c.Create(ctx, connect.NewRequest(&pb.CreateRequest{Cwd: "/no/such/dir"}))
			return err
		}, connect.CodeInvalidArgument, []string{"/no/such/dir", "does not exist"}},
		{"Create, cwd a file", func() error {
			_, err := e.c.Create(ctx, connect.NewRequest(&pb.CreateRequest{Cwd: "/etc/passwd"}))
			return err
		}, connect.CodeInvalidArgument, []string{"not a directory"}},
		{"Create, another user's home", func() error {
			_, err := e.c.Create(ctx, connect.NewRequest(&pb.CreateRequest{Cwd: "~other/x"}))
			return err
		}, connect.CodeInvalidArgument, []string{"another user"}},
		{"Create, bad env name", func() error {
			_, err := e.c.Create(ctx, connect.NewRequest(&pb.CreateRequest{Env: map[string]string{"A=B": "c"}}))
			return err
		}, connect.CodeInvalidArgument, []string{"A=B"}},
		{"Create, terminal 0x0", func() error {
			_, err := e.c.Create(ctx, connect.NewRequest(&pb.CreateRequest{Pty: &pb.TerminalSize{}}))
			return err
		}, connect.CodeInvalidArgument, []string{"terminal size"}},
		{"Create, terminal too large", func() error {
			_, err := e.c.Create(ctx, connect.NewRequest(&pb.CreateRequest{Pty: &pb.TerminalSize{Cols: 1 << 20, Rows: 1}}))
			return err
		}, connect.CodeInvalidArgument, []string{"too large"}},
		{"SendInput, unknown session", func() error {
			_, err := e.c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{SessionId: unknown}))
			return err
		}, connect.CodeNotFound, []string{unknown}},
		{"CloseInput, unknown session", func() error {
			_, err := e.c.CloseInput(ctx, connect.NewRequest(&pb.CloseInputRequest{SessionId: unknown}))
			return err
		}, connect.CodeNotFound, []string{unknown}},
		{"Interrupt, unknown session", func() error {
			_, err := e.c.Interrupt(ctx, connect.NewRequest(&pb.InterruptRequest{SessionId: unknown}))
			return err
		}, connect.CodeNotFound, []string{unknown}},
		{"State, unknown session", func() error {
			_, err := e.c.State(ctx, connect.NewRequest(&pb.StateRequest{SessionId: unknown}))
			return err
		}, connect.CodeNotFound, []string{unknown}},
		{"State, no session id", func() error {
			_, err := e.c.State(ctx, connect.NewRequest(&pb.StateRequest{}))
			return err
		}, connect.CodeInvalidArgument, []string{"session_id"}},
		{"Close, unknown session", func() error {
			_, err := e.c.Close(ctx, connect.NewRequest(&pb.CloseRequest{SessionId: unknown}))
			return err
		}, connect.CodeNotFound, []string{unknown}},
		{"Close, no session id", func() error {
			_, err := e.c.Close(ctx, connect.NewRequest(&pb.CloseRequest{}))
			return err
		}, connect.CodeInvalidArgument, []string{"session_id"}},
	}
	for _, c := range unary {
		wantErr(t, c.call(), c.code, c.subs...)
	}
	streams := []struct {
		name string
		req  *pb.RunRequest
		code connect.Code
		subs []string
	}{
		{"unknown session", &pb.RunRequest{SessionId: unknown, Command: "true"}, connect.CodeNotFound, []string{unknown}},
		{"no session id", &pb.RunRequest{Command: "true"}, connect.CodeInvalidArgument, []string{"session_id"}},
		{"empty command", &pb.RunRequest{SessionId: e.id}, connect.CodeInvalidArgument, []string{"command is empty"}},
		{"NUL in command", &pb.RunRequest{SessionId: e.id, Command: "echo \x00"}, connect.CodeInvalidArgument, []string{"NUL"}},
		{"negative timeout", &pb.RunRequest{SessionId: e.id, Command: "true", Timeout: durationpb.New(-time.Second)}, connect.CodeInvalidArgument, []string{"negative"}},
		{"invalid timeout", &pb.RunRequest{SessionId: e.id, Command: "true", Timeout: &durationpb.Duration{Seconds: 1, Nanos: -1}}, connect.CodeInvalidArgument, []string{"timeout"}},
	}
	for _, c := range streams {
		r := shelltest.Run(t, e.c, c.req)
		wantErr(t, r.Err, c.code, c.subs...)
	}
	cctx, cancel := context.WithTimeout(context.Background(), waitShort)
	defer cancel()
	_, err := e.c.Connect(cctx, connect.NewRequest(&pb.ConnectRequest{SessionId: e.id, CommandId: unknown}))
	if err == nil {
		st, _ := e.c.Connect(cctx, connect.NewRequest(&pb.ConnectRequest{SessionId: e.id, CommandId: unknown}))
		err = shelltest.Read(st, (*pb.ConnectResponse).GetEvent).Err
	}
	wantErr(t, err, connect.CodeNotFound, unknown)
	st, err := e.c.Connect(cctx, connect.NewRequest(&pb.ConnectRequest{SessionId: e.id}))
	if err == nil {
		err = shelltest.Read(st, (*pb.ConnectResponse).GetEvent).Err
	}
	wantErr(t, err, connect.CodeNotFound, "no command yet")
	// The session is as it was, and works.
	if r := e.runOK("echo ok"); string(r.Stdout) != "ok\n" {
		t.Errorf("after the bad requests: %s", r)
	}
	// The second session is the last that fits.
	shelltest.Create(t, e.c, &pb.CreateRequest{})
	_, err = e.c.Create(ctx, connect.NewRequest(&pb.CreateRequest{}))
	wantErr(t, err, connect.CodeResourceExhausted, "2 sessions")
}
