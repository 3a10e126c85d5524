package client_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/internal/testutil"
)

// newShell is a session of the shared envd, closed when the test ends.
func newShell(t *testing.T, c *client.Client, o client.ShellOptions) *client.ShellSession {
	t.Helper()
	s, err := c.CreateShell(testContext(t, testutil.Wait), o)
	if err != nil {
		t.Fatal(err)
	}
	if s.ID == "" || s.Info.ID != s.ID || s.Info.PID == 0 {
		t.Fatalf("CreateShell: %+v", s.Info)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.Wait)
		defer cancel()
		if err := s.Close(ctx); err != nil && !errors.Is(err, client.ErrNotFound) && !errors.Is(err, client.ErrFailedPrecondition) {
			t.Errorf("close shell %s: %v", s.ID, err)
		}
	})
	return s
}

// mustRun runs command in s and fails the test if it could not.
func mustRun(t *testing.T, s *client.ShellSession, command string, o client.ShellRunOptions) *client.ShellResult {
	t.Helper()
	res, err := s.Run(testContext(t, testutil.Wait), command, o)
	if err != nil {
		t.Fatalf("run %q: %v", command, err)
	}
	return res
}

// TestShellStatePersists: cwd, exported and plain variables, functions,
// aliases and options set by one command are there for the next, and
// State reports the cwd and exported environment.
func TestShellStatePersists(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{})
	s := newShell(t, c, client.ShellOptions{Env: map[string]string{"GIVEN": "at create"}})
	mustRun(t, s, "cd /tmp && export FOO=bar; x=1; f() { echo fn $1; }; shopt -s expand_aliases; alias hi='echo hi'; set -o pipefail", client.ShellRunOptions{})
	res := mustRun(t, s, "echo $FOO $x $GIVEN; pwd; f arg; hi; false | true; echo $?", client.ShellRunOptions{})
	if got, want := string(res.Stdout), "bar 1 at create\n/tmp\nfn arg\nhi\n1\n"; got != want || len(res.Stderr) != 0 || !res.Success() {
		t.Errorf("second command: stdout %q (want %q), stderr %q, %v", got, want, res.Stderr, res)
	}
	if res.Seq != 2 || res.CommandID == "" {
		t.Errorf("second command: seq %d, id %q", res.Seq, res.CommandID)
	}
	mustRun(t, s, "(exit 7)", client.ShellRunOptions{})
	st, err := s.State(testContext(t, testutil.Wait))
	if err != nil {
		t.Fatal(err)
	}
	if st.Dir != "/tmp" || st.Env["FOO"] != "bar" || st.Env["GIVEN"] != "at create" || st.LastExitCode != 7 ||
		st.Running != nil || st.Busy || st.Commands != 3 || st.ID != s.ID || st.PID != s.Info.PID {
		t.Errorf("state: %+v", st)
	}
	if _, ok := st.Env["x"]; ok {
		t.Errorf("state: an unexported variable is in the environment: %v", st.Env)
	}
}

// TestShellEnds: each command's stdout and stderr come apart, and its end
// says how it ended.
func TestShellEnds(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{})
	s := newShell(t, c, client.ShellOptions{})
	tests := []struct {
		command        string
		stdout, stderr string
		reason         client.ShellEndReason
		code           int
		signal         syscall.Signal
	}{
		{command: "echo out; echo err >&2", stdout: "out\n", stderr: "err\n", reason: client.ShellExited},
		{command: "printf 'no newline'; (exit 3)", stdout: "no newline", reason: client.ShellExited, code: 3},
		{command: "false", reason: client.ShellExited, code: 1},
		{command: "no-such-command-envd-test", stderr: "no-such-command-envd-test: command not found\n", reason: client.ShellExited, code: 127},
		{command: "sh -c 'kill -TERM $$'", reason: client.ShellSignaled, code: 128 + 15, signal: syscall.SIGTERM},
		{command: "printf '\\000\\377 binary'", stdout: "\x00\xff binary", reason: client.ShellExited},
	}
	// Commands of one session run one after another: in order, not in
	// parallel subtests.
	for _, tt := range tests {
		res := mustRun(t, s, tt.command, client.ShellRunOptions{})
		if string(res.Stdout) != tt.stdout || !strings.HasSuffix(string(res.Stderr), tt.stderr) || (tt.stderr == "" && len(res.Stderr) > 0) {
			t.Errorf("%q: stdout %q, stderr %q; want %q, %q", tt.command, res.Stdout, res.Stderr, tt.stdout, tt.stderr)
		}
		if res.Reason != tt.reason || res.ExitCode != tt.code || res.Signal != tt.signal {
			t.Errorf("%q: %v (reason %v, code %d, signal %d); want %v, %d, %d", tt.command, res, res.Reason, res.ExitCode, res.Signal, tt.reason, tt.code, tt.signal)
		}
		if res.Success() != (tt.reason == client.ShellExited && tt.code == 0) {
			t.Errorf("%q: Success() = %v", tt.command, res.Success())
		}
	}
}

func TestShellInput(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{})
	s := newShell(t, c, client.ShellOptions{})
	if res := mustRun(t, s, "cat; echo done", client.ShellRunOptions{}); string(res.Stdout) != "done\n" {
		t.Errorf("without input, cat read %q, want end-of-file at once", res.Stdout)
	}
	if res := mustRun(t, s, "wc -l", client.ShellRunOptions{Input: []byte("one\ntwo\n")}); strings.TrimSpace(string(res.Stdout)) != "2" {
		t.Errorf("Input: wc -l said %q", res.Stdout)
	}

	ctx := testContext(t, testutil.Wait)
	started := make(chan struct{})
	var out bytes.Buffer
	cmd, err := s.Start(ctx, "tr a-z A-Z", client.ShellRunOptions{
		Input: []byte("first "), Stdin: true, Stdout: &out,
		OnStarted: func(uint64) { close(started) },
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var res *client.ShellResult
	var werr error
	go func() { defer close(done); res, werr = cmd.Wait() }()
	testutil.RequireClosed(t, started, "the command's start")
	if err := s.SendInput(ctx, []byte("then more")); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseInput(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.RequireClosed(t, done, "the command's end")
	if werr != nil || !res.Success() || out.String() != "FIRST THEN MORE" {
		t.Errorf("tr: %q, %v, %v", out.String(), res, werr)
	}

	// Too much input for one message is refused before anything is sent.
	_, err = s.Run(ctx, "cat", client.ShellRunOptions{Input: make([]byte, 5<<20)})
	if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "SendInput") {
		t.Errorf("5 MiB of Input: %v, want invalid argument", err)
	}
}

// TestShellTimeoutAndInterrupt: a timeout or an interrupt ends the
// command, and the session goes on with its state.
func TestShellTimeoutAndInterrupt(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{})
	s := newShell(t, c, client.ShellOptions{})
	mustRun(t, s, "export KEPT=yes", client.ShellRunOptions{})
	res := mustRun(t, s, "echo before; sleep 30", client.ShellRunOptions{Timeout: 300 * time.Millisecond})
	if res.Reason != client.ShellTimedOut || string(res.Stdout) != "before\n" || res.Success() {
		t.Errorf("timeout: %v, stdout %q", res, res.Stdout)
	}

	ctx := testContext(t, testutil.Wait)
	started := make(chan struct{})
	cmd, err := s.Start(ctx, "sleep 30 & wait", client.ShellRunOptions{OnStarted: func(uint64) { close(started) }})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err = cmd.Wait()
	}()
	testutil.RequireClosed(t, started, "the command's start")
	if ok, err := cmd.Interrupt(ctx); !ok || err != nil {
		t.Errorf("Interrupt of the running command: %v, %v", ok, err)
	}
	testutil.RequireClosed(t, done, "the interrupted command's end")
	if err != nil || res.Reason != client.ShellInterrupted {
		t.Errorf("interrupted: %v, %v", res, err)
	}
	if ok, err := cmd.Interrupt(ctx); ok || err != nil {
		t.Errorf("Interrupt of an ended command: %v, %v", ok, err)
	}
	if ok, err := s.Interrupt(ctx); ok || err != nil {
		t.Errorf("Interrupt of an idle session: %v, %v", ok, err)
	}
	if res := mustRun(t, s, "echo $KEPT", client.ShellRunOptions{}); string(res.Stdout) != "yes\n" {
		t.Errorf("after the timeout and the interrupt: %q", res.Stdout)
	}

	_, err = s.Run(ctx, "true", client.ShellRunOptions{Timeout: -time.Second})
	if !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("a negative timeout: %v, want invalid argument", err)
	}
}

// TestShellRunContext: when Run's context ends, the command is
// interrupted, and the session is free for the next.
func TestShellRunContext(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{})
	s := newShell(t, c, client.ShellOptions{})
	ctx, cancel := context.WithTimeout(testContext(t, testutil.Wait), 500*time.Millisecond)
	defer cancel()
	_, err := s.Run(ctx, "sleep 30", client.ShellRunOptions{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run past its deadline: %v, want deadline exceeded", err)
	}
	res := mustRun(t, s, "echo free", client.ShellRunOptions{})
	if string(res.Stdout) != "free\n" || res.Seq != 2 {
		t.Errorf("the next command: %q, seq %d", res.Stdout, res.Seq)
	}
}

// TestShellQueue: a second command waits for the first, says so, and
// runs after it; Connect follows a command from its start.
func TestShellQueue(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{})
	s := newShell(t, c, client.ShellOptions{})
	ctx := testContext(t, testutil.Wait)
	started := make(chan struct{})
	first, err := s.Start(ctx, "echo first; read line; echo got $line", client.ShellRunOptions{
		Stdin: true, OnStarted: func(uint64) { close(started) },
	})
	if err != nil {
		t.Fatal(err)
	}
	var firstRes *client.ShellResult
	var firstErr error
	firstDone := make(chan struct{})
	go func() { defer close(firstDone); firstRes, firstErr = first.Wait() }()
	testutil.RequireClosed(t, started, "the command's start")

	var queued []int
	second, err := s.Start(ctx, "echo second", client.ShellRunOptions{OnQueued: func(ahead int) { queued = append(queued, ahead) }})
	if err != nil {
		t.Fatal(err)
	}
	if second.ID() == "" || second.ID() == first.ID() || second.Seq() != 0 {
		t.Errorf("the waiting command: id %q (first %q), seq %d", second.ID(), first.ID(), second.Seq())
	}
	st, err := s.State(ctx)
	if err != nil || st.Running == nil || st.Running.ID != first.ID() || st.Running.Seq != 1 || st.Queued != 1 || !st.Busy {
		t.Errorf("state with one running, one waiting: %+v, %v", st, err)
	}
	// A third waits too; interrupting its handle takes it out of the
	// queue (it never starts) and leaves the first alone.
	third, err := s.Start(ctx, "echo third", client.ShellRunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := third.Interrupt(ctx); !ok || err != nil {
		t.Errorf("Interrupt of a waiting command: %v, %v", ok, err)
	}
	if res, err := third.Wait(); err != nil || res.Reason != client.ShellInterrupted || res.Seq != 0 || len(res.Stdout) != 0 {
		t.Errorf("the waiting command interrupted: %+v, %v", res, err)
	}
	// Input for a command that is not running is refused, not sent on.
	if err := second.SendInput(ctx, []byte("not for first\n")); !errors.Is(err, client.ErrFailedPrecondition) {
		t.Errorf("SendInput to a waiting command: %v, want failed precondition", err)
	}

	// A second follower of the first command sees its output from the start.
	follow, err := s.Connect(ctx, first.ID(), client.ShellRunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	followed := make(chan struct{})
	var followRes *client.ShellResult
	var followErr error
	go func() { defer close(followed); followRes, followErr = follow.Wait() }()

	if err := first.SendInput(ctx, []byte("it\n")); err != nil {
		t.Fatal(err)
	}
	testutil.RequireClosed(t, firstDone, "the first command's end")
	if firstErr != nil || string(firstRes.Stdout) != "first\ngot it\n" {
		t.Errorf("first: %v, %v", firstRes, firstErr)
	}
	res, err := second.Wait()
	if err != nil || string(res.Stdout) != "second\n" || res.Seq != 2 {
		t.Errorf("second: %+v %q, %v", res, res.Stdout, err)
	}
	if len(queued) == 0 || queued[0] != 1 {
		t.Errorf("OnQueued got %v, want 1 ahead first", queued)
	}
	testutil.RequireClosed(t, followed, "the follower's end")
	if followErr != nil || string(followRes.Stdout) != "first\ngot it\n" || followRes.CommandID != first.ID() {
		t.Errorf("Connect: %+v, %v", followRes, followErr)
	}
}

// TestShellSessionEnds: a command that ends the shell ends the session;
// later calls are refused.
func TestShellSessionEnds(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{})
	s := newShell(t, c, client.ShellOptions{})
	res := mustRun(t, s, "echo bye; exit 3", client.ShellRunOptions{})
	if res.Reason != client.ShellSessionEnded || res.ExitCode != 3 || string(res.Stdout) != "bye\n" || res.Message == "" {
		t.Errorf("exit 3: %v (code %d), stdout %q", res, res.ExitCode, res.Stdout)
	}
	ctx := testContext(t, testutil.Wait)
	if _, err := s.Run(ctx, "true", client.ShellRunOptions{}); !errors.Is(err, client.ErrFailedPrecondition) && !errors.Is(err, client.ErrNotFound) {
		t.Errorf("run in an ended session: %v, want failed precondition or not found", err)
	}
}

// TestShellListAndClose: List shows sessions with their tags; Close ends
// one; a session nobody made is not found.
func TestShellListAndClose(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{})
	ctx := testContext(t, testutil.Wait)
	a := newShell(t, c, client.ShellOptions{Tag: "list-a"})
	b := newShell(t, c, client.ShellOptions{Tag: "list-b", Dir: "/tmp"})
	list, err := c.ListShells(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tags := map[string]string{}
	for _, s := range list {
		tags[s.ID] = s.Tag
	}
	if tags[a.ID] != "list-a" || tags[b.ID] != "list-b" {
		t.Errorf("list: %+v", list)
	}
	if st, err := c.ShellSession(b.ID).State(ctx); err != nil || st.Dir != "/tmp" || st.Tag != "list-b" {
		t.Errorf("state by id: %+v, %v", st, err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	list, err = c.ListShells(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(list, func(s client.ShellInfo) bool { return s.ID == a.ID }) {
		t.Errorf("a closed session is listed: %+v", list)
	}

	nobody := c.ShellSession("no-such-session")
	_, err = nobody.Run(ctx, "true", client.ShellRunOptions{})
	if !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "no-such-session") {
		t.Errorf("run in an unknown session: %v", err)
	}
	if _, err := nobody.State(ctx); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("state of an unknown session: %v", err)
	}
	if err := nobody.Close(ctx); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("close of an unknown session: %v", err)
	}
	if _, err := c.CreateShell(ctx, client.ShellOptions{Dir: "/no/such/dir"}); err == nil {
		t.Error("a session in a missing directory was created")
	}
}

// TestShellOutput: output is bounded in the result as MaxOutput says, goes
// to writers instead when given, and a terminal's arrives as PTY output.
func TestShellOutput(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{})
	s := newShell(t, c, client.ShellOptions{})
	res := mustRun(t, s, "head -c 100000 /dev/zero; echo err >&2", client.ShellRunOptions{MaxOutput: 1000})
	if len(res.Stdout) != 1000 || res.Truncated != 99000 || string(res.Stderr) != "err\n" {
		t.Errorf("MaxOutput 1000: %d bytes kept, %d truncated, stderr %q", len(res.Stdout), res.Truncated, res.Stderr)
	}
	var out bytes.Buffer
	res = mustRun(t, s, "seq 1 20000; echo err >&2", client.ShellRunOptions{Stdout: &out})
	if !strings.HasSuffix(out.String(), "\n19999\n20000\n") || len(res.Stdout) != 0 || string(res.Stderr) != "err\n" {
		t.Errorf("Stdout writer: %d bytes written, result stdout %q, stderr %q", out.Len(), res.Stdout, res.Stderr)
	}

	ctx := testContext(t, testutil.Wait)
	cmd, err := s.Start(ctx, "echo one; echo two >&2", client.ShellRunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var events []client.Event
	for ev, err := range cmd.Events() {
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, client.Event{Stream: ev.Stream, Data: slices.Clone(ev.Data)})
	}
	var sout, serr string
	for _, ev := range events {
		switch ev.Stream {
		case client.Stdout:
			sout += string(ev.Data)
		case client.Stderr:
			serr += string(ev.Data)
		}
	}
	if sout != "one\n" || serr != "two\n" {
		t.Errorf("Events: stdout %q, stderr %q", sout, serr)
	}
	if res, err := cmd.Wait(); err != nil || !res.Success() {
		t.Errorf("Wait after Events: %v, %v", res, err)
	}

	p := newShell(t, c, client.ShellOptions{PTY: &client.Size{Cols: 100, Rows: 30}})
	if !p.Info.PTY {
		t.Errorf("a session with a terminal says it has none: %+v", p.Info)
	}
	// The terminal is the command's stdout (its stdin is end-of-file).
	res = mustRun(t, p, "readlink /proc/self/fd/1; stty size <&1; echo err >&2", client.ShellRunOptions{})
	if got := string(res.Stdout); !strings.Contains(got, "/dev/pts/") || !strings.Contains(got, "30 100") || !strings.Contains(got, "err") || len(res.Stderr) != 0 {
		t.Errorf("terminal: stdout %q, stderr %q", res.Stdout, res.Stderr)
	}
}

// TestShellsAtOnce: sessions run at once, each with its own state.
func TestShellsAtOnce(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{})
	const n = 8
	sessions := make([]*client.ShellSession, n)
	for i := range sessions {
		sessions[i] = newShell(t, c, client.ShellOptions{})
	}
	// Each waits for every other to have started: only sessions that run
	// at once get through.
	dir, err := os.MkdirTemp("", "envd-shells-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The shells run as envd's default user, not as the test.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	outs := make([]string, n)
	for i, s := range sessions {
		wg.Go(func() {
			res, err := s.Run(testContext(t, testutil.Wait), "export ME="+string(rune('a'+i))+"; cd "+dir+" && touch $ME && while [ $(ls | wc -l) -lt 8 ]; do sleep 0.05; done; echo $ME",
				client.ShellRunOptions{Timeout: testutil.Wait})
			if err == nil && !res.Success() {
				err = errors.New(res.String())
			}
			errs[i] = err
			if res != nil {
				outs[i] = string(res.Stdout)
			}
		})
	}
	wg.Wait()
	for i := range sessions {
		if want := string(rune('a'+i)) + "\n"; errs[i] != nil || outs[i] != want {
			t.Errorf("session %d: %q, %v; want %q", i, outs[i], errs[i], want)
		}
	}
}
