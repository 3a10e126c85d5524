package procconnect_test

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
	"github.com/envd-dev/envd/internal/process/processtest"
)

// TestBadInputs sends each bad request with the precise code and a message
// that says what is wrong, and checks the service still serves after each.
func TestBadInputs(t *testing.T) {
	t.Parallel()
	s := processtest.New(t, processtest.Options{})
	for _, cc := range processtest.ClientCases("") {
		t.Run(cc.Name, func(t *testing.T) {
			t.Parallel()
			testBadInputs(t, s, cc.Opts)
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
	noStdin := start(t, c, &pb.StartRequest{Process: processtest.Sh("exec sleep 30"), Stdin: ptr(false)})
	withStdin := start(t, c, &pb.StartRequest{Process: processtest.Sh("exec sleep 30"), Stdin: ptr(true)})
	onPTY := start(t, c, &pb.StartRequest{Process: processtest.Sh("exec sleep 30"), Pty: processtest.PTYSize(80, 24)})
	doneTag := processtest.UniqueTag("done")
	finished := start(t, c, &pb.StartRequest{Process: processtest.Sh("exit 0"), Tag: &doneTag})
	noStdinPid, withStdinPid, ptyPid, donePid := noStdin.Pid(t), withStdin.Pid(t), onPTY.Pid(t), finished.Pid(t)
	finished.End(t, waitShort)
	processtest.Eventually(t, waitShort, func() bool { return listed(t, c, donePid) == nil }, "ended pid %d still listed", donePid)

	const unknownPid = 999_999_999
	unknownTag := processtest.UniqueTag("unknown")
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	withCwd := func(cwd string) *pb.ProcessConfig { cfg := processtest.Sh("true"); cfg.Cwd = &cwd; return cfg }
	// withEnv would leave a mark if it ran: a bad request starts nothing.
	mark := filepath.Join(t.TempDir(), "started")
	t.Cleanup(func() {
		if _, err := os.Stat(mark); err == nil {
			t.Errorf("a request with a bad env started its process")
		}
	})
	withEnv := func(k, v string) *pb.ProcessConfig {
		cfg := processtest.Sh(`touch "$0"`, mark)
		cfg.Envs = map[string]string{k: v}
		return cfg
	}

	tests := []struct {
		name string
		call processtest.Call
		code connect.Code
		subs []string
	}{
		// Selectors.
		{"Connect unknown pid", processtest.ConnectCall(c, processtest.PidSel(unknownPid)), connect.CodeNotFound, []string{"process with pid 999999999 not found"}},
		{"Connect unknown tag", processtest.ConnectCall(c, processtest.TagSel(unknownTag)), connect.CodeNotFound, []string{"process with tag '" + unknownTag + "' not found"}},
		{"Connect no selector", processtest.ConnectCall(c, &pb.ProcessSelector{}), connect.CodeInvalidArgument, []string{"selector is missing"}},
		{"Connect nil process", processtest.ConnectCall(c, nil), connect.CodeInvalidArgument, []string{"selector is missing"}},
		{"SendInput unknown pid", processtest.SendInputCall(c, processtest.PidSel(unknownPid), processtest.StdinInput("x")), connect.CodeNotFound, []string{"999999999", "not found"}},
		{"SendInput unknown tag", processtest.SendInputCall(c, processtest.TagSel(unknownTag), processtest.StdinInput("x")), connect.CodeNotFound, []string{unknownTag, "not found"}},
		{"SendInput no selector", processtest.SendInputCall(c, nil, processtest.StdinInput("x")), connect.CodeInvalidArgument, []string{"selector is missing"}},
		{"SendSignal unknown pid", processtest.SendSignalCall(c, processtest.PidSel(unknownPid), pb.Signal_SIGNAL_SIGKILL), connect.CodeNotFound, []string{"999999999", "not found"}},
		{"SendSignal no selector", processtest.SendSignalCall(c, nil, pb.Signal_SIGNAL_SIGKILL), connect.CodeInvalidArgument, []string{"selector is missing"}},
		{"CloseStdin unknown pid", processtest.CloseStdinCall(c, processtest.PidSel(unknownPid)), connect.CodeNotFound, []string{"999999999", "not found"}},
		{"Update unknown pid", processtest.UpdateCall(c, processtest.PidSel(unknownPid), processtest.PTYSize(80, 24)), connect.CodeNotFound, []string{"999999999", "not found"}},
		{"StreamInput unknown pid", processtest.StreamInputCall(c, processtest.PidSel(unknownPid), processtest.StdinInput("x")), connect.CodeNotFound, []string{"999999999", "not found"}},
		{"StreamInput data before start", processtest.StreamInputCall(c, nil, processtest.StdinInput("x")), connect.CodeInvalidArgument, []string{"first message must be start"}},

		// Who runs it.
		{"unknown user, Start", processtest.StartCall(stranger, &pb.StartRequest{Process: processtest.Sh("true")}), connect.CodeUnauthenticated, []string{"invalid username: 'no-such-user-xyz'"}},
		{"unknown user, List", func(ctx context.Context) error {
			_, err := stranger.List(ctx, connect.NewRequest(&pb.ListRequest{}))
			return err
		}, connect.CodeUnauthenticated, []string{"no-such-user-xyz"}},

		// What to run.
		{"missing executable, absolute", processtest.StartCall(c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/no/such/bin"}}), connect.CodeInvalidArgument, []string{"/no/such/bin"}},
		{"missing executable, on PATH", processtest.StartCall(c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "no-such-command-xyz"}}), connect.CodeInvalidArgument, []string{"no-such-command-xyz", "executable not found"}},
		{"not executable", processtest.StartCall(c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: file}}), connect.CodeInvalidArgument, []string{file}},
		{"env name with '='", processtest.StartCall(c, &pb.StartRequest{Process: withEnv("A=B", "x")}), connect.CodeInvalidArgument, []string{`"A=B"`, "contains '='"}},
		{"env name empty", processtest.StartCall(c, &pb.StartRequest{Process: withEnv("", "x")}), connect.CodeInvalidArgument, []string{"name is empty"}},
		{"env name with NUL", processtest.StartCall(c, &pb.StartRequest{Process: withEnv("A\x00B", "x")}), connect.CodeInvalidArgument, []string{`"A\x00B"`, "NUL"}},
		{"env value with NUL", processtest.StartCall(c, &pb.StartRequest{Process: withEnv("GOOD", "a\x00b")}), connect.CodeInvalidArgument, []string{`"GOOD"`, "NUL"}},
		{"arg with NUL", processtest.StartCall(c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/echo", Args: []string{"a\x00b"}}}), connect.CodeInvalidArgument, []string{"args[0]", "NUL"}},
		{"empty cmd", processtest.StartCall(c, &pb.StartRequest{Process: &pb.ProcessConfig{}}), connect.CodeInvalidArgument, []string{"cmd is empty"}},
		{"no process", processtest.StartCall(c, &pb.StartRequest{}), connect.CodeInvalidArgument, []string{"process is missing"}},
		{"cwd missing", processtest.StartCall(c, &pb.StartRequest{Process: withCwd("/no/such/dir")}), connect.CodeInvalidArgument, []string{"cwd '/no/such/dir' does not exist"}},
		{"cwd a file", processtest.StartCall(c, &pb.StartRequest{Process: withCwd(file)}), connect.CodeInvalidArgument, []string{"cwd '" + file + "' is not a directory"}},
		{"cwd ~other", processtest.StartCall(c, &pb.StartRequest{Process: withCwd("~nobody/x")}), connect.CodeInvalidArgument, []string{"~nobody/x"}},
		{"Start pty size 0", processtest.StartCall(c, &pb.StartRequest{Process: processtest.Sh("true"), Pty: processtest.PTYSize(0, 24)}), connect.CodeInvalidArgument, []string{"0x24", "at least 1"}},
		{"Start pty size missing", processtest.StartCall(c, &pb.StartRequest{Process: processtest.Sh("true"), Pty: &pb.PTY{}}), connect.CodeInvalidArgument, []string{"0x0"}},
		{"Start pty too large", processtest.StartCall(c, &pb.StartRequest{Process: processtest.Sh("true"), Pty: processtest.PTYSize(70000, 24)}), connect.CodeInvalidArgument, []string{"70000x24", "too large"}},

		// Input, by the state of the process.
		{"input to a finished process", processtest.SendInputCall(c, processtest.PidSel(donePid), processtest.StdinInput("x")), connect.CodeNotFound, []string{strconv.Itoa(int(donePid)), "exited"}},
		{"input to a finished process, by tag", processtest.SendInputCall(c, processtest.TagSel(doneTag), processtest.StdinInput("x")), connect.CodeNotFound, []string{doneTag, "exited"}},
		{"signal to a finished process", processtest.SendSignalCall(c, processtest.PidSel(donePid), pb.Signal_SIGNAL_SIGTERM), connect.CodeNotFound, []string{"exited"}},
		{"stdin without stdin", processtest.SendInputCall(c, processtest.PidSel(noStdinPid), processtest.StdinInput("x")), connect.CodeFailedPrecondition, []string{"stdin", "not enabled or already closed"}},
		{"stdin to a pty", processtest.SendInputCall(c, processtest.PidSel(ptyPid), processtest.StdinInput("x")), connect.CodeFailedPrecondition, []string{"terminal", "pty input"}},
		{"pty input to pipes", processtest.SendInputCall(c, processtest.PidSel(withStdinPid), processtest.PTYInput("x")), connect.CodeFailedPrecondition, []string{"no terminal"}},
		{"input missing", processtest.SendInputCall(c, processtest.PidSel(withStdinPid), &pb.ProcessInput{}), connect.CodeInvalidArgument, []string{"input is missing"}},
		{"StreamInput stdin to a pty", processtest.StreamInputCall(c, processtest.PidSel(ptyPid), processtest.StdinInput("x")), connect.CodeFailedPrecondition, []string{"terminal"}},
		{"CloseStdin on a pty", processtest.CloseStdinCall(c, processtest.PidSel(ptyPid)), connect.CodeFailedPrecondition, []string{"Ctrl+D"}},
		{"Update size 0", processtest.UpdateCall(c, processtest.PidSel(ptyPid), processtest.PTYSize(100, 0)), connect.CodeInvalidArgument, []string{"100x0", "at least 1"}},
		{"Update too large", processtest.UpdateCall(c, processtest.PidSel(ptyPid), processtest.PTYSize(100, 1<<20)), connect.CodeInvalidArgument, []string{"too large"}},
		{"Update pty of pipes", processtest.UpdateCall(c, processtest.PidSel(withStdinPid), processtest.PTYSize(100, 30)), connect.CodeFailedPrecondition, []string{"no terminal"}},
		{"unknown signal", processtest.SendSignalCall(c, processtest.PidSel(withStdinPid), pb.Signal_SIGNAL_UNSPECIFIED), connect.CodeInvalidArgument, []string{"invalid signal", "SIGNAL_UNSPECIFIED"}},
		{"signal number not in the enum", processtest.SendSignalCall(c, processtest.PidSel(withStdinPid), pb.Signal(4)), connect.CodeInvalidArgument, []string{"invalid signal", "SIGNAL_SIGHUP", "SIGNAL_SIGCONT"}},
	}
	for _, tc := range tests {
		err := tc.call(bounded(t))
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, err, tc.code, tc.subs...)
		})
		// Still serving: a process runs and ends as it should.
		w := start(t, c, &pb.StartRequest{Process: processtest.Sh("echo alive")})
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
	if s := start(t, c, &pb.StartRequest{Process: processtest.Sh("echo alive")}).End(t, waitShort); s.Stdout != "alive\n" {
		t.Fatalf("after malformed bodies: stdout = %q", s.Stdout)
	}
}
