package e2e_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/envd-dev/envd/client"
	shpb "github.com/envd-dev/envd/gen/envd/shell/v1"
	"github.com/envd-dev/envd/gen/envd/shell/v1/shellv1connect"
	"github.com/envd-dev/envd/internal/testutil"
)

// Shell sessions (envd.shell.v1) through the real binary and the public Go
// client: framing that output cannot fool, sessions at once, strict-mode
// isolation. The live upgrade's test is in upgrade_shell_test.go, envctl's
// in envctl_shell_test.go.

// shellRun runs command in s and fails the test unless it could be run to
// its end.
func shellRun(t *testing.T, s *client.ShellSession, command string, o client.ShellRunOptions) *client.ShellResult {
	t.Helper()
	res, err := s.Run(callCtx(t), command, o)
	if err != nil {
		t.Fatalf("run %q: %v", command, err)
	}
	return res
}

// callCtx bounds one call of a test.
func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	t.Cleanup(cancel)
	return ctx
}

// newShellOn opens a session in /tmp on e, closed when the test ends.
func newShellOn(t *testing.T, e *envd) *client.ShellSession {
	t.Helper()
	c := client.New(client.Options{Addr: e.url})
	t.Cleanup(func() { c.Close() })
	s, err := c.CreateShell(callCtx(t), client.ShellOptions{Dir: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// wantShell fails the test unless res exited with code and printed
// exactly stdout and stderr.
func wantShell(t *testing.T, what string, res *client.ShellResult, code int, stdout, stderr string) {
	t.Helper()
	if res.Reason != client.ShellExited || res.ExitCode != code || string(res.Stdout) != stdout || string(res.Stderr) != stderr {
		t.Errorf("%s: %v, stdout %q, stderr %q; want exit status %d, stdout %q, stderr %q", what, res, res.Stdout, res.Stderr, code, stdout, stderr)
	}
}

// TestShellFraming: a command's output may hold anything, and the end of
// each command still comes from envd's secret: text in the marker's exact
// shape with nonces of its own, a marker's beginning cut off at the end of
// the output, every byte value, output without a final newline, on stdout
// and stderr, and megabytes of such bytes. Each command gets back exactly
// what it printed, and the next command's output is its own.
func TestShellFraming(t *testing.T) {
	t.Parallel()
	s := newShellOn(t, startEnvd(t, startOptions{}))

	fake := "\x1b]6973;0123456789abcdef0123456789abcdef\x07"
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	// Megabytes of random bytes sprinkled with markers' shapes and their
	// beginnings, each cut at every length.
	big := make([]byte, 0, 3<<20)
	for len(big) < 3<<20 {
		chunk := make([]byte, 4096)
		rand.Read(chunk)
		big = append(big, chunk...)
		for n := 1; n <= len(fake); n += 7 {
			big = append(big, fake[:n]...)
		}
	}
	for _, tc := range []struct {
		name, cmd      string
		input          []byte
		stdout, stderr string
	}{
		{"a marker's shape on both streams", `printf '\033]6973;%s\007' 0123456789abcdef0123456789abcdef; printf '\033]6973;%s\007' 0123456789abcdef0123456789abcdef >&2; echo after`, nil, fake + "after\n", fake},
		{"a marker's start, no newline", `printf 'x\033]6973;0123'; printf 'y\033]69' >&2`, nil, "x\x1b]6973;0123", "y\x1b]69"},
		{"a lone escape at the end", `printf 'end\033'`, nil, "end\x1b", ""},
		{"every byte value, read twice", `cat; cat /dev/stdin >&2`, all, string(all), string(all)},
		{"every byte value on stderr", `cat >&2`, all, "", string(all)},
		{"megabytes of them", `cat; printf tail`, big, string(big) + "tail", ""},
		{"megabytes on stderr", `cat >&2; printf tail`, big, "tail", string(big)},
		{"a NUL and no newline", `printf 'a\0b'`, nil, "a\x00b", ""},
	} {
		res := shellRun(t, s, tc.cmd, client.ShellRunOptions{Input: tc.input})
		if res.Reason != client.ShellExited || res.ExitCode != 0 || !bytes.Equal(res.Stdout, []byte(tc.stdout)) || !bytes.Equal(res.Stderr, []byte(tc.stderr)) {
			t.Errorf("%s: %v, %d bytes of stdout (want %d, equal %v), %d of stderr (want %d, equal %v)", tc.name, res,
				len(res.Stdout), len(tc.stdout), bytes.Equal(res.Stdout, []byte(tc.stdout)), len(res.Stderr), len(tc.stderr), bytes.Equal(res.Stderr, []byte(tc.stderr)))
		}
		wantShell(t, "after "+tc.name, shellRun(t, s, `echo next; echo err >&2`, client.ShellRunOptions{}), 0, "next\n", "err\n")
	}
	// A command's text holding the marker's shape runs as text.
	res := shellRun(t, s, "echo '\x1b]6973;0123456789abcdef0123456789abcdef\x07' | od -An -c | tr -s ' ' | head -1", client.ShellRunOptions{})
	if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "033 ] 6 9 7 3 ;") {
		t.Errorf("a marker's shape in the command's text: %v %q %q", res, res.Stdout, res.Stderr)
	}
}

// TestShellConcurrentSessions: eight sessions at once, each with its own
// cwd, variables and functions, run commands side by side; every command
// gets its own output and exit code, and a session busy with a long
// command holds up none of the others.
func TestShellConcurrentSessions(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{})
	c := client.New(client.Options{Addr: e.url})
	defer c.Close()
	const n = 8
	dir, err := os.MkdirTemp("", "envd-shells-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o777); err != nil { // the sessions run as user
		t.Fatal(err)
	}
	sessions := make([]*client.ShellSession, n)
	var wg sync.WaitGroup
	errs := make(chan error, 100*n)
	for i := range n {
		wg.Go(func() {
			s, err := c.CreateShell(callCtx(t), client.ShellOptions{Dir: dir, Env: map[string]string{"N": fmt.Sprint(i)}, Tag: fmt.Sprintf("s%d", i)})
			if err != nil {
				errs <- fmt.Errorf("create %d: %w", i, err)
				return
			}
			sessions[i] = s
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range sessions {
			s.Close(context.Background())
		}
	}()
	// One session is busy all along.
	busy, err := sessions[0].Start(callCtx(t), `sleep 300`, client.ShellRunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	errs = make(chan error, 100*n)
	for i := 1; i < n; i++ {
		wg.Go(func() {
			s := sessions[i]
			run := func(cmd string, code int, stdout, stderr string) {
				res, err := s.Run(callCtx(t), cmd, client.ShellRunOptions{})
				switch {
				case err != nil:
					errs <- fmt.Errorf("session %d, %q: %w", i, cmd, err)
				case res.Reason != client.ShellExited || res.ExitCode != code || string(res.Stdout) != stdout || string(res.Stderr) != stderr:
					errs <- fmt.Errorf("session %d, %q: %v, stdout %q, stderr %q; want %d, %q, %q", i, cmd, res, res.Stdout, res.Stderr, code, stdout, stderr)
				}
			}
			run(fmt.Sprintf(`mkdir -p d%d && cd d%d && export M=m$N && f() { echo "f$N $1"; }`, i, i), 0, "", "")
			for round := range 10 {
				run(fmt.Sprintf(`echo "$N $M ${PWD##*/}"; f %d; echo "e$N" >&2; (exit $N)`, round),
					i, fmt.Sprintf("%d m%d d%d\nf%d %d\n", i, i, i, i, round), fmt.Sprintf("e%d\n", i))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	infos, err := c.ListShells(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, in := range infos {
		tags = append(tags, in.Tag)
		if want := in.Tag == "s0"; in.Busy != want {
			t.Errorf("session %s busy %v, want %v", in.Tag, in.Busy, want)
		}
	}
	slices.Sort(tags)
	if want := []string{"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"}; !slices.Equal(tags, want) {
		t.Errorf("ListShells: %v, want %v", tags, want)
	}
	if ok, err := busy.Interrupt(callCtx(t)); !ok || err != nil {
		t.Fatalf("interrupt the busy session: %v %v", ok, err)
	}
	if res, err := busy.Wait(); err != nil || res.Reason != client.ShellInterrupted {
		t.Errorf("the busy session's command: %v %v", res, err)
	}
}

// TestShellStrictUsers: with -strict-users, a user sees and reaches only
// its own sessions: another user's session is, to it, a session that does
// not exist (the same error, word for word, but the id), whatever it
// tries; it may not start a shell as another user; root sees them all.
func TestShellStrictUsers(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{guest: true, args: []string{"-strict-users"}})
	clientAs := func(user string) *client.Client {
		c := client.New(client.Options{Addr: e.url, User: user})
		t.Cleanup(func() { c.Close() })
		return c
	}
	root, usr, guest := clientAs("root"), clientAs("user"), clientAs(guestName)
	create := func(c *client.Client, o client.ShellOptions) *client.ShellSession {
		t.Helper()
		s, err := c.CreateShell(callCtx(t), o)
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		t.Cleanup(func() { root.ShellSession(s.ID).Close(context.Background()) })
		return s
	}
	guestShell := create(guest, client.ShellOptions{Tag: "guest's"})
	userShell := create(usr, client.ShellOptions{Tag: "user's"})
	wantShell(t, "guest's shell", shellRun(t, guestShell, `id -un; cd; pwd`, client.ShellRunOptions{}), 0, guestName+"\n"+e.guestHome+"\n", "")
	wantShell(t, "user's shell", shellRun(t, userShell, `id -un`, client.ShellRunOptions{}), 0, "user\n", "")
	// user's command is running while guest tries it.
	running, err := userShell.Start(callCtx(t), `read -r x; echo "got $x"`, client.ShellRunOptions{Stdin: true})
	if err != nil {
		t.Fatal(err)
	}

	list := func(c *client.Client) []string {
		t.Helper()
		infos, err := c.ListShells(callCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		var tags []string
		for _, in := range infos {
			tags = append(tags, in.Tag)
		}
		slices.Sort(tags)
		return tags
	}
	if got := list(guest); !slices.Equal(got, []string{"guest's"}) {
		t.Errorf("guest lists %v", got)
	}
	if got := list(usr); !slices.Equal(got, []string{"user's"}) {
		t.Errorf("user lists %v", got)
	}
	if got := list(root); !slices.Equal(got, []string{"guest's", "user's"}) {
		t.Errorf("root lists %v", got)
	}

	// Every call of guest's on user's session fails as on a session that
	// does not exist.
	const bogus = "0123456789abcdef"
	calls := map[string]func(s *client.ShellSession) error{
		"run": func(s *client.ShellSession) error {
			_, err := s.Run(callCtx(t), "echo reached", client.ShellRunOptions{})
			return err
		},
		"state": func(s *client.ShellSession) error { _, err := s.State(callCtx(t)); return err },
		"interrupt": func(s *client.ShellSession) error {
			_, err := s.Interrupt(callCtx(t))
			return err
		},
		"input": func(s *client.ShellSession) error { return s.SendInput(callCtx(t), []byte("guest\n")) },
		"close input": func(s *client.ShellSession) error {
			return s.CloseInput(callCtx(t))
		},
		"connect": func(s *client.ShellSession) error {
			cmd, err := s.Connect(callCtx(t), "", client.ShellRunOptions{})
			if err == nil {
				_, err = cmd.Wait()
			}
			return err
		},
		"close": func(s *client.ShellSession) error { return s.Close(callCtx(t)) },
	}
	for name, call := range calls {
		bogusErr := call(guest.ShellSession(bogus))
		if !errors.Is(bogusErr, client.ErrNotFound) {
			t.Fatalf("%s on a session that does not exist: %v, want not found", name, bogusErr)
		}
		err := call(guest.ShellSession(userShell.ID))
		if want := strings.ReplaceAll(bogusErr.Error(), bogus, userShell.ID); err == nil || err.Error() != want {
			t.Errorf("guest's %s on user's session: %v, want exactly %q", name, err, want)
		}
	}
	// A request of guest's naming another user to run the shell.
	raw := shellv1connect.NewShellServiceClient(clientsFor(t, e, guestName).http, e.url)
	_, err = raw.Create(callCtx(t), connect.NewRequest(&shpb.CreateRequest{User: "user"}))
	if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "may not start a shell as user 'user'") {
		t.Errorf("guest creates a shell as user: %v, want permission_denied", err)
	}
	// user's command went on untouched, and its own input reaches it.
	if err := userShell.SendInput(callCtx(t), []byte("mine\n")); err != nil {
		t.Fatal(err)
	}
	if res, err := running.Wait(); err != nil || res.ExitCode != 0 || string(res.Stdout) != "got mine\n" {
		t.Errorf("user's command: %v %v %q", res, err, res.Stdout)
	}
	// Root reaches both.
	wantShell(t, "root in user's session", shellRun(t, root.ShellSession(userShell.ID), `id -un`, client.ShellRunOptions{}), 0, "user\n", "")
	wantShell(t, "root in guest's session", shellRun(t, root.ShellSession(guestShell.ID), `id -un`, client.ShellRunOptions{}), 0, guestName+"\n", "")
}

// TestShellInterruptTree: Interrupt and a timeout end the command's whole
// process tree (a pipeline, a subshell, its own background job, which
// ignores SIGINT, a process that left the group) and nothing older: a job
// an earlier command left in the background runs on, and so does the
// session, with its state.
func TestShellInterruptTree(t *testing.T) {
	t.Parallel()
	s := newShellOn(t, startEnvd(t, startOptions{}))
	res := shellRun(t, s, `export KEEP=kept; sleep 3000 & echo $!`, client.ShellRunOptions{})
	var bgPid int
	if _, err := fmt.Sscan(string(res.Stdout), &bgPid); err != nil || bgPid == 0 {
		t.Fatalf("the earlier job's pid: %q", res.Stdout)
	}
	bg, _ := readProc(bgPid)
	defer syscall.Kill(bgPid, syscall.SIGKILL)
	st, err := s.State(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	shellPid := int(st.PID)
	sleeps := func() []proc {
		var out []proc
		for _, p := range descendants(shellPid) {
			if p.Comm == "sleep" && p.Pid != bgPid {
				out = append(out, p)
			}
		}
		return out
	}
	const tree = `sleep 3001 & setsid sleep 3002 & (sleep 3003; true) | cat; echo not-reached`
	for _, how := range []string{"interrupt", "timeout"} {
		o := client.ShellRunOptions{}
		if how == "timeout" {
			o.Timeout = 8 * time.Second // the sleeps are seen before it runs out
		}
		cmd, err := s.Start(callCtx(t), tree, o)
		if err != nil {
			t.Fatal(err)
		}
		started := map[int]proc{}
		testutil.Poll(t, "the command's three sleeps", func() bool {
			for _, p := range sleeps() {
				started[p.Pid] = p
			}
			// setsid's sleep may have left the tree: find it by its
			// argument too.
			for _, p := range allProcs() {
				if cmdline(p.Pid) == "sleep\x003002\x00" && p.Start >= bg.Start {
					started[p.Pid] = p
				}
			}
			return len(started) == 3
		})
		if how == "interrupt" {
			if ok, err := cmd.Interrupt(callCtx(t)); !ok || err != nil {
				t.Fatalf("interrupt: %v %v", ok, err)
			}
		}
		res, err := cmd.Wait()
		want := map[string]client.ShellEndReason{"interrupt": client.ShellInterrupted, "timeout": client.ShellTimedOut}[how]
		if err != nil || res.Reason != want || strings.Contains(string(res.Stdout), "not-reached") {
			t.Errorf("%s: %v %v %q", how, res, err, res.Stdout)
		}
		for _, p := range started {
			if now, ok := readProc(p.Pid); ok && now.Start == p.Start && now.State != 'Z' {
				t.Errorf("%s: process %d (%s) of the command still runs", how, p.Pid, cmdline(p.Pid))
			}
		}
		if now, ok := readProc(bgPid); !ok || now.Start != bg.Start || now.State == 'Z' {
			t.Errorf("%s: the earlier command's job %d is gone", how, bgPid)
		}
		wantShell(t, "after the "+how, shellRun(t, s, `echo "$PWD $KEEP"`, client.ShellRunOptions{}), 0, "/tmp kept\n", "")
	}
	// A command whose last process a signal ended: SIGNALED, 128+n.
	res = shellRun(t, s, `sh -c 'kill -TERM $$'`, client.ShellRunOptions{})
	if res.Reason != client.ShellSignaled || res.Signal != syscall.SIGTERM || res.ExitCode != 143 {
		t.Errorf("a command killed by SIGTERM: %v (signal %d, exit %d)", res, res.Signal, res.ExitCode)
	}
}

// cmdline is /proc/PID/cmdline, "" if it cannot be read.
func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return string(b)
}
