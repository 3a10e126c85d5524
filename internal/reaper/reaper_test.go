package reaper_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/envd-dev/envd/internal/procstat"
	"github.com/envd-dev/envd/internal/reaper"
)

// disabledEnv, when set, makes this test binary run without reaper.Enable,
// so TestStartWithoutEnable can check that mode in a child process.
const disabledEnv = "ENVD_REAPER_TEST_DISABLED"

func TestMain(m *testing.M) {
	if os.Getenv(disabledEnv) == "" {
		// As the daemon does: the whole test binary is a subreaper, and
		// every child below goes through reaper.Start.
		if err := reaper.Enable(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))); err != nil {
			fmt.Fprintln(os.Stderr, "reaper.Enable:", err)
			os.Exit(1)
		}
	}
	goleak.VerifyTestMain(m,
		// The reap loop lives as long as the process, by design.
		goleak.IgnoreTopFunction("github.com/envd-dev/envd/internal/reaper.enable.func1"),
	)
}

// waitTimeout bounds every wait for a child in these tests: a hang's
// bound, not a speed (TestStartWithoutEnable's child is this whole test
// binary, built with -race, started on a machine that may be loaded).
const waitTimeout = 60 * time.Second

func waitExit(t *testing.T, ch <-chan reaper.Exit) reaper.Exit {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(waitTimeout):
		t.Fatalf("no exit status after %v", waitTimeout)
		return reaper.Exit{}
	}
}

func TestExit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		status   syscall.WaitStatus // as wait4 reports it on Linux
		wantCode int
		wantStr  string
	}{
		{name: "exit 0", status: 0, wantCode: 0, wantStr: "exit status 0"},
		{name: "exit 3", status: 3 << 8, wantCode: 3, wantStr: "exit status 3"},
		{name: "exit 255", status: 255 << 8, wantCode: 255, wantStr: "exit status 255"},
		{name: "killed", status: syscall.WaitStatus(syscall.SIGKILL), wantCode: -1, wantStr: "signal: killed"},
		{name: "terminated", status: syscall.WaitStatus(syscall.SIGTERM), wantCode: -1, wantStr: "signal: terminated"},
		{name: "core dump", status: syscall.WaitStatus(syscall.SIGSEGV) | 0x80, wantCode: -1, wantStr: "signal: segmentation fault (core dumped)"},
		{name: "abort with core", status: syscall.WaitStatus(syscall.SIGABRT) | 0x80, wantCode: -1, wantStr: "signal: aborted (core dumped)"},
		{name: "stopped", status: syscall.WaitStatus(syscall.SIGSTOP)<<8 | 0x7f, wantCode: -1, wantStr: "unknown wait status 0x137f"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := reaper.Exit{Status: tt.status}
			if got := e.Code(); got != tt.wantCode {
				t.Errorf("Code() = %d, want %d", got, tt.wantCode)
			}
			if got := e.String(); got != tt.wantStr {
				t.Errorf("String() = %q, want %q", got, tt.wantStr)
			}
		})
	}
}

// TestExitMatchesOS: real children end the way os.ProcessState describes them.
func TestExitMatchesOS(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		script   string
		wantCode int
		wantStr  string
	}{
		{name: "success", script: "exit 0", wantCode: 0, wantStr: "exit status 0"},
		{name: "exit code", script: "exit 3", wantCode: 3, wantStr: "exit status 3"},
		{name: "killed", script: "kill -KILL $$", wantCode: -1, wantStr: "signal: killed"},
		{name: "terminated", script: "kill -TERM $$", wantCode: -1, wantStr: "signal: terminated"},
		{name: "interrupted", script: "kill -INT $$", wantCode: -1, wantStr: "signal: interrupt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ch, err := reaper.Start(exec.Command("/bin/sh", "-c", tt.script))
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			e := waitExit(t, ch)
			if e.Code() != tt.wantCode || e.String() != tt.wantStr {
				t.Errorf("exit = %d %q, want %d %q", e.Code(), e.String(), tt.wantCode, tt.wantStr)
			}
		})
	}
}

// procState returns the state letter of pid and its parent, or ok false
// when /proc has no such process.
func procState(pid int) (state byte, ppid int, ok bool) {
	st, err := procstat.Read(pid)
	return st.State, st.PPid, err == nil
}

// TestOrphanReaped: a child forks a grandchild and exits; the grandchild is
// reparented to us (the subreaper), and once it exits it is reaped, not left
// a zombie, while the child's own status still reaches its owner.
func TestOrphanReaped(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// The grandchild closes its stdout at once so that it holds no pipe,
	// then lives a little after its parent exited.
	cmd := exec.Command("/bin/sh", "-c", `sleep 0.5 >/dev/null 2>&1 </dev/null & echo $!; exit 7`)
	cmd.Stdout = w
	ch, err := reaper.Start(cmd)
	w.Close()
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatalf("read grandchild pid: %v", err)
	}
	grandchild, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("grandchild pid %q: %v", line, err)
	}
	e := waitExit(t, ch)
	if e.Code() != 7 || e.String() != "exit status 7" {
		t.Fatalf("child exit = %d %q, want 7 \"exit status 7\"", e.Code(), e)
	}

	// While the grandchild still runs, it is ours.
	if _, ppid, ok := procState(grandchild); ok && ppid != os.Getpid() {
		t.Errorf("grandchild %d has parent %d, want this process %d (subreaper)", grandchild, ppid, os.Getpid())
	}
	if !slicesContains(reaper.Children(), grandchild) {
		if _, _, ok := procState(grandchild); ok {
			t.Errorf("Children() = %v does not list the orphan %d", reaper.Children(), grandchild)
		}
	}

	deadline := time.Now().Add(waitTimeout)
	for {
		st, _, ok := procState(grandchild)
		if !ok {
			break // reaped
		}
		if time.Now().After(deadline) {
			t.Fatalf("grandchild %d still in /proc in state %c after %v", grandchild, st, waitTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func slicesContains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestConcurrentStarts: many children started at once, exiting in any
// order, each get their own status and nobody else's.
func TestConcurrentStarts(t *testing.T) {
	t.Parallel()
	const n = 64
	type result struct {
		i   int
		pid int
		e   reaper.Exit
		err error
	}
	results := make(chan result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			// Every fourth kills itself; the others exit with their index.
			script := fmt.Sprintf("exit %d", i)
			if i%4 == 3 {
				script = "kill -KILL $$"
			}
			cmd := exec.Command("/bin/sh", "-c", script)
			ch, err := reaper.Start(cmd)
			if err != nil {
				results <- result{i: i, err: err}
				return
			}
			select {
			case e := <-ch:
				results <- result{i: i, pid: cmd.Process.Pid, e: e}
			case <-time.After(waitTimeout):
				results <- result{i: i, err: errors.New("no exit status")}
			}
		})
	}
	wg.Wait()
	close(results)
	for r := range results {
		if r.err != nil {
			t.Errorf("child %d: %v", r.i, r.err)
			continue
		}
		want := fmt.Sprintf("exit status %d", r.i)
		if r.i%4 == 3 {
			want = "signal: killed"
		}
		if r.e.String() != want {
			t.Errorf("child %d: exit %q, want %q", r.i, r.e, want)
		}
		// Its status came from the reap: it is no zombie.
		if st, ppid, ok := procState(r.pid); ok && st == 'Z' && ppid == os.Getpid() {
			t.Errorf("child %d: pid %d left a zombie", r.i, r.pid)
		}
	}
}

// TestExitDeliveredOnce: the channel gets exactly one status.
func TestExitDeliveredOnce(t *testing.T) {
	t.Parallel()
	ch, err := reaper.Start(exec.Command("/bin/true"))
	if err != nil {
		t.Fatal(err)
	}
	if e := waitExit(t, ch); e.Code() != 0 {
		t.Fatalf("exit = %q", e)
	}
	select {
	case e := <-ch:
		t.Fatalf("second status %q", e)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestStartStdio(t *testing.T) {
	t.Parallel()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	tests := []struct {
		name    string
		set     func(*exec.Cmd)
		wantErr bool
	}{
		{name: "nil stdio", set: func(*exec.Cmd) {}},
		{name: "file stdio", set: func(c *exec.Cmd) { c.Stdin, c.Stdout, c.Stderr = f, f, f }},
		{name: "buffer stdout refused", set: func(c *exec.Cmd) { c.Stdout = new(bytes.Buffer) }, wantErr: true},
		{name: "reader stdin refused", set: func(c *exec.Cmd) { c.Stdin = strings.NewReader("x") }, wantErr: true},
		{name: "writer stderr refused", set: func(c *exec.Cmd) { c.Stderr = io.Discard }, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command("/bin/true")
			tt.set(cmd)
			ch, err := reaper.Start(cmd)
			if tt.wantErr {
				if err == nil {
					waitExit(t, ch)
					t.Fatal("Start accepted stdio that is not an *os.File")
				}
				if cmd.Process != nil {
					t.Errorf("Start refused the command but started it (pid %d)", cmd.Process.Pid)
				}
				if !strings.Contains(err.Error(), "*os.File") {
					t.Errorf("error %q does not say what stdio is allowed", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			if e := waitExit(t, ch); e.Code() != 0 {
				t.Errorf("exit %q", e)
			}
		})
	}
}

func TestStartMissingExecutable(t *testing.T) {
	t.Parallel()
	ch, err := reaper.Start(exec.Command("/no/such/program"))
	if err == nil {
		waitExit(t, ch)
		t.Fatal("Start of a missing program: no error")
	}
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error %v, want one wrapping os.ErrNotExist", err)
	}
	// A failed start leaves nothing registered: a later child still works.
	ch, err = reaper.Start(exec.Command("/bin/sh", "-c", "exit 5"))
	if err != nil {
		t.Fatal(err)
	}
	if e := waitExit(t, ch); e.Code() != 5 {
		t.Errorf("exit %q, want exit status 5", e)
	}
}

// TestChildren: a running child is listed, and no longer once it is reaped.
func TestChildren(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cmd := exec.Command("/bin/cat")
	cmd.Stdin = r
	ch, err := reaper.Start(cmd)
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if !slicesContains(reaper.Children(), pid) {
		t.Errorf("Children() = %v, want it to list %d", reaper.Children(), pid)
	}
	w.Close() // cat reads EOF and exits
	if e := waitExit(t, ch); e.Code() != 0 {
		t.Fatalf("exit %q", e)
	}
	if slicesContains(reaper.Children(), pid) {
		t.Errorf("Children() = %v still lists %d after it was reaped", reaper.Children(), pid)
	}
}

// TestStartWithoutEnable runs this test binary again without Enable and
// checks there that Start still delivers statuses (through os.Process.Wait).
func TestStartWithoutEnable(t *testing.T) {
	if os.Getenv(disabledEnv) != "" {
		for _, tc := range []struct {
			script string
			want   string
		}{
			{"exit 0", "exit status 0"},
			{"exit 9", "exit status 9"},
			{"kill -KILL $$", "signal: killed"},
		} {
			ch, err := reaper.Start(exec.Command("/bin/sh", "-c", tc.script))
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			if e := waitExit(t, ch); e.String() != tc.want {
				t.Errorf("%s: exit %q, want %q", tc.script, e, tc.want)
			}
		}
		return
	}
	t.Parallel()
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestStartWithoutEnable$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), disabledEnv+"=1")
	cmd.Stdout, cmd.Stderr = out, out
	ch, err := reaper.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	e := waitExit(t, ch)
	b, _ := os.ReadFile(out.Name())
	if e.Code() != 0 || !bytes.Contains(b, []byte("--- PASS: TestStartWithoutEnable")) {
		t.Fatalf("child test run: %s\n%s", e, b)
	}
}

// TestManyConcurrentChildren: 800 short children started at once, with the
// subreaper on, each get their own exit status (many exit before their
// Start has registered them), and nothing is left kept for them.
func TestManyConcurrentChildren(t *testing.T) {
	t.Parallel()
	const n = 800
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			script, want := fmt.Sprintf("exit %d", i%250), fmt.Sprintf("exit status %d", i%250)
			if i%7 == 6 {
				script, want = "kill -KILL $$", "signal: killed"
			}
			cmd := exec.Command("/bin/sh", "-c", script)
			ch, err := reaper.Start(cmd)
			if err != nil {
				errs[i] = fmt.Errorf("start: %w", err)
				return
			}
			select {
			case e := <-ch:
				if e.String() != want {
					errs[i] = fmt.Errorf("exit %q, want %q", e, want)
				}
			case <-time.After(waitTimeout):
				st, ppid, ok := procState(cmd.Process.Pid)
				errs[i] = fmt.Errorf("no exit status: pid %d state %c ppid %d inproc %v unclaimed %d", cmd.Process.Pid, st, ppid, ok, reaper.Unclaimed())
			}
		})
	}
	wg.Wait()
	failed := 0
	for i, err := range errs {
		if err != nil {
			failed++
			if failed <= 10 {
				t.Errorf("child %d: %v", i, err)
			}
		}
	}
	if failed > 0 {
		buf := make([]byte, 1<<22)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "reaper.") && !strings.Contains(g, "TestManyConcurrentChildren.func1") {
				t.Log(g)
			}
		}
		t.Errorf("%d of %d children did not get their exit status", failed, n)
	}
}

// TestStartsDoNotWaitForEachOther: while one Start is stuck between its fork
// and its exec, other Starts start, and their children are reaped and
// reported. (A reaper that held its lock across fork/exec would stall them
// all behind the stuck one.)
func TestStartsDoNotWaitForEachOther(t *testing.T) {
	// Not parallel: it swaps how Start forks, and no other test runs meanwhile.
	entered, release := make(chan struct{}), make(chan struct{})
	restore := reaper.SetStartProcess(func(cmd *exec.Cmd) error {
		if len(cmd.Args) > 1 && cmd.Args[1] == "stuck" {
			close(entered)
			<-release
		}
		return cmd.Start()
	})
	defer restore()
	stuck := make(chan error, 1)
	var stuckExit <-chan reaper.Exit
	go func() {
		ch, err := reaper.Start(exec.Command("/bin/echo", "stuck"))
		stuckExit = ch
		stuck <- err
	}()
	<-entered
	done := make(chan error, 1)
	go func() {
		for i := range 20 {
			ch, err := reaper.Start(exec.Command("/bin/sh", "-c", fmt.Sprintf("exit %d", i)))
			if err != nil {
				done <- err
				return
			}
			if e := <-ch; e.Code() != i {
				done <- fmt.Errorf("child %d: exit %q", i, e)
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(waitTimeout):
		t.Error("Starts waited for a Start in flight")
	}
	close(release)
	if err := <-stuck; err != nil {
		t.Fatalf("stuck Start: %v", err)
	}
	if e := <-stuckExit; e.Code() != 0 {
		t.Errorf("stuck child: exit %q", e)
	}
	if n := reaper.Unclaimed(); n != 0 {
		t.Errorf("%d exits still kept with no Start in flight", n)
	}
}

// SignalChild reaches a child of ours and the group it leads, and nothing
// once the child is reaped or for a process that is not our child, even
// one leading a group: its number could be a reused pid's.
func TestSignalChild(t *testing.T) {
	t.Parallel()
	// A leader whose group holds a background job, and a process it
	// started in a session of its own (a leader, not our child).
	cmd := exec.Command("/bin/sh", "-c", "sleep 60 & setsid sleep 60 & echo $!; wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	ch, err := reaper.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(stranger, syscall.SIGKILL) })
	// setsid may not have run yet: wait for it to lead its own group.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, err := procstat.Read(stranger); err == nil && st.PGrp == stranger {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the setsid'd sleep %d never led its group", stranger)
		}
	}
	if reaper.SignalChild(stranger, syscall.SIGKILL, true) {
		t.Errorf("SignalChild signalled %d, which is not our child", stranger)
	}
	pid := cmd.Process.Pid
	if !reaper.SignalChild(pid, syscall.SIGKILL, true) {
		t.Fatalf("SignalChild(%d) sent nothing to a live child", pid)
	}
	if e := waitExit(t, ch); e.Status.Signal() != syscall.SIGKILL {
		t.Errorf("the leader ended %q, want SIGKILL", e)
	}
	// The background job, in the leader's group, went with it.
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(-pid, 0) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("group %d still has members after SignalChild", pid)
		}
	}
	if reaper.SignalChild(pid, syscall.SIGKILL, true) {
		t.Errorf("SignalChild(%d) signalled after the child was reaped", pid)
	}
	if st, err := procstat.Read(stranger); err != nil || st.State == 'Z' {
		t.Errorf("the process that is not our child did not survive: %v %+v", err, st)
	}
}
