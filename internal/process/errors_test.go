package process_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/gen/process/processconnect"
	"github.com/envd-dev/envd/internal/process/processtest"
)

// TestBadInputs sends each bad request with the precise code and a message
// that says what is wrong, and checks the service still serves after each.
func TestBadInputs(t *testing.T) {
	t.Parallel()
	s := processtest.New(t, processtest.Options{})
	for _, cc := range clientCases("") {
		t.Run(cc.name, func(t *testing.T) {
			t.Parallel()
			testBadInputs(t, s, cc.opts)
		})
	}
}

func testBadInputs(t *testing.T, s *processtest.Server, opts processtest.ClientOptions) {
	c := s.Client(t, opts)
	notAUser := opts
	notAUser.User = "no-such-user-xyz"
	stranger := s.Client(t, notAUser)

	// The processes the cases act on: running ones of each kind, and one
	// that ended.
	noStdin := start(t, c, &pb.StartRequest{Process: sh("exec sleep 30"), Stdin: ptr(false)})
	withStdin := start(t, c, &pb.StartRequest{Process: sh("exec sleep 30"), Stdin: ptr(true)})
	onPTY := start(t, c, &pb.StartRequest{Process: sh("exec sleep 30"), Pty: ptySize(80, 24)})
	doneTag := uniqueTag("done")
	finished := start(t, c, &pb.StartRequest{Process: sh("exit 0"), Tag: &doneTag})
	noStdinPid, withStdinPid, ptyPid, donePid := noStdin.Pid(t), withStdin.Pid(t), onPTY.Pid(t), finished.Pid(t)
	finished.End(t, waitShort)
	processtest.Eventually(t, waitShort, func() bool { return listed(t, c, donePid) == nil }, "ended pid %d still listed", donePid)

	const unknownPid = 999_999_999
	unknownTag := uniqueTag("unknown")
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	withCwd := func(cwd string) *pb.ProcessConfig { cfg := sh("true"); cfg.Cwd = &cwd; return cfg }
	// withEnv would leave a mark if it ran: a bad request starts nothing.
	mark := filepath.Join(t.TempDir(), "started")
	t.Cleanup(func() {
		if _, err := os.Stat(mark); err == nil {
			t.Errorf("a request with a bad env started its process")
		}
	})
	withEnv := func(k, v string) *pb.ProcessConfig {
		cfg := sh(`touch "$0"`, mark)
		cfg.Envs = map[string]string{k: v}
		return cfg
	}

	tests := []struct {
		name string
		call func(context.Context) error
		code connect.Code
		subs []string
	}{
		// Selectors.
		{"Connect unknown pid", connectCall(c, pidSel(unknownPid)), connect.CodeNotFound, []string{"process with pid 999999999 not found"}},
		{"Connect unknown tag", connectCall(c, tagSel(unknownTag)), connect.CodeNotFound, []string{"process with tag '" + unknownTag + "' not found"}},
		{"Connect no selector", connectCall(c, &pb.ProcessSelector{}), connect.CodeInvalidArgument, []string{"selector is missing"}},
		{"Connect nil process", connectCall(c, nil), connect.CodeInvalidArgument, []string{"selector is missing"}},
		{"SendInput unknown pid", sendInput(c, pidSel(unknownPid), stdinInput("x")), connect.CodeNotFound, []string{"999999999", "not found"}},
		{"SendInput unknown tag", sendInput(c, tagSel(unknownTag), stdinInput("x")), connect.CodeNotFound, []string{unknownTag, "not found"}},
		{"SendInput no selector", sendInput(c, nil, stdinInput("x")), connect.CodeInvalidArgument, []string{"selector is missing"}},
		{"SendSignal unknown pid", sendSignal(c, pidSel(unknownPid), pb.Signal_SIGNAL_SIGKILL), connect.CodeNotFound, []string{"999999999", "not found"}},
		{"SendSignal no selector", sendSignal(c, nil, pb.Signal_SIGNAL_SIGKILL), connect.CodeInvalidArgument, []string{"selector is missing"}},
		{"CloseStdin unknown pid", closeStdin(c, pidSel(unknownPid)), connect.CodeNotFound, []string{"999999999", "not found"}},
		{"Update unknown pid", update(c, pidSel(unknownPid), ptySize(80, 24)), connect.CodeNotFound, []string{"999999999", "not found"}},
		{"StreamInput unknown pid", streamInputCall(c, pidSel(unknownPid), stdinInput("x")), connect.CodeNotFound, []string{"999999999", "not found"}},
		{"StreamInput data before start", streamInputCall(c, nil, stdinInput("x")), connect.CodeInvalidArgument, []string{"first message must be start"}},

		// Who runs it.
		{"unknown user, Start", startCall(stranger, &pb.StartRequest{Process: sh("true")}), connect.CodeUnauthenticated, []string{"invalid username: 'no-such-user-xyz'"}},
		{"unknown user, List", func(ctx context.Context) error {
			_, err := stranger.List(ctx, connect.NewRequest(&pb.ListRequest{}))
			return err
		}, connect.CodeUnauthenticated, []string{"no-such-user-xyz"}},

		// What to run.
		{"missing executable, absolute", startCall(c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/no/such/bin"}}), connect.CodeInvalidArgument, []string{"/no/such/bin"}},
		{"missing executable, on PATH", startCall(c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "no-such-command-xyz"}}), connect.CodeInvalidArgument, []string{"no-such-command-xyz", "executable not found"}},
		{"not executable", startCall(c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: file}}), connect.CodeInvalidArgument, []string{file}},
		{"env name with '='", startCall(c, &pb.StartRequest{Process: withEnv("A=B", "x")}), connect.CodeInvalidArgument, []string{`"A=B"`, "contains '='"}},
		{"env name empty", startCall(c, &pb.StartRequest{Process: withEnv("", "x")}), connect.CodeInvalidArgument, []string{"name is empty"}},
		{"env name with NUL", startCall(c, &pb.StartRequest{Process: withEnv("A\x00B", "x")}), connect.CodeInvalidArgument, []string{`"A\x00B"`, "NUL"}},
		{"env value with NUL", startCall(c, &pb.StartRequest{Process: withEnv("GOOD", "a\x00b")}), connect.CodeInvalidArgument, []string{`"GOOD"`, "NUL"}},
		{"arg with NUL", startCall(c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/echo", Args: []string{"a\x00b"}}}), connect.CodeInvalidArgument, []string{"args[0]", "NUL"}},
		{"empty cmd", startCall(c, &pb.StartRequest{Process: &pb.ProcessConfig{}}), connect.CodeInvalidArgument, []string{"cmd is empty"}},
		{"no process", startCall(c, &pb.StartRequest{}), connect.CodeInvalidArgument, []string{"process is missing"}},
		{"cwd missing", startCall(c, &pb.StartRequest{Process: withCwd("/no/such/dir")}), connect.CodeInvalidArgument, []string{"cwd '/no/such/dir' does not exist"}},
		{"cwd a file", startCall(c, &pb.StartRequest{Process: withCwd(file)}), connect.CodeInvalidArgument, []string{"cwd '" + file + "' is not a directory"}},
		{"cwd ~other", startCall(c, &pb.StartRequest{Process: withCwd("~nobody/x")}), connect.CodeInvalidArgument, []string{"~nobody/x"}},
		{"Start pty size 0", startCall(c, &pb.StartRequest{Process: sh("true"), Pty: ptySize(0, 24)}), connect.CodeInvalidArgument, []string{"0x24", "at least 1"}},
		{"Start pty size missing", startCall(c, &pb.StartRequest{Process: sh("true"), Pty: &pb.PTY{}}), connect.CodeInvalidArgument, []string{"0x0"}},
		{"Start pty too large", startCall(c, &pb.StartRequest{Process: sh("true"), Pty: ptySize(70000, 24)}), connect.CodeInvalidArgument, []string{"70000x24", "too large"}},

		// Input, by the state of the process.
		{"input to a finished process", sendInput(c, pidSel(donePid), stdinInput("x")), connect.CodeNotFound, []string{strconv.Itoa(int(donePid)), "exited"}},
		{"input to a finished process, by tag", sendInput(c, tagSel(doneTag), stdinInput("x")), connect.CodeNotFound, []string{doneTag, "exited"}},
		{"signal to a finished process", sendSignal(c, pidSel(donePid), pb.Signal_SIGNAL_SIGTERM), connect.CodeNotFound, []string{"exited"}},
		{"stdin without stdin", sendInput(c, pidSel(noStdinPid), stdinInput("x")), connect.CodeFailedPrecondition, []string{"stdin", "not enabled or already closed"}},
		{"stdin to a pty", sendInput(c, pidSel(ptyPid), stdinInput("x")), connect.CodeFailedPrecondition, []string{"terminal", "pty input"}},
		{"pty input to pipes", sendInput(c, pidSel(withStdinPid), ptyInput("x")), connect.CodeFailedPrecondition, []string{"no terminal"}},
		{"input missing", sendInput(c, pidSel(withStdinPid), &pb.ProcessInput{}), connect.CodeInvalidArgument, []string{"input is missing"}},
		{"StreamInput stdin to a pty", streamInputCall(c, pidSel(ptyPid), stdinInput("x")), connect.CodeFailedPrecondition, []string{"terminal"}},
		{"CloseStdin on a pty", closeStdin(c, pidSel(ptyPid)), connect.CodeFailedPrecondition, []string{"Ctrl+D"}},
		{"Update size 0", update(c, pidSel(ptyPid), ptySize(100, 0)), connect.CodeInvalidArgument, []string{"100x0", "at least 1"}},
		{"Update too large", update(c, pidSel(ptyPid), ptySize(100, 1<<20)), connect.CodeInvalidArgument, []string{"too large"}},
		{"Update pty of pipes", update(c, pidSel(withStdinPid), ptySize(100, 30)), connect.CodeFailedPrecondition, []string{"no terminal"}},
		{"unknown signal", sendSignal(c, pidSel(withStdinPid), pb.Signal_SIGNAL_UNSPECIFIED), connect.CodeInvalidArgument, []string{"invalid signal", "SIGNAL_UNSPECIFIED"}},
		{"signal number not in the enum", sendSignal(c, pidSel(withStdinPid), pb.Signal(4)), connect.CodeInvalidArgument, []string{"invalid signal", "SIGNAL_SIGHUP", "SIGNAL_SIGCONT"}},
	}
	for _, tc := range tests {
		err := tc.call(bounded(t))
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, err, tc.code, tc.subs...)
		})
		// Still serving: a process runs and ends as it should.
		w := start(t, c, &pb.StartRequest{Process: sh("echo alive")})
		if s := w.End(t, waitShort); s.Stdout != "alive\n" {
			t.Fatalf("after %s: stdout = %q", tc.name, s.Stdout)
		}
	}
	// None of the bad requests touched the running processes.
	for _, pid := range []uint32{noStdinPid, withStdinPid, ptyPid} {
		if listed(t, c, pid) == nil {
			t.Errorf("process %d ended", pid)
		}
	}
}

func connectCall(c processconnect.ProcessClient, sel *pb.ProcessSelector) func(context.Context) error {
	return func(ctx context.Context) error {
		st, err := c.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: sel}))
		if err != nil {
			return err
		}
		return drain(st)
	}
}

func startCall(c processconnect.ProcessClient, req *pb.StartRequest) func(context.Context) error {
	return func(ctx context.Context) error {
		st, err := c.Start(ctx, connect.NewRequest(req))
		if err != nil {
			return err
		}
		return drain(st)
	}
}

// drain reads a stream that should fail at once; a start event means the
// bad request was accepted.
func drain[T any, PT interface {
	*T
	processtest.Event
}](st *connect.ServerStreamForClient[T]) error {
	defer st.Close()
	for st.Receive() {
		if PT(st.Msg()).GetEvent().GetStart() != nil {
			return errAccepted
		}
	}
	return st.Err()
}

var errAccepted = connect.NewError(connect.CodeUnknown, io.ErrUnexpectedEOF)

func sendInput(c processconnect.ProcessClient, sel *pb.ProcessSelector, in *pb.ProcessInput) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: in}))
		return err
	}
}

func sendSignal(c processconnect.ProcessClient, sel *pb.ProcessSelector, sig pb.Signal) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: sel, Signal: sig}))
		return err
	}
}

func closeStdin(c processconnect.ProcessClient, sel *pb.ProcessSelector) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: sel}))
		return err
	}
}

func update(c processconnect.ProcessClient, sel *pb.ProcessSelector, pty *pb.PTY) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.Update(ctx, connect.NewRequest(&pb.UpdateRequest{Process: sel, Pty: pty}))
		return err
	}
}

// streamInputCall sends start (when sel is set) and one data message.
func streamInputCall(c processconnect.ProcessClient, sel *pb.ProcessSelector, in *pb.ProcessInput) func(context.Context) error {
	return func(ctx context.Context) error {
		st := c.StreamInput(ctx)
		if sel != nil {
			st.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: sel}}})
		}
		st.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: in}}})
		_, err := st.CloseAndReceive()
		return err
	}
}

// TestMalformedBody posts a body that is not JSON: HTTP 400 with a Connect
// invalid_argument error, and the service goes on.
func TestMalformedBody(t *testing.T) {
	t.Parallel()
	s := processtest.New(t, processtest.Options{})
	hc := processtest.HTTPClient(t, processtest.HTTP1, "", nil)
	for _, path := range []string{"/process.Process/List", "/process.Process/SendInput", "/process.Process/SendSignal"} {
		t.Run(path, func(t *testing.T) {
			req, err := http.NewRequestWithContext(bounded(t), http.MethodPost, s.URL+path, strings.NewReader("{bad"))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			res, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != http.StatusBadRequest {
				t.Errorf("status = %d, want 400; body %s", res.StatusCode, body)
			}
			var e struct{ Code, Message string }
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("body %q is not a Connect error: %v", body, err)
			}
			if e.Code != "invalid_argument" || e.Message == "" {
				t.Errorf("error = %+v, want invalid_argument with a message", e)
			}
		})
	}
	c := s.Client(t, processtest.ClientOptions{Codec: processtest.JSON})
	if s := start(t, c, &pb.StartRequest{Process: sh("echo alive")}).End(t, waitShort); s.Stdout != "alive\n" {
		t.Fatalf("after malformed bodies: stdout = %q", s.Stdout)
	}
}
