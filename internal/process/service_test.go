package process_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/gen/process/processconnect"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/process/processtest"
)

// rpcTest is one behavior checked for every client case.
type rpcTest struct {
	name string
	run  func(t *testing.T, c processconnect.ProcessClient, u *identity.User)
}

// TestRPCs checks every RPC, over both HTTP versions and both codecs, as
// root and as `user`, against one server, all at once.
func TestRPCs(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	s := processtest.New(t, processtest.Options{})
	tests := []rpcTest{
		{"exit codes", testExitCodes},
		{"SendSignal", testSendSignal},
		{"SendInput stdin and CloseStdin", testStdin},
		{"stdin flag", testStdinFlag},
		{"StreamInput stdin", testStreamInputStdin},
		{"pty, Update and SendInput pty", testPTYResize},
		{"StreamInput pty", testStreamInputPTY},
		{"env", testEnv},
		{"cwd", testCwd},
		{"identity", testIdentity},
		{"List", testList},
		{"Connect by pid and tag", testConnect},
	}
	for _, cc := range processtest.ClientCases("root", "user") {
		t.Run(cc.Name, func(t *testing.T) {
			t.Parallel()
			c := s.Client(t, cc.Opts)
			u := lookup(t, cc.Opts.User)
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.run(t, c, u)
				})
			}
		})
	}
}

func testExitCodes(t *testing.T, c processconnect.ProcessClient, _ *identity.User) {
	for _, tc := range []struct {
		name, script   string
		stdout, stderr string
		want           end
	}{
		{"exit 0", "echo out; echo err >&2", "out\n", "err\n", exit0},
		{"exit 3", "echo out; echo err >&2; exit 3", "out\n", "err\n", end{3, true, "exit status 3"}},
		{"SIGKILL itself", "echo out; kill -KILL $$", "out\n", "", killed},
		{"SIGTERM itself", "echo out; kill -TERM $$", "out\n", "", end{-1, false, "signal: terminated"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := start(t, c, &pb.StartRequest{Process: processtest.Sh(tc.script)})
			s := w.End(t, waitShort)
			checkEnd(t, s, tc.want)
			if s.Stdout != tc.stdout || s.Stderr != tc.stderr || s.PTY != "" {
				t.Errorf("output: stdout %q stderr %q pty %q, want stdout %q stderr %q", s.Stdout, s.Stderr, s.PTY, tc.stdout, tc.stderr)
			}
		})
	}
}

func testSendSignal(t *testing.T, c processconnect.ProcessClient, _ *identity.User) {
	for _, tc := range []struct {
		signal pb.Signal
		want   end
	}{
		{pb.Signal_SIGNAL_SIGKILL, killed},
		{pb.Signal_SIGNAL_SIGTERM, end{-1, false, "signal: terminated"}},
		// Beyond upstream's two.
		{pb.Signal_SIGNAL_SIGHUP, end{-1, false, "signal: hangup"}},
		{pb.Signal_SIGNAL_SIGINT, end{-1, false, "signal: interrupt"}},
		{pb.Signal_SIGNAL_SIGUSR1, end{-1, false, "signal: user defined signal 1"}},
	} {
		t.Run(tc.signal.String(), func(t *testing.T) {
			t.Parallel()
			w := start(t, c, &pb.StartRequest{Process: processtest.Sh("echo ready; exec sleep 30")})
			pid := w.Pid(t)
			w.Output(t, waitShort, "ready")
			if _, err := c.SendSignal(bounded(t), connect.NewRequest(&pb.SendSignalRequest{Process: processtest.PidSel(pid), Signal: tc.signal})); err != nil {
				t.Fatalf("SendSignal: %v", err)
			}
			checkEnd(t, w.End(t, waitShort), tc.want)
			// Once it ended, the pid is gone for signals.
			processtest.Eventually(t, waitShort, func() bool { return listed(t, c, pid) == nil }, "pid %d still listed", pid)
			_, err := c.SendSignal(bounded(t), connect.NewRequest(&pb.SendSignalRequest{Process: processtest.PidSel(pid), Signal: tc.signal}))
			wantErr(t, err, connect.CodeNotFound, strconv.Itoa(int(pid)), "exited")
		})
	}
}

func testStdin(t *testing.T, c processconnect.ProcessClient, _ *identity.User) {
	// stdin unset means a pipe, as upstream's default.
	w := start(t, c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "cat"}})
	pid := w.Pid(t)
	for _, in := range []string{"abc\n", "", "def"} { // empty input is allowed
		if _, err := c.SendInput(bounded(t), connect.NewRequest(&pb.SendInputRequest{Process: processtest.PidSel(pid), Input: processtest.StdinInput(in)})); err != nil {
			t.Fatalf("SendInput %q: %v", in, err)
		}
	}
	w.Output(t, waitShort, "abc\ndef")
	if _, err := c.CloseStdin(bounded(t), connect.NewRequest(&pb.CloseStdinRequest{Process: processtest.PidSel(pid)})); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	s := w.End(t, waitShort)
	checkEnd(t, s, exit0)
	if s.Stdout != "abc\ndef" {
		t.Errorf("stdout = %q, want %q", s.Stdout, "abc\ndef")
	}
}

func testStdinFlag(t *testing.T, c processconnect.ProcessClient, _ *identity.User) {
	t.Run("false is /dev/null", func(t *testing.T) {
		t.Parallel()
		w := start(t, c, &pb.StartRequest{Process: processtest.Sh("cat; echo eof"), Stdin: ptr(false)})
		s := w.End(t, waitShort)
		checkEnd(t, s, exit0)
		if s.Stdout != "eof\n" {
			t.Errorf("stdout = %q, want %q", s.Stdout, "eof\n")
		}
	})
	for _, stdin := range []bool{false, true} {
		t.Run(fmt.Sprintf("CloseStdin is idempotent, stdin %v", stdin), func(t *testing.T) {
			t.Parallel()
			w := start(t, c, &pb.StartRequest{Process: processtest.Sh("exec sleep 30"), Stdin: ptr(stdin)})
			pid := w.Pid(t)
			for i := range 2 {
				if _, err := c.CloseStdin(bounded(t), connect.NewRequest(&pb.CloseStdinRequest{Process: processtest.PidSel(pid)})); err != nil {
					t.Fatalf("CloseStdin #%d: %v", i+1, err)
				}
			}
			kill(t, c, pid)
			checkEnd(t, w.End(t, waitShort), killed)
		})
	}
}

func testStreamInputStdin(t *testing.T, c processconnect.ProcessClient, _ *identity.User) {
	w := start(t, c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "cat"}, Stdin: ptr(true)})
	pid := w.Pid(t)
	streamInput(t, c, pid, processtest.StdinInput("x\n"), nil, processtest.StdinInput("y"))
	w.Output(t, waitShort, "x\ny")
	if _, err := c.CloseStdin(bounded(t), connect.NewRequest(&pb.CloseStdinRequest{Process: processtest.PidSel(pid)})); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	s := w.End(t, waitShort)
	checkEnd(t, s, exit0)
	if s.Stdout != "x\ny" {
		t.Errorf("stdout = %q, want %q", s.Stdout, "x\ny")
	}
}

// streamInput sends a StreamInput stream: start naming pid, then each input
// as data, a nil input as a keepalive.
func streamInput(t *testing.T, c processconnect.ProcessClient, pid uint32, inputs ...*pb.ProcessInput) {
	t.Helper()
	st := c.StreamInput(bounded(t))
	msgs := []*pb.StreamInputRequest{{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: processtest.PidSel(pid)}}}}
	for _, in := range inputs {
		if in == nil {
			msgs = append(msgs, &pb.StreamInputRequest{Event: &pb.StreamInputRequest_Keepalive{Keepalive: &pb.StreamInputRequest_KeepAlive{}}})
			continue
		}
		msgs = append(msgs, &pb.StreamInputRequest{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: in}}})
	}
	for i, m := range msgs {
		if err := st.Send(m); err != nil {
			// The server answered early; CloseAndReceive has its error.
			t.Logf("StreamInput send #%d: %v", i, err)
			break
		}
	}
	if _, err := st.CloseAndReceive(); err != nil {
		t.Fatalf("StreamInput: %v", err)
	}
}

func testPTYResize(t *testing.T, c processconnect.ProcessClient, _ *identity.User) {
	w := start(t, c, &pb.StartRequest{
		Process: processtest.Sh("stty size; tty; read line; echo got:$line; stty size"),
		Pty:     processtest.PTYSize(80, 24),
	})
	pid := w.Pid(t)
	w.Output(t, waitShort, "24 80")
	// No pty in the request: a no-op, as upstream.
	if _, err := c.Update(bounded(t), connect.NewRequest(&pb.UpdateRequest{Process: processtest.PidSel(pid)})); err != nil {
		t.Fatalf("Update without pty: %v", err)
	}
	if _, err := c.Update(bounded(t), connect.NewRequest(&pb.UpdateRequest{Process: processtest.PidSel(pid), Pty: processtest.PTYSize(100, 30)})); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if _, err := c.SendInput(bounded(t), connect.NewRequest(&pb.SendInputRequest{Process: processtest.PidSel(pid), Input: processtest.PTYInput("hello\n")})); err != nil {
		t.Fatalf("SendInput pty: %v", err)
	}
	s := w.End(t, waitShort)
	checkEnd(t, s, exit0)
	for _, want := range []string{"24 80\r\n", "/dev/pts/", "hello\r\n", "got:hello\r\n", "30 100\r\n"} {
		if !strings.Contains(s.PTY, want) {
			t.Errorf("pty output %q lacks %q", s.PTY, want)
		}
	}
	if s.Stdout != "" || s.Stderr != "" {
		t.Errorf("a pty process sent stdout %q stderr %q", s.Stdout, s.Stderr)
	}
}

func testStreamInputPTY(t *testing.T, c processconnect.ProcessClient, _ *identity.User) {
	w := start(t, c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "cat"}, Pty: processtest.PTYSize(80, 24)})
	pid := w.Pid(t)
	// Ctrl+D on an empty line is EOF for cat.
	streamInput(t, c, pid, processtest.PTYInput("abc\n"), nil, processtest.PTYInput("\x04"))
	s := w.End(t, waitShort)
	checkEnd(t, s, exit0)
	if !strings.Contains(s.PTY, "abc\r\nabc\r\n") { // the echo, then cat's copy
		t.Errorf("pty output = %q, want the echo and cat's copy of abc", s.PTY)
	}
}

// testEnv: the user's login environment, then the daemon's, then the
// request's; a later value wins, and no name appears twice.
func testEnv(t *testing.T, c processconnect.ProcessClient, u *identity.User) {
	w := start(t, c, &pb.StartRequest{Process: &pb.ProcessConfig{
		Cmd:  "env",
		Envs: map[string]string{"FOO": "bar baz", "USER": "from-request", "EMPTY": ""},
	}})
	s := w.End(t, waitShort)
	checkEnd(t, s, exit0)
	got := parseEnv(t, s.Stdout)
	want := map[string]string{
		"HOME": u.Home, "LOGNAME": u.Name, "SHELL": u.Shell, "PATH": loginPath(),
		"E2B_SANDBOX": "true", "TERM": "dumb", // no terminal: pipes
		"FOO": "bar baz", "USER": "from-request", "EMPTY": "",
	}
	checkEnv(t, got, want)
}

// parseEnv parses env's output, failing on a name seen twice.
func parseEnv(t *testing.T, out string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSuffix(out, "\n"), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("env line %q has no '='", line)
		}
		if _, dup := env[k]; dup {
			t.Errorf("%s appears twice in the environment", k)
		}
		env[k] = v
	}
	return env
}

func checkEnv(t *testing.T, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %q (set: %v), want %q", k, g, ok, v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected variable %s=%q", k, got[k])
		}
	}
}

func testCwd(t *testing.T, c processconnect.ProcessClient, u *identity.User) {
	rel, err := filepath.Rel(u.Home, "/tmp")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cwd  *string
		want string
	}{
		{"unset is home", nil, u.Home},
		{"empty is home", ptr(""), u.Home},
		{"~", ptr("~"), u.Home},
		{"~/", ptr("~/"), u.Home},
		{"~/..", ptr("~/.."), filepath.Dir(u.Home)},
		{"relative to home", ptr(rel), "/tmp"},
		{"absolute", ptr("/"), "/"},
		{"absolute, trailing slash", ptr("/tmp/"), "/tmp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := processtest.Sh("pwd -P")
			cfg.Cwd = tc.cwd
			s := start(t, c, &pb.StartRequest{Process: cfg}).End(t, waitShort)
			checkEnd(t, s, exit0)
			if got := strings.TrimSpace(s.Stdout); got != tc.want {
				t.Errorf("cwd %v: pwd = %q, want %q (stderr %q)", tc.cwd, got, tc.want, s.Stderr)
			}
		})
	}
}

// testIdentity: the process has the user's uid, gid and groups.
func testIdentity(t *testing.T, c processconnect.ProcessClient, u *identity.User) {
	s := start(t, c, &pb.StartRequest{Process: processtest.Sh("id -u; id -g; id -G")}).End(t, waitShort)
	checkEnd(t, s, exit0)
	lines := strings.Split(strings.TrimSpace(s.Stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("id printed %q", s.Stdout)
	}
	if want := strconv.Itoa(int(u.UID)); lines[0] != want {
		t.Errorf("uid = %s, want %s", lines[0], want)
	}
	if want := strconv.Itoa(int(u.GID)); lines[1] != want {
		t.Errorf("gid = %s, want %s", lines[1], want)
	}
	var want []string
	for _, g := range u.Groups {
		want = append(want, strconv.Itoa(int(g)))
	}
	got := strings.Fields(lines[2])
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, slices.Compact(want)) {
		t.Errorf("groups = %v, want %v", got, want)
	}
}

// testList: List shows the config exactly as sent (the cwd unresolved, only
// the request's envs) and the tag, and forgets a process once it ended.
func testList(t *testing.T, c processconnect.ProcessClient, _ *identity.User) {
	tag := processtest.UniqueTag("list")
	tagged := &pb.ProcessConfig{
		Cmd:  "/bin/sh",
		Args: []string{"-c", "exec sleep 30", "arg0"},
		Envs: map[string]string{"A": "1", "B": "two words"},
		Cwd:  ptr("~"),
	}
	untagged := processtest.Sh("exec sleep 30")
	w1 := start(t, c, &pb.StartRequest{Process: tagged, Tag: &tag, Stdin: ptr(false)})
	w2 := start(t, c, &pb.StartRequest{Process: untagged})
	pid1, pid2 := w1.Pid(t), w2.Pid(t)
	for _, want := range []*pb.ProcessInfo{
		{Config: tagged, Pid: pid1, Tag: &tag},
		{Config: untagged, Pid: pid2},
	} {
		got := listed(t, c, want.Pid)
		if !proto.Equal(got, want) {
			t.Errorf("List entry of %d = %v, want %v", want.Pid, got, want)
		}
	}
	kill(t, c, pid1)
	kill(t, c, pid2)
	w1.End(t, waitShort)
	w2.End(t, waitShort)
	for _, pid := range []uint32{pid1, pid2} {
		processtest.Eventually(t, waitShort, func() bool { return listed(t, c, pid) == nil }, "ended pid %d still listed", pid)
	}
}

// testConnect: Connect by pid and by tag replays what was printed, then
// follows live output to the end, as the Start stream does.
func testConnect(t *testing.T, c processconnect.ProcessClient, _ *identity.User) {
	tag := processtest.UniqueTag("connect")
	w := start(t, c, &pb.StartRequest{Process: processtest.Sh("echo one; read x; echo two:$x; exit 4"), Tag: &tag})
	pid := w.Pid(t)
	w.Output(t, waitShort, "one\n")
	byPid := processtest.Connect(t, c, processtest.PidSel(pid), processtest.WatchOptions{})
	byTag := processtest.Connect(t, c, processtest.TagSel(tag), processtest.WatchOptions{})
	for _, cw := range []*processtest.Watcher{byPid, byTag} {
		if got := cw.Pid(t); got != pid {
			t.Errorf("Connect start event pid = %d, want %d", got, pid)
		}
		cw.Output(t, waitShort, "one\n")
	}
	if _, err := c.SendInput(bounded(t), connect.NewRequest(&pb.SendInputRequest{Process: processtest.TagSel(tag), Input: processtest.StdinInput("hi\n")})); err != nil {
		t.Fatalf("SendInput by tag: %v", err)
	}
	for name, cw := range map[string]*processtest.Watcher{"start": w, "pid": byPid, "tag": byTag} {
		s := cw.End(t, waitShort)
		checkEnd(t, s, end{4, true, "exit status 4"})
		if s.Stdout != "one\ntwo:hi\n" {
			t.Errorf("%s stream: stdout = %q, want %q", name, s.Stdout, "one\ntwo:hi\n")
		}
	}
}
