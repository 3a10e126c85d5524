// Package testutil holds the helpers that envd's tests share: bounded
// waits, channel assertions, free ports, accounts, directories every user
// can reach, files and their owners, whether a process still runs, clients
// of a unix socket, a clock trap's first call, the envd binary built once
// per test process, and the check that Jupyter is installed. Only tests
// import it.
package testutil

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/procstat"
)

// Bounds of the waits in tests. They are never expected to run out: they
// only turn a hang into a failure that says what was awaited. The machine
// may be loaded, and binaries built with -race, so they are generous.
const (
	// Wait bounds one step a test waits for: a request, an event, an exit.
	Wait = 15 * time.Second
	// Start bounds a daemon's or a server's start.
	Start = 30 * time.Second
	// Program bounds a heavyweight program (pip, R, a JVM) getting to a
	// point the test watches for: tens of seconds on a loaded machine.
	Program = 2 * time.Minute
)

// pollEvery is how often Poll looks again.
const pollEvery = 10 * time.Millisecond

// Context returns a context that ends after d or when the test ends.
func Context(tb testing.TB, d time.Duration) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// Poll waits until cond holds, looking again every few milliseconds, and
// fails the test, naming what, if it does not within Wait. For states no
// one signals (a pid gone, a process listed); never a substitute for a
// channel that says the same.
func Poll(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	if !PollFor(Wait, cond) {
		tb.Fatalf("timed out after %v waiting for %s", Wait, what)
	}
}

// PollFor is Poll without a test: it reports whether cond held within d.
func PollFor(d time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline.C:
			return cond()
		}
	}
	return true
}

// RequireReceive returns the next value from ch, failing the test if none
// comes within Wait or ch is closed.
func RequireReceive[T any](tb testing.TB, ch <-chan T) T {
	tb.Helper()
	return RequireReceiveWithin(tb, ch, Wait)
}

// RequireReceiveWithin is RequireReceive with its own bound.
func RequireReceiveWithin[T any](tb testing.TB, ch <-chan T, d time.Duration) T {
	tb.Helper()
	select {
	case v, ok := <-ch:
		if !ok {
			tb.Fatalf("channel closed; want a value")
		}
		return v
	case <-time.After(d):
		tb.Fatalf("nothing received after %v", d)
	}
	var zero T
	return zero
}

// RequireClosed fails the test if ch is not closed within Wait.
func RequireClosed[T any](tb testing.TB, ch <-chan T, what string) {
	tb.Helper()
	select {
	case <-ch:
	case <-time.After(Wait):
		tb.Fatalf("timed out after %v waiting for %s", Wait, what)
	}
}

// RequireOpen fails the test if ch is ready now: for what must not have
// happened yet at a point the test controls (the clock has not moved).
func RequireOpen[T any](tb testing.TB, ch <-chan T, what string) {
	tb.Helper()
	select {
	case <-ch:
		tb.Fatalf("%s already happened", what)
	default:
	}
}

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func FreePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// ClosedAddr returns a 127.0.0.1 address (host:port) where nothing listened
// a moment ago: a server that refuses connections.
func ClosedAddr(tb testing.TB) string {
	tb.Helper()
	return fmt.Sprintf("127.0.0.1:%d", FreePort(tb))
}

// SharedDir returns a fresh directory that every user may enter and read
// (processes started through envd run as its default user), with a short
// path (fit for a unix socket). It is removed when the test ends.
func SharedDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "envd-test-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// CleanEnv is this process's environment without ENVD_* variables (which
// envd reads as flags), plus ENVD_FORWARD_PORTS=false (an envd a test
// starts must never forward the machine's addresses), ENVD_MMDS_URL=off
// (nor ask the real metadata address, which is not on this machine) and
// ENVD_RUN_DIR= (nor write the machine's /run/e2b), plus extra (KEY=VALUE),
// which may override it.
func CleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ENVD_") {
			env = append(env, kv)
		}
	}
	env = append(env, "ENVD_FORWARD_PORTS=false", "ENVD_MMDS_URL=off", "ENVD_RUN_DIR=")
	return append(env, extra...)
}

// SyncBuffer collects a child's output; safe for concurrent use.
type SyncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// built holds the binaries this test process built, by command and race
// flag.
var built struct {
	mu   sync.Mutex
	dir  string
	bins map[string]string
}

// BuildEnvd builds cmd/envd once per test process, with -race when the
// tests run with it, and returns the binary's path. RemoveBuilt removes it.
func BuildEnvd(tb testing.TB) string {
	tb.Helper()
	bin, err := Build("envd", RaceEnabled)
	if err != nil {
		tb.Fatal(err)
	}
	return bin
}

// Build builds the command cmd/<name>, with -race if race, once per test
// process, name and flag, and returns the binary's path; for TestMain, which
// has no test.
func Build(name string, race bool) (string, error) {
	built.mu.Lock()
	defer built.mu.Unlock()
	key := name
	if race {
		key += "-race"
	}
	if bin, ok := built.bins[key]; ok {
		return bin, nil
	}
	if built.dir == "" {
		dir, err := os.MkdirTemp("", "envd-bin-")
		if err != nil {
			return "", err
		}
		built.dir, built.bins = dir, map[string]string{}
	}
	bin := filepath.Join(built.dir, key)
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, "github.com/envd-dev/envd/cmd/"+name)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build %s: %v\n%s", name, err, out)
	}
	built.bins[key] = bin
	return bin, nil
}

// RemoveBuilt removes the binaries Build made; call it from TestMain once
// the tests ran.
func RemoveBuilt() {
	built.mu.Lock()
	defer built.mu.Unlock()
	if built.dir != "" {
		os.RemoveAll(built.dir)
		built.dir, built.bins = "", nil
	}
}

// Python is the interpreter Jupyter is installed for.
const Python = "/usr/bin/python3"

// InstallHint says how to install what the code-execution tests need.
const InstallHint = `Install Jupyter and the kernels with scripts/install-deps.sh (make deps), or:
  apt-get install -y --no-install-recommends python3-jupyter-server python3-ipykernel python3-jupyter-client \
    python3-pexpect python3-pandas python3-matplotlib python3-pil r-base-core r-cran-irkernel
  and the Deno kernel (npm deno@2.9.6 + /usr/local/share/jupyter/kernels/deno/kernel.json)`

// CheckJupyter reports whether Jupyter, the IPython kernel and the
// packages the tests use are importable by Python; its error says how to
// install them. Python is asked once per test process.
func CheckJupyter() error { return checkJupyter() }

var checkJupyter = sync.OnceValue(func() error {
	out, err := exec.Command(Python, "-c",
		"import jupyter_server, jupyter_client, ipykernel, IPython, pexpect, numpy, pandas, matplotlib").CombinedOutput()
	if err != nil {
		return fmt.Errorf("jupyter is not usable with %s: %v\n%s\n%s", Python, err, out, InstallHint)
	}
	return nil
})

// RequireJupyter fails the test (never skips it) when Jupyter is not
// installed, saying how to install it.
func RequireJupyter(tb testing.TB) {
	tb.Helper()
	if err := CheckJupyter(); err != nil {
		tb.Fatal(err)
	}
}

// User looks up the account name, failing the test when it is missing
// (scripts/install-deps.sh creates the accounts tests act as).
func User(tb testing.TB, name string) *identity.User {
	tb.Helper()
	u, err := identity.Lookup(name)
	if err != nil {
		tb.Fatalf("account %q is missing (scripts/install-deps.sh creates it): %v", name, err)
	}
	return u
}

// WorkDir returns a fresh directory everybody may write (as /tmp), whose
// parent lets everybody through. It is removed when the test ends.
func WorkDir(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// PrivateDir returns a fresh 0700 directory of the test's user inside a
// WorkDir, which other users can reach but not enter.
func PrivateDir(tb testing.TB) string {
	tb.Helper()
	dir := filepath.Join(WorkDir(tb), "private")
	if err := os.Mkdir(dir, 0o700); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// WriteFile writes content to p with mode perm (whatever the umask),
// making p's missing parents 0755.
func WriteFile(tb testing.TB, p, content string, perm os.FileMode) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), perm); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil {
		tb.Fatal(err)
	}
}

// Owner returns the uid owning p itself (a symlink, not its target).
func Owner(tb testing.TB, p string) uint32 {
	tb.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		tb.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Uid
}

// Alive reports whether pid is a process that has not ended: one /proc
// shows that is neither a zombie nor dead.
func Alive(pid int) bool {
	st, err := procstat.Read(pid)
	return err == nil && st.State != 'Z' && st.State != 'X'
}

// UnixClient is an HTTP client whose every connection goes to the unix
// socket at path, whatever the URL's host; timeout bounds each request
// (0: none). Its idle connections are closed when the test ends.
func UnixClient(tb testing.TB, path string, timeout time.Duration) *http.Client {
	tb.Helper()
	c := &http.Client{
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}},
		Timeout: timeout,
	}
	tb.Cleanup(c.CloseIdleConnections)
	return c
}

// FirstWait returns the first call trap catches, or nil if done is closed
// (the code under test finished) before any; it fails the test if ctx ends
// first.
func FirstWait(ctx context.Context, tb testing.TB, trap *quartz.Trap, done <-chan struct{}) *quartz.Call {
	tb.Helper()
	calls := make(chan *quartz.Call, 1)
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		defer close(calls)
		if c, err := trap.Wait(waitCtx); err == nil {
			calls <- c
		}
	}()
	select {
	case c := <-calls:
		if c == nil {
			tb.Fatalf("no trapped call: %v", ctx.Err())
		}
		return c
	case <-done:
		cancel()
		return <-calls
	}
}

// Sleeper starts a process that lives until the test ends (killed and
// reaped at cleanup), as the test's own account when as is nil, else with
// as's uid and gid, and returns its pid.
func Sleeper(t testing.TB, as *identity.User) int {
	t.Helper()
	cmd := exec.Command("sleep", "1000")
	if as != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: as.UID, Gid: as.GID}}
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sleep: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd.Process.Pid
}

// Serve accepts connections on ln until it is closed, each handled by
// handle in a goroutine of its own. At tb's cleanup the listener and every
// connection are closed, and the handlers waited for. It returns ln's
// address.
func Serve(tb testing.TB, ln net.Listener, handle func(net.Conn)) string {
	tb.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	tb.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
	return ln.Addr().String()
}

// Splice copies a and b into each other until either side hangs up, then
// closes both and waits for the other copy: a pipe between two
// connections, as a proxy (Firecracker's vsock device, say) makes one.
func Splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	go func() { io.Copy(a, b); done <- struct{}{} }()
	go func() { io.Copy(b, a); done <- struct{}{} }()
	<-done
	a.Close()
	b.Close()
	<-done
}

// SwapFIFO plays sandbox code racing envd: until the test ends, target is
// in turn a regular file (holding "data") and a FIFO whose write end stays
// open (so a reader of it waits for ever), each renamed into place from a
// directory of its own (on the same filesystem, as tests' are).
func SwapFIFO(tb testing.TB, target string) {
	tb.Helper()
	dir := tb.TempDir()
	reg, fifo := filepath.Join(dir, "reg"), filepath.Join(dir, "fifo")
	WriteFile(tb, reg, "data", 0o644)
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		tb.Fatal(err)
	}
	w, err := os.OpenFile(fifo, os.O_RDWR, 0) // the writer, never closed before the end
	if err != nil {
		tb.Fatal(err)
	}
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		tmp := filepath.Join(dir, "next")
		for !stop.Load() {
			os.Link(reg, tmp)
			os.Rename(tmp, target)
			os.Link(fifo, tmp)
			os.Rename(tmp, target)
		}
	}()
	tb.Cleanup(func() {
		stop.Store(true)
		<-done
		w.Close() // lets a reader still stuck on the FIFO end
	})
}
