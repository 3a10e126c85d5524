package shellconnect_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/envd-dev/envd/gen/envd/shell/v1"
	"github.com/envd-dev/envd/gen/envd/shell/v1/shellv1connect"
	ppb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/gen/process/processconnect"
	"github.com/envd-dev/envd/internal/process/processtest"
	"github.com/envd-dev/envd/internal/procstat"
	"github.com/envd-dev/envd/internal/shell/shelltest"
)

// The service's tests run the real thing end to end: real bash, the real
// process manager, the adapter served over HTTP (shelltest), driven
// through the generated client.

const (
	waitShort = shelltest.WaitShort
	waitLong  = shelltest.WaitLong
)

// grace is the tests' InterruptGrace: long enough for a loaded machine's
// shell to answer SIGINT, short enough for a test that waits it out.
const grace = 500 * time.Millisecond

// env is one test's server, client and session.
type env struct {
	t   *testing.T
	srv *shelltest.Server
	c   shellv1connect.ShellServiceClient
	id  string
	// started is the started event of the last start.
	started *pb.Started
}

// newEnv serves a fresh service with o and opens a session with req.
func newEnv(t *testing.T, o shelltest.Options, req *pb.CreateRequest) *env {
	t.Helper()
	if o.Shell.InterruptGrace == 0 {
		o.Shell.InterruptGrace = grace
	}
	srv := shelltest.New(t, o)
	c := srv.Client(t, processtest.ClientOptions{})
	e := &env{t: t, srv: srv, c: c}
	if req != nil {
		e.id = shelltest.Create(t, c, req)
	}
	return e
}

// run runs command in the session and reads its stream.
func (e *env) run(command string) shelltest.Result {
	e.t.Helper()
	return shelltest.Run(e.t, e.c, &pb.RunRequest{SessionId: e.id, Command: command})
}

// runOK runs command and fails the test unless it exited 0.
func (e *env) runOK(command string) shelltest.Result {
	e.t.Helper()
	r := e.run(command)
	if r.Err != nil || r.End.GetReason() != pb.EndReason_END_REASON_EXITED || r.End.GetExitCode() != 0 {
		e.t.Fatalf("%q: %s", command, r)
	}
	return r
}

// start starts command and returns its stream once it has started (the
// started event is e.started).
func (e *env) start(req *pb.RunRequest) *connect.ServerStreamForClient[pb.RunResponse] {
	e.t.Helper()
	if req.SessionId == "" {
		req.SessionId = e.id
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	e.t.Cleanup(cancel)
	st, err := e.c.Run(ctx, connect.NewRequest(req))
	if err != nil {
		e.t.Fatalf("Run %q: %v", req.Command, err)
	}
	for st.Receive() {
		if e.started = st.Msg().GetEvent().GetStarted(); e.started != nil {
			return st
		}
	}
	e.t.Fatalf("Run %q: no started event: %v", req.Command, st.Err())
	return nil
}

// rest reads a started stream to its end.
func rest(st *connect.ServerStreamForClient[pb.RunResponse]) shelltest.Result {
	return shelltest.Read(st, (*pb.RunResponse).GetEvent)
}

func (e *env) ctx() context.Context { return processtest.Context(e.t, waitShort) }

// state is the session's State.
func (e *env) state() *pb.StateResponse {
	e.t.Helper()
	res, err := e.c.State(e.ctx(), connect.NewRequest(&pb.StateRequest{SessionId: e.id}))
	if err != nil {
		e.t.Fatalf("State: %v", err)
	}
	return res.Msg
}

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

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
	for _, s := range subs {
		if !strings.Contains(ce.Message(), s) {
			t.Errorf("message %q does not contain %q", ce.Message(), s)
		}
	}
}

// wantEnd checks a result's end.
func wantEnd(t *testing.T, r shelltest.Result, reason pb.EndReason, code int32) {
	t.Helper()
	if r.Err != nil || r.End.GetReason() != reason || r.End.GetExitCode() != code {
		t.Errorf("end: want %v, exit %d; got %s", reason, code, r)
	}
}

func connectReq[T any](m *T) *connect.Request[T] { return connect.NewRequest(m) }

// procAlive tells whether p still runs (not a zombie, not a new process
// with its pid).
func procAlive(p procstat.Stat) bool {
	now, err := procstat.Read(p.Pid)
	return err == nil && now.Start == p.Start && now.State != 'Z'
}

func asConnect(err error, ce **connect.Error) bool { return errors.As(err, ce) }

// processList lists the tags of the processes c sees.
func processList(t *testing.T, c processconnect.ProcessClient) []string {
	t.Helper()
	res, err := c.List(processtest.Context(t, waitShort), connect.NewRequest(&ppb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, p := range res.Msg.GetProcesses() {
		tags = append(tags, p.GetTag())
	}
	return tags
}
