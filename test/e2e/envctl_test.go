package e2e_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/envd-dev/envd/internal/testutil"
)

// envctlBin is envctl, built once, with -race when these tests run with it.
func envctlBin(t *testing.T) string {
	t.Helper()
	bin, err := testutil.Build("envctl", testutil.RaceEnabled)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// ctlResult is what one envctl run did.
type ctlResult struct {
	stdout, stderr string
	code           int
}

// ctlEnv is the environment envctl runs with: no ENVD_* or ENVCTL_*
// variables but extra. A -race build sleeps 1 s at exit by default, for
// reports to finish; envctl's goroutines are done by then.
func ctlEnv(extra ...string) []string {
	var env []string
	for _, kv := range cleanEnv() {
		if !strings.HasPrefix(kv, "ENVCTL_") && !strings.HasPrefix(kv, "GORACE=") {
			env = append(env, kv)
		}
	}
	env = append(env, "GORACE=atexit_sleep_ms=50 "+os.Getenv("GORACE"))
	return append(env, extra...)
}

// envctl runs the binary to its end with stdin (nil: /dev/null).
func envctl(t *testing.T, env []string, stdin io.Reader, args ...string) ctlResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, envctlBin(t), args...)
	cmd.Env = ctlEnv(env...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("envctl %q: %v", args, err)
	}
	if strings.Contains(errb.String(), "WARNING: DATA RACE") {
		t.Errorf("envctl %q reported a data race:\n%s", args, errb.String())
	}
	return ctlResult{stdout: out.String(), stderr: errb.String(), code: cmd.ProcessState.ExitCode()}
}

// startCtl starts envctl without waiting for it.
func startCtl(t *testing.T, args ...string) (*exec.Cmd, *syncBuffer, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(envctlBin(t), args...)
	cmd.Env = ctlEnv()
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, &out, &errb
}

// waitExit waits for a started envctl and returns its exit code.
func waitExit(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(requestTimeout):
		cmd.Process.Kill()
		<-done
		t.Fatalf("envctl %q still running after %v", cmd.Args[1:], requestTimeout)
	}
	return cmd.ProcessState.ExitCode()
}

// oneErrorLine checks that r failed the way envctl reports its own
// failures: exit 125 (docker's code), nothing on stdout, one line
// "envctl: ..." on stderr containing want.
func oneErrorLine(t *testing.T, r ctlResult, want string) {
	t.Helper()
	errorLine(t, r, 125, want)
}

// errorLine is oneErrorLine with another exit code: envctl's own (2 for a
// bad command line, 3 for a refusal, 4 for what does not exist), 126 for a
// command that cannot be run, 127 for one that does not exist.
func errorLine(t *testing.T, r ctlResult, code int, want string) {
	t.Helper()
	if r.code != code || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "envctl: ") || !strings.Contains(r.stderr, want) {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and one line containing %q", r.code, r.stdout, r.stderr, code, want)
	}
}

func TestEnvctlRun(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{})
	addr := "--addr=" + e.url
	tests := []struct {
		name     string
		stdin    string
		args     []string
		code     int
		stdout   string
		stderr   string
		inStderr string
	}{
		{name: "exit 0", args: []string{"--", "/bin/sh", "-c", "echo out; echo err >&2"}, stdout: "out\n", stderr: "err\n"},
		{name: "exit 3", args: []string{"--", "/bin/sh", "-c", "echo three; exit 3"}, code: 3, stdout: "three\n"},
		{name: "SIGKILL", args: []string{"--", "/bin/sh", "-c", "kill -KILL $$"}, code: 128 + 9},
		{name: "SIGTERM", args: []string{"--", "/bin/sh", "-c", "kill -TERM $$"}, code: 128 + 15},
		{name: "without --", args: []string{"echo", "-n", "plain"}, stdout: "plain"},
		{name: "stdin", stdin: "line one\nline two\n", args: []string{"--", "wc", "-l"}, stdout: "2\n"},
		{name: "no stdin", stdin: "ignored\n", args: []string{"--no-stdin", "--", "wc", "-c"}, stdout: "0\n"},
		{name: "env and cwd", args: []string{"--env", "A=1", "--env=B=two words", "--cwd", "/tmp", "--", "/bin/sh", "-c", "echo $A $B; pwd"}, stdout: "1 two words\n/tmp\n"},
		{name: "timeout", args: []string{"--timeout", "300ms", "--", "sleep", "30"}, code: 128 + 9, inStderr: "ran out of its 300ms timeout"},
		{name: "big output", args: []string{"--", "/bin/sh", "-c", "seq 1 200000 | tail -n 1; head -c 20000000 /dev/zero | wc -c"}, stdout: "200000\n20000000\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var in io.Reader
			if tt.stdin != "" {
				in = strings.NewReader(tt.stdin)
			}
			r := envctl(t, nil, in, append([]string{addr, "run"}, tt.args...)...)
			if r.code != tt.code || r.stdout != tt.stdout || (tt.inStderr == "" && r.stderr != tt.stderr) || !strings.Contains(r.stderr, tt.inStderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr, tt.code, tt.stdout, tt.stderr+tt.inStderr)
			}
		})
	}
	t.Run("missing program", func(t *testing.T) {
		t.Parallel()
		errorLine(t, envctl(t, nil, nil, addr, "run", "--", "/no/such/program"), 127, "no such file or directory")
		errorLine(t, envctl(t, nil, nil, addr, "run", "--", "no-such-program-envctl"), 127, "executable not found")
		errorLine(t, envctl(t, nil, nil, addr, "run", "--", "/etc/hostname"), 126, "/etc/hostname")
		errorLine(t, envctl(t, nil, nil, addr, "run", "--cwd", "/no/such/dir", "--", "true"), 126, "/no/such/dir")
	})
	t.Run("a signal to envctl goes to the process", func(t *testing.T) {
		t.Parallel()
		cmd, out, errb := startCtl(t, addr, "run", "--verbose", "--", "/bin/sh", "-c", "echo ready; exec sleep 30")
		testutil.Poll(t, "the process to start", func() bool { return out.String() == "ready\n" })
		cmd.Process.Signal(syscall.SIGINT)
		if code := waitExit(t, cmd); code != 128+15 {
			t.Errorf("envctl run after SIGINT: exit %d, want %d (the process got SIGTERM)", code, 128+15)
		}
		if !verboseEnd(t, errb.String(), "killed by a client's signal: SIGTERM") {
			t.Errorf("envctl run --verbose after SIGINT: stderr %q", errb.String())
		}
	})
	// --verbose: one line more on stderr, last, saying why the command
	// ended and what it used. dd's 64 MiB buffer is in its peak RSS (the
	// shell's, which counts the children it waited for).
	t.Run("verbose", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			args []string
			code int
			why  string
		}{
			{[]string{"--", "/bin/sh", "-c", "dd if=/dev/zero of=/dev/null bs=64M count=1 status=none; exit 3"}, 3, "exited with status 3"},
			{[]string{"--", "/bin/sh", "-c", "echo out; kill -TERM $$"}, 128 + 15, "signaled: SIGTERM"},
			{[]string{"--timeout", "300ms", "--", "sleep", "30"}, 128 + 9, "timed out: SIGKILL"},
		}
		for _, tt := range tests {
			r := envctl(t, nil, nil, append([]string{addr, "run", "--verbose"}, tt.args...)...)
			if r.code != tt.code || !verboseEnd(t, r.stderr, tt.why) {
				t.Errorf("run --verbose %q: exit %d, stderr %q; want exit %d, last line %q and usage", tt.args, r.code, r.stderr, tt.code, tt.why)
			}
			if tt.code == 3 {
				if rss := maxRSS(r.stderr); rss < 64<<20 {
					t.Errorf("run --verbose %q: max RSS %.0f bytes, want 64 MiB or more (dd's buffer): %q", tt.args, rss, r.stderr)
				}
				if peak := memoryPeak(r.stderr); peak < 64<<20 {
					t.Errorf("run --verbose %q: memory peak %.0f bytes, want 64 MiB or more (dd's buffer, in the process's cgroup): %q", tt.args, peak, r.stderr)
				}
			}
			if tt.code == 128+15 && r.stdout != "out\n" {
				t.Errorf("run --verbose %q: stdout %q", tt.args, r.stdout)
			}
		}
	})
}

// verboseLine is run --verbose's line: why the command ended, then what it
// used.
// The memory peak is the process's cgroup's (envd's cgroups are on here).
var verboseLine = regexp.MustCompile(`^envctl: (.+) \(user \d+\.\d\ds, system \d+\.\d\ds, max RSS (\d+(?:\.\d)?) (B|KiB|MiB|GiB)(?:, memory peak (\d+(?:\.\d)?) (B|KiB|MiB|GiB))?\)$`)

// verboseEnd tells whether stderr ends with run --verbose's line saying
// why.
func verboseEnd(t *testing.T, stderr, why string) bool {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	m := verboseLine.FindStringSubmatch(lines[len(lines)-1])
	return strings.HasSuffix(stderr, "\n") && m != nil && m[1] == why
}

// maxRSS is the peak RSS run --verbose's last line reports, in bytes (-1
// if there is none).
func maxRSS(stderr string) float64 { return verboseBytes(stderr, 2) }

// memoryPeak is the cgroup memory peak run --verbose's last line reports,
// in bytes (-1 if there is none).
func memoryPeak(stderr string) float64 { return verboseBytes(stderr, 4) }

func verboseBytes(stderr string, group int) float64 {
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	m := verboseLine.FindStringSubmatch(lines[len(lines)-1])
	if m == nil || m[group] == "" {
		return -1
	}
	n, _ := strconv.ParseFloat(m[group], 64)
	return n * map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m[group+1]]
}

// TestEnvctlPTY runs an interactive shell through envctl --pty, with
// envctl itself on a terminal of ours.
func TestEnvctlPTY(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{})
	term := envctlOnTerminal(t, 90, 20, "--addr", e.url, "run", "--pty", "--env", "PS1=$ ", "--", "/bin/sh")
	cmd, tty, screen, copied, type_ := term.cmd, term.tty, &term.screen, term.copied, term.type_
	type_("stty size; echo term=$TERM\n")
	waitScreen(t, screen, "20 90", "term=xterm")
	// A resize of envctl's terminal reaches the remote one: once the remote
	// terminal has the new size, stty says so.
	sh := foreground(t, e, "sh")
	if err := pty.Setsize(tty, &pty.Winsize{Cols: 132, Rows: 43}); err != nil {
		t.Fatal(err)
	}
	testutil.Poll(t, "the remote terminal to be 43x132", func() bool {
		rows, cols := ttySize(sh)
		return rows == 43 && cols == 132
	})
	type_("stty size\n")
	waitScreen(t, screen, "43 132")
	// Raw mode: Ctrl-C goes to the remote shell's foreground job, not to
	// envctl. It is typed once sleep is that job: earlier, it would reach
	// the shell alone and sleep would run its 30 s.
	type_("sleep 30\n")
	foreground(t, e, "sleep")
	type_("\x03")
	type_("echo still here; exit 4\n")
	code := waitExit(t, cmd)
	testutil.RequireClosed(t, copied, "the end of envctl's output")
	if code != 4 {
		t.Errorf("exit %d, want 4; screen:\n%s", code, screen.String())
	}
	if !strings.Contains(screen.String(), "still here") {
		t.Errorf("screen:\n%s", screen.String())
	}
}

// terminal is envctl run on a terminal of the test's: what it draws goes
// to screen; copied is closed once the copy ends (EIO), when envctl, the
// terminal's last user, has exited and its last output is on the screen.
type terminal struct {
	t      *testing.T
	cmd    *exec.Cmd
	tty    *os.File
	screen syncBuffer
	copied chan struct{}
}

// envctlOnTerminal starts envctl with args (TERM=xterm) on a new terminal
// of cols x rows, killed at the end of the test if it is still running.
func envctlOnTerminal(t *testing.T, cols, rows uint16, args ...string) *terminal {
	t.Helper()
	cmd := exec.Command(envctlBin(t), args...)
	cmd.Env = ctlEnv("TERM=xterm")
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: cols, Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tty.Close()
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	term := &terminal{t: t, cmd: cmd, tty: tty, copied: make(chan struct{})}
	go func() {
		defer close(term.copied)
		io.Copy(&term.screen, tty)
	}()
	return term
}

// type_ types s on the terminal.
func (term *terminal) type_(s string) {
	term.t.Helper()
	if _, err := io.WriteString(term.tty, s); err != nil {
		term.t.Fatal(err)
	}
}

// waitScreen waits until the screen shows every one of wants.
func waitScreen(t *testing.T, screen *syncBuffer, wants ...string) {
	t.Helper()
	testutil.Poll(t, fmt.Sprintf("%q on the screen", wants), func() bool {
		s := screen.String()
		for _, w := range wants {
			if !strings.Contains(s, w) {
				return false
			}
		}
		return true
	})
}

// foreground waits until a process named comm started by e is the
// foreground job of its terminal, and returns it.
func foreground(t *testing.T, e *envd, comm string) proc {
	t.Helper()
	var found proc
	testutil.Poll(t, comm+" as the foreground job of its terminal", func() bool {
		for _, p := range descendants(e.cmd.Process.Pid) {
			if p.Comm == comm && p.TPGid == p.PGrp {
				found = p
				return true
			}
		}
		return false
	})
	return found
}

// ttySize reads the size of p's terminal (its stdin), 0, 0 if it cannot.
func ttySize(p proc) (rows, cols int) {
	f, err := os.Open("/proc/" + strconv.Itoa(p.Pid) + "/fd/0")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	ws, err := pty.GetsizeFull(f)
	if err != nil {
		return 0, 0
	}
	return int(ws.Rows), int(ws.Cols)
}

// sparseFile makes a file of size bytes fast: a hole with some data at a
// few offsets, so that a copy that drops or moves a chunk changes the sum.
func sparseFile(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 4096, size / 3, size/2 + 7, size - 5} {
		mark := []byte(fmt.Sprintf("@%d@", off))
		if _, err := f.WriteAt(mark[:min(int64(len(mark)), size-off)], off); err != nil {
			t.Fatal(err)
		}
	}
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, f, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// TestEnvctlCopyGiB copies a 1 GiB file into the sandbox and back out with
// envctl cp; all three copies have the same sha256.
func TestEnvctlCopyGiB(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{args: []string{"-default-user", "root"}})
	dir := t.TempDir()
	src, back := filepath.Join(dir, "src.bin"), filepath.Join(dir, "back.bin")
	remote := filepath.Join(dir, "in-sandbox", "copy.bin")
	sparseFile(t, src, 1<<30)

	start := time.Now()
	if r := envctl(t, nil, nil, "--addr", e.url, "cp", src, "envd:"+remote); r.code != 0 || r.stdout != "" || r.stderr != "" {
		t.Fatalf("cp in: %+v", r)
	}
	t.Logf("cp of 1 GiB into the sandbox: %v", time.Since(start))
	start = time.Now()
	if r := envctl(t, nil, nil, "--unix", e.sock, "cp", "envd:"+remote, back); r.code != 0 || r.stdout != "" || r.stderr != "" {
		t.Fatalf("cp out: %+v", r)
	}
	t.Logf("cp of 1 GiB out of the sandbox: %v", time.Since(start))
	want := fileSum(t, src)
	for _, p := range []string{remote, back} {
		if fi, err := os.Stat(p); err != nil || fi.Size() != 1<<30 {
			t.Fatalf("%s: %v, %v", p, fi, err)
		}
		if got := fileSum(t, p); got != want {
			t.Errorf("sha256 of %s %s, want %s", p, got, want)
		}
	}
	// No temporary file is left beside the download.
	if ents, _ := os.ReadDir(dir); len(ents) != 3 {
		t.Errorf("%s holds %d entries, want 3 (src, back, in-sandbox)", dir, len(ents))
	}
}

func TestEnvctlCopy(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{args: []string{"-default-user", "root"}})
	addr := "--addr=" + e.url
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("alpha\n"), 0o644)
	os.Mkdir(filepath.Join(dir, "remote"), 0o755)
	os.Mkdir(filepath.Join(dir, "local"), 0o755)

	// Into a directory (existing, or written with a trailing slash), the
	// file keeps its name, as with cp.
	for _, dst := range []string{"envd:" + dir + "/remote", "envd:" + dir + "/new/"} {
		if r := envctl(t, nil, nil, addr, "cp", filepath.Join(dir, "a.txt"), dst); r.code != 0 {
			t.Fatalf("cp to %s: %+v", dst, r)
		}
	}
	for _, p := range []string{"remote/a.txt", "new/a.txt"} {
		if b, _ := os.ReadFile(filepath.Join(dir, p)); string(b) != "alpha\n" {
			t.Errorf("%s: %q", p, b)
		}
	}
	if r := envctl(t, nil, nil, addr, "cp", "envd:"+dir+"/remote/a.txt", dir+"/local"); r.code != 0 {
		t.Fatalf("cp to a local dir: %+v", r)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "local/a.txt")); string(b) != "alpha\n" {
		t.Errorf("local/a.txt: %q", b)
	}
	// stdin and stdout.
	if r := envctl(t, nil, strings.NewReader("from stdin"), addr, "cp", "-", "envd:"+dir+"/stdin.txt"); r.code != 0 {
		t.Fatalf("cp from stdin: %+v", r)
	}
	if r := envctl(t, nil, nil, addr, "cp", "envd:"+dir+"/stdin.txt", "-"); r.code != 0 || r.stdout != "from stdin" {
		t.Errorf("cp to stdout: %+v", r)
	}
	// On a terminal, a progress bar goes to stderr; stdout stays clean.
	t.Run("progress bar", func(t *testing.T) {
		ptmx, tty, err := pty.Open()
		if err != nil {
			t.Fatal(err)
		}
		defer ptmx.Close()
		defer tty.Close()
		var bar syncBuffer
		go io.Copy(&bar, ptmx)
		sparseFile(t, filepath.Join(dir, "big"), 64<<20)
		cmd := exec.Command(envctlBin(t), addr, "cp", filepath.Join(dir, "big"), "envd:"+dir+"/big-copy")
		cmd.Env = ctlEnv()
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, tty
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		testutil.Poll(t, "the progress bar", func() bool { return strings.Contains(bar.String(), "100.0%") })
		if out.Len() != 0 || !strings.Contains(bar.String(), "upload big [") || !strings.Contains(bar.String(), "64.0 MiB") {
			t.Errorf("stdout %q, terminal %q", out.String(), bar.String())
		}
	})
}

func TestEnvctlFiles(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{args: []string{"-default-user", "root"}})
	addr := "--addr=" + e.url
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "d", "e"), 0o755)
	os.WriteFile(filepath.Join(dir, "d", "f.txt"), []byte("contents of f\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "g.txt"), []byte("g\n"), 0o600)

	t.Run("ls", func(t *testing.T) {
		r := envctl(t, nil, nil, addr, "ls", dir)
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		if r.code != 0 || len(lines) != 2 || !regexp.MustCompile(`^drwxr-xr-x root root +\d+ \d{4}-\d\d-\d\d \d\d:\d\d d/$`).MatchString(lines[0]) ||
			!regexp.MustCompile(`^-rw------- root root +2 .* g\.txt$`).MatchString(lines[1]) {
			t.Errorf("ls: %+v", r)
		}
		r = envctl(t, nil, nil, addr, "ls", "--depth", "3", dir)
		var names []string
		for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			f := strings.Fields(l)
			names = append(names, f[len(f)-1])
		}
		if r.code != 0 || strings.Join(names, " ") != "d/ d/e/ d/f.txt g.txt" {
			t.Errorf("ls --depth 3: %v (%+v)", names, r)
		}
		if r := envctl(t, nil, nil, addr, "ls", dir+"/g.txt"); r.code != 0 || !strings.HasSuffix(r.stdout, " g.txt\n") {
			t.Errorf("ls of a file: %+v", r)
		}
		// A link is marked l, as ls -l marks it.
		links := t.TempDir()
		if err := os.Symlink(filepath.Join(dir, "g.txt"), filepath.Join(links, "link")); err != nil {
			t.Fatal(err)
		}
		var files []map[string]any
		if r := envctl(t, nil, nil, addr, "ls", "--json", dir); r.code != 0 || json.Unmarshal([]byte(r.stdout), &files) != nil || len(files) != 2 ||
			files[1]["name"] != "g.txt" || files[1]["mode"] != "0600" || files[1]["type"] != "file" || files[1]["owner"] != "root" || files[1]["size"] != float64(2) {
			t.Errorf("ls --json: %+v", r)
		}
		r = envctl(t, nil, nil, addr, "ls", links)
		if r.code != 0 || !regexp.MustCompile(`^l\S{9} root root .* link -> `+regexp.QuoteMeta(filepath.Join(dir, "g.txt"))+`\n$`).MatchString(r.stdout) {
			t.Errorf("ls of a symlink: %+v", r)
		}
	})
	t.Run("cat", func(t *testing.T) {
		r := envctl(t, nil, nil, addr, "cat", dir+"/d/f.txt", dir+"/g.txt")
		if r.code != 0 || r.stdout != "contents of f\ng\n" || r.stderr != "" {
			t.Errorf("cat: %+v", r)
		}
	})
	t.Run("stat", func(t *testing.T) {
		links := t.TempDir()
		if err := os.Symlink(dir+"/g.txt", filepath.Join(links, "link")); err != nil {
			t.Fatal(err)
		}
		r := envctl(t, nil, nil, addr, "stat", dir+"/g.txt", dir+"/d", links+"/link")
		if r.code != 0 || !strings.Contains(r.stdout, "  File: "+dir+"/g.txt\n  Type: file\n  Size: 2\n  Mode: 0600 (-rw-------)\n Owner: root\n Group: root\nModify: ") ||
			!strings.Contains(r.stdout, "  File: "+dir+"/d\n  Type: directory\n") ||
			!strings.Contains(r.stdout, "  File: "+links+"/link -> "+dir+"/g.txt\n  Type: symlink to a file\n") || r.stderr != "" {
			t.Errorf("stat: %+v", r)
		}
		// One object a line, one a PATH; a link is described, not followed.
		r = envctl(t, nil, nil, addr, "stat", "--json", dir+"/g.txt", links+"/link")
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		var file, link map[string]any
		if r.code != 0 || len(lines) != 2 || json.Unmarshal([]byte(lines[0]), &file) != nil || json.Unmarshal([]byte(lines[1]), &link) != nil {
			t.Fatalf("stat --json: %+v", r)
		}
		if file["path"] != dir+"/g.txt" || file["name"] != "g.txt" || file["type"] != "file" || file["mode"] != "0600" ||
			file["permissions"] != "-rw-------" || file["size"] != float64(2) || file["owner"] != "root" || file["symlink_target"] != nil {
			t.Errorf("stat --json of a file: %v", file)
		}
		if link["path"] != links+"/link" || link["permissions"] != "Lrwxrwxrwx" || link["symlink_target"] != dir+"/g.txt" ||
			link["size"] != float64(len(dir+"/g.txt")) {
			t.Errorf("stat --json of a link: %v", link)
		}
	})
	t.Run("ps and kill", func(t *testing.T) {
		run, _, _ := startCtl(t, addr, "run", "--tag", "sleeper", "--", "sleep", "30")
		var pid string
		testutil.Poll(t, "ps to show the sleeper", func() bool {
			r := envctl(t, nil, nil, addr, "ps")
			for _, l := range strings.Split(r.stdout, "\n") {
				if f := strings.Fields(l); len(f) == 4 && f[1] == "sleeper" && f[2] == "sleep" && f[3] == "30" {
					pid = f[0]
					return strings.HasPrefix(r.stdout, "PID")
				}
			}
			return false
		})
		var ps []map[string]any
		if r := envctl(t, nil, nil, addr, "ps", "--json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &ps) != nil {
			t.Errorf("ps --json: %+v", r)
		}
		found := false
		for _, p := range ps {
			if p["tag"] == "sleeper" && p["cmd"] == "sleep" && fmt.Sprint(p["pid"]) == pid && fmt.Sprint(p["args"]) == "[30]" {
				found = true
			}
		}
		if !found {
			t.Errorf("ps --json lacks the sleeper (pid %s): %v", pid, ps)
		}
		if r := envctl(t, nil, nil, addr, "kill", pid, "--signal", "KILL"); r.code != 0 || r.stdout != "" || r.stderr != "" {
			t.Errorf("kill: %+v", r)
		}
		if code := waitExit(t, run); code != 128+9 {
			t.Errorf("envctl run of the killed process: exit %d, want %d", code, 128+9)
		}
		errorLine(t, envctl(t, nil, nil, addr, "kill", pid), exitNotFound, "process with pid "+pid+" ")
	})
	t.Run("watch", func(t *testing.T) {
		wdir := filepath.Join(dir, "watched")
		os.MkdirAll(filepath.Join(wdir, "sub"), 0o755)
		cmd, out, errb := startCtl(t, addr, "watch", "--recursive", wdir)
		testutil.Poll(t, "the watch to start", func() bool { return strings.Contains(errb.String(), "watching "+wdir) })
		os.WriteFile(filepath.Join(wdir, "sub", "n.txt"), []byte("n"), 0o644)
		os.Remove(filepath.Join(wdir, "sub", "n.txt"))
		os.Mkdir(filepath.Join(wdir, "new"), 0o755)
		want := "create sub/n.txt\nwrite  sub/n.txt\nremove sub/n.txt\ncreate new\n"
		testutil.Poll(t, "the events", func() bool { return out.String() == want })
		cmd.Process.Signal(syscall.SIGINT)
		if code := waitExit(t, cmd); code != 0 {
			t.Errorf("watch after SIGINT: exit %d, want 0; stderr %q", code, errb.String())
		}
		// --json: one object a line.
		cmd, out, errb = startCtl(t, addr, "watch", "--json", wdir)
		testutil.Poll(t, "the JSON watch to start", func() bool { return strings.Contains(errb.String(), "watching "+wdir) })
		os.Mkdir(filepath.Join(wdir, "json"), 0o755)
		testutil.Poll(t, "the JSON event", func() bool { return strings.HasSuffix(out.String(), "\n") })
		var ev map[string]any
		if err := json.Unmarshal([]byte(strings.SplitN(out.String(), "\n", 2)[0]), &ev); err != nil || ev["name"] != "json" || ev["op"] != "create" {
			t.Errorf("watch --json: %q (%v)", out.String(), err)
		}
		cmd.Process.Signal(syscall.SIGINT)
		waitExit(t, cmd)
	})
	t.Run("health and metrics", func(t *testing.T) {
		if r := envctl(t, nil, nil, addr, "health"); r.code != 0 || !strings.HasPrefix(r.stdout, "ok: envd at tcp 127.0.0.1:") {
			t.Errorf("health: %+v", r)
		}
		if r := envctl(t, nil, nil, addr, "metrics"); r.code != 0 || !regexp.MustCompile(`(?m)^cpu +\d+ cores, [\d.]+% used$`).MatchString(r.stdout) || !strings.Contains(r.stdout, "memory") {
			t.Errorf("metrics: %+v", r)
		}
		var m map[string]any
		if r := envctl(t, nil, nil, addr, "metrics", "--json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &m) != nil || m["cpu_count"] == nil || m["mem_total"] == nil || m["ts"] == nil {
			t.Errorf("metrics --json: %+v", r)
		}
		var h map[string]any
		if r := envctl(t, nil, nil, addr, "health", "--json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &h) != nil || h["ok"] != true || h["latency_ms"] == nil {
			t.Errorf("health --json: %+v", r)
		}
		if r := envctl(t, nil, nil, addr, "envs"); r.code != 0 || !strings.Contains(r.stdout, "E2B_SANDBOX=") {
			t.Errorf("envs: %+v", r)
		}
	})
}

// TestEnvctlTransports reaches envd through each transport flag and the
// environment.
func TestEnvctlTransports(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{args: []string{"-access-token", "tok"}})
	fc := fcListener(t, 49983, func() (net.Conn, error) { return net.Dial("unix", e.sock) })
	// envd behind a TLS proxy (self-signed: --insecure).
	target, _ := url.Parse(e.url)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1
	tlsProxy := httptest.NewUnstartedServer(proxy)
	tlsProxy.EnableHTTP2 = true
	tlsProxy.StartTLS()
	t.Cleanup(tlsProxy.Close)
	tests := []struct {
		name string
		env  []string
		args []string
	}{
		{"--addr", nil, []string{"--addr", e.url, "--token", "tok"}},
		{"--addr https", nil, []string{"--addr", tlsProxy.URL, "--insecure", "--token", "tok"}},
		{"--unix", nil, []string{"--unix", e.sock, "--token=tok"}},
		{"--fc-uds", nil, []string{"--fc-uds", fc + ":49983", "--token", "tok"}},
		{"flags after the command", nil, []string{"run", "--fc-uds", fc + ":49983", "--token", "tok"}},
		{"environment", []string{"ENVCTL_UNIX=" + e.sock, "ENVCTL_TOKEN=tok", "ENVCTL_USER=root"}, nil},
		{"a flag beats the environment", []string{"ENVCTL_ADDR=http://127.0.0.1:1", "ENVCTL_TOKEN=tok"}, []string{"--unix", e.sock}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := tt.args
			if len(args) == 0 || args[0] != "run" {
				args = append(args, "run")
			}
			args = append(args, "--", "/bin/sh", "-c", "echo via $0; exit 7", tt.name)
			r := envctl(t, tt.env, nil, args...)
			if r.code != 7 || r.stdout != "via "+tt.name+"\n" {
				t.Errorf("%+v; want exit 7 and the greeting", r)
			}
		})
	}
	t.Run("no token", func(t *testing.T) {
		t.Parallel()
		errorLine(t, envctl(t, nil, nil, "--unix", e.sock, "ps"), exitRefused, "list processes: unauthenticated: this envd requires an access token")
	})
}

// TestEnvctlBadInput: every mistake is one line on stderr, with the exit
// code of its kind (a bad command line 2, a refusal 3, what does not exist
// 4, any other failure 125), and envd is left serving.
func TestEnvctlBadInput(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{args: []string{"-default-user", "root"}})
	addr := "--addr=" + e.url
	unreachable := "http://127.0.0.1:" + strconv.Itoa(freePort(t))
	tests := []struct {
		name string
		env  []string
		args []string
		want string
		code int
	}{
		{"no command", nil, nil, "no command given", exitUsage},
		{"unknown command", nil, []string{"frobnicate"}, `unknown command "frobnicate"`, exitUsage},
		{"unknown global flag", nil, []string{"--frob", "ps"}, "flag provided but not defined: --frob", exitUsage},
		{"unknown command flag", nil, []string{addr, "ps", "--frob"}, "flag provided but not defined: --frob", exitUsage},
		{"run without a command", nil, []string{addr, "run"}, "run: no command given", exitUsage},
		{"run with a bad timeout", nil, []string{addr, "run", "--timeout", "soon", "--", "true"}, `invalid value "soon"`, exitUsage},
		{"run with a bad env", nil, []string{addr, "run", "--env", "=x", "--", "true"}, "want KEY=VALUE, or KEY for its local value", exitUsage},
		{"ps with an argument", nil, []string{addr, "ps", "x"}, `ps: unexpected argument "x"`, exitUsage},
		{"an address of another scheme", nil, []string{"--addr", "ftp://127.0.0.1:1", "ps"}, `unsupported scheme "ftp": use http:// or https://`, exitUsage},
		{"kill without a pid", nil, []string{addr, "kill"}, "kill: give exactly one PID", exitUsage},
		{"kill with a bad pid", nil, []string{addr, "kill", "abc"}, `"abc" is not a process id`, exitUsage},
		{"kill with a bad signal", nil, []string{addr, "kill", "1", "--signal", "BOGUS"}, `unknown signal "BOGUS"`, exitUsage},
		{"kill a missing process", nil, []string{addr, "kill", "999999999"}, "envctl: send SIGTERM to process 999999999: process with pid 999999999 not found\n", exitNotFound},
		{"ls of a missing path", nil, []string{addr, "ls", "/no/such/dir"}, "envctl: stat /no/such/dir: not found: no such file or directory\n", exitNotFound},
		{"ls with a bad depth", nil, []string{addr, "ls", "--depth", "0", "/tmp"}, "--depth 0", exitUsage},
		{"ls with two paths", nil, []string{addr, "ls", "/a", "/b"}, "at most one PATH", exitUsage},
		{"cat without a path", nil, []string{addr, "cat"}, "cat: no PATH given", exitUsage},
		{"cat of a missing file", nil, []string{addr, "cat", "/no/such/file"}, "path '/no/such/file' does not exist", exitNotFound},
		{"cat of a directory", nil, []string{addr, "cat", "/tmp"}, "is a directory", exitFailed},
		{"cp with one argument", nil, []string{addr, "cp", "a"}, "cp: give SRC and DST", exitUsage},
		{"cp local to local", nil, []string{addr, "cp", "a", "b"}, "neither SRC nor DST is in the sandbox", exitUsage},
		{"cp remote to remote", nil, []string{addr, "cp", "envd:/a", "envd:/b"}, "both SRC and DST are in the sandbox", exitUsage},
		{"cp of a missing local file", nil, []string{addr, "cp", "/no/such/local", "envd:/tmp/x"}, "no such file or directory", exitFailed},
		{"cp of a missing remote file", nil, []string{addr, "cp", "envd:/no/such/remote", "/tmp/x"}, "path '/no/such/remote' does not exist", exitNotFound},
		{"cp into a missing local dir", nil, []string{addr, "cp", "envd:/etc/hostname", "/no/such/dir/"}, "does not exist", exitFailed},
		{"cp of a local dir", nil, []string{addr, "cp", "/tmp", "envd:/tmp/x"}, "cp: -r not specified; omitting directory '/tmp'", exitFailed},
		{"cp of a sandbox dir", nil, []string{addr, "cp", "envd:/tmp", "/tmp/x"}, "cp: -r not specified; omitting directory 'envd:/tmp'", exitFailed},
		{"cp -r of a sandbox dir to stdout", nil, []string{addr, "cp", "-r", "envd:/tmp", "-"}, "cp: 'envd:/tmp' is a directory: it cannot go to stdout", exitUsage},
		{"cp -r of a dir onto a file", nil, []string{addr, "cp", "-r", "envd:/tmp", "/etc/hostname"}, "cannot overwrite non-directory '/etc/hostname' with directory 'envd:/tmp'", exitFailed},
		{"stat without a path", nil, []string{addr, "stat"}, "stat: no PATH given", exitUsage},
		{"stat of a missing path", nil, []string{addr, "stat", "/no/such/file"}, "envctl: stat /no/such/file: not found: no such file or directory\n", exitNotFound},
		{"watch without a path", nil, []string{addr, "watch"}, "watch: give one PATH", exitUsage},
		{"watch of a missing dir", nil, []string{addr, "watch", "/no/such/dir"}, "envctl: watch /no/such/dir: not found: no such file or directory\n", exitNotFound},
		{"exec-code with two files", nil, []string{addr, "exec-code", "a", "b"}, "at most one FILE", exitUsage},
		{"exec-code with --lang and --context", nil, []string{addr, "exec-code", "--lang", "python", "--context", "x"}, "not both", exitUsage},
		{"exec-code of a missing file", nil, []string{addr, "exec-code", "/no/such/code.py"}, "no such file or directory", exitFailed},
		{"metrics with an argument", nil, []string{addr, "metrics", "x"}, "unexpected argument", exitUsage},
		{"bad --vsock", nil, []string{"--vsock", "three:49983", "health"}, `--vsock "three:49983": want CID:PORT`, exitUsage},
		{"--vsock without a port", nil, []string{"--vsock", "3", "health"}, "want CID:PORT", exitUsage},
		{"bad --fc-uds", nil, []string{"--fc-uds", "/tmp/v.sock", "health"}, "want PATH:PORT", exitUsage},
		{"two transports", nil, []string{addr, "--unix", e.sock, "health"}, "give one of --addr, --unix", exitUsage},
		{"two transports in the environment", []string{"ENVCTL_ADDR=" + e.url, "ENVCTL_UNIX=" + e.sock}, []string{"health"}, "ENVCTL_ADDR, ENVCTL_UNIX", exitUsage},
		{"unreachable address", nil, []string{"--addr", unreachable, "health"}, "cannot reach envd at tcp 127.0.0.1:", exitFailed},
		{"unreachable address on run", nil, []string{"--addr", unreachable, "run", "--", "true"}, "connection refused", exitFailed},
		{"missing unix socket", nil, []string{"--unix", "/no/such.sock", "ps"}, "cannot reach envd at unix /no/such.sock: no such file or directory", exitFailed},
		{"missing Firecracker socket", nil, []string{"--fc-uds", "/no/such.sock:52", "ps"}, "cannot reach envd at firecracker vsock /no/such.sock port 52", exitFailed},
		{"unknown user", nil, []string{addr, "--user", "nobody-at-all", "run", "--", "true"}, "nobody-at-all", exitRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			errorLine(t, envctl(t, tt.env, nil, tt.args...), tt.code, tt.want)
		})
	}
	if !e.alive() {
		t.Fatalf("envd exited: %v", e.err)
	}
	if r := envctl(t, nil, nil, addr, "help"); r.code != 0 || !strings.Contains(r.stdout, "usage: envctl") {
		t.Errorf("help: %+v", r)
	}
	if r := envctl(t, nil, nil, "help", "cp"); r.code != 0 || !strings.Contains(r.stdout, "usage: envctl cp [-r] [-v] SRC DST") || !strings.Contains(r.stdout, "-r\tcopy directories") {
		t.Errorf("help cp: %+v", r)
	}
	if r := envctl(t, nil, nil, "run", "--help"); r.code != 0 || !strings.Contains(r.stdout, "-pty") {
		t.Errorf("run --help: %+v", r)
	}
}
