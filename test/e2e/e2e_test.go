// Package e2e_test runs the real envd binary: it builds cmd/envd once (with
// -race when these tests run with it), starts it on a free 127.0.0.1 port and
// a unix socket, and drives it over the wire.
//
// Every process these tests start, directly or through envd, is ended by its
// pid only.
package e2e_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/gen/process/processconnect"
	"github.com/envd-dev/envd/internal/cgroup"
	"github.com/envd-dev/envd/internal/procstat"
	"github.com/envd-dev/envd/internal/testutil"
)

// envdBin is the binary under test, built by TestMain.
var envdBin string

// Timeouts shared by the tests.
const (
	startTimeout   = testutil.Start
	requestTimeout = testutil.Wait
	// shutdownGrace is daemon.Config.ShutdownGrace's default, which the
	// binary uses (there is no flag for it).
	shutdownGrace = 5 * time.Second
)

func TestMain(m *testing.M) {
	bin, err := testutil.Build("envd", testutil.RaceEnabled)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	envdBin = bin
	goleak.VerifyTestMain(&cleanupM{m: m})
}

// cleanupM removes the built binaries once the tests ran, before goleak
// checks for leaks and exits.
type cleanupM struct{ m *testing.M }

func (c *cleanupM) Run() int {
	code := c.m.Run()
	testutil.RemoveBuilt()
	removeUpgradeBinaries()
	return code
}

// syncBuffer collects a child's output.
type syncBuffer = testutil.SyncBuffer

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int { return testutil.FreePort(t) }

// socketPath returns a unix socket path in a fresh temporary directory,
// short enough for sun_path.
func socketPath(t *testing.T) string {
	return filepath.Join(testutil.SharedDir(t), "envd.sock")
}

// cleanEnv is the test's environment without ENVD_* variables, so that only
// what a test sets reaches the daemon.
func cleanEnv(extra ...string) []string { return testutil.CleanEnv(extra...) }

// envd is one running daemon.
type envd struct {
	cmd  *exec.Cmd
	url  string // http://127.0.0.1:port
	sock string // unix socket path, "" when none
	// guestHome is guest's home (0700, guest's own) with startOptions.guest.
	guestHome string
	stderr    *syncBuffer
	exited    chan struct{} // closed when the process has exited
	netns     bool          // in a network namespace of its own: reached by sock only
	err       error         // Wait's result, valid once exited is closed
}

type startOptions struct {
	bin  string   // the binary to run; "": envdBin
	args []string // beyond the ones startEnvd adds
	env  []string // extra environment, KEY=VALUE
	// raw: use args and env as they are, without the host, port, socket and
	// code-execution flags startEnvd adds; port is then the one to probe.
	raw  bool
	port int
	sock string
	// jupyter starts envd with code execution (a Jupyter server), which
	// it otherwise runs without (-no-jupyter).
	jupyter bool
	// ignore starts envd with these signals ignored (sh's trap names:
	// "HUP PIPE"), as nohup or a careless init would.
	ignore string
	// guest runs envd where a second unprivileged account exists, without
	// changing the machine: in a private mount namespace whose /etc/passwd
	// and /etc/group are copies with guest (guestUID, no sudo, home
	// envd.guestHome) added. Needs root.
	guest bool
	// stdout, when set, gets envd's standard output apart from its
	// standard error (envd.stderr): otherwise both go to envd.stderr.
	stdout *syncBuffer
	// netns runs envd in a network namespace of its own (unshare -n): lo,
	// and the address netnsAddr, the sandbox's external address, on one
	// end of a veth pair. Only the unix socket reaches envd from the
	// test. Needs root.
	netns bool
}

// netnsAddr is the external address of an envd started with netns.
const netnsAddr = "10.214.0.2"

// The account that startOptions.guest adds.
const (
	guestName = "guest"
	guestUID  = 54321 // also its gid
)

// startEnvd runs the binary and returns once /health answers 204. The
// daemon, and any process it left, is killed by pid when the test ends.
func startEnvd(t *testing.T, o startOptions) *envd {
	t.Helper()
	e := launch(t, o)
	if err := e.waitHealthy(startTimeout); err != nil {
		t.Fatalf("envd not healthy: %v\nstderr:\n%s", err, e.stderr)
	}
	return e
}

// launch starts the binary without waiting for it to serve.
func launch(t *testing.T, o startOptions) *envd {
	t.Helper()
	args := o.args
	if !o.raw {
		if o.port == 0 {
			o.port = freePort(t)
		}
		if o.sock == "" {
			o.sock = socketPath(t)
		}
		base := []string{
			"-host", "127.0.0.1",
			"-port", strconv.Itoa(o.port),
			"-unix-socket", o.sock,
			"-code-port", "0",
		}
		if !o.jupyter {
			base = append(base, "-no-jupyter")
		}
		if !slices.Contains(args, "-cgroup-tree") {
			// A cgroup tree of its own: envds sharing one remove each
			// other's empty cgroups as they shut down.
			base = append(base, "-cgroup-tree", "envd-e2e-"+randomName())
		}
		args = append(base, args...)
	}
	cgroupRoot := ""
	if i := slices.Index(args, "-cgroup-tree"); i >= 0 && i+1 < len(args) {
		cgroupRoot = args[i+1]
	}
	e := &envd{
		url:    "http://127.0.0.1:" + strconv.Itoa(o.port),
		sock:   o.sock,
		stderr: &syncBuffer{},
		exited: make(chan struct{}),
	}
	bin := envdBin
	if o.bin != "" {
		bin = o.bin
	}
	e.cmd = exec.Command(bin, args...)
	if o.ignore != "" {
		// An ignored disposition survives exec: sh sets it, then becomes
		// envd (same pid).
		e.cmd = exec.Command("/bin/sh", append([]string{"-c", "trap '' " + o.ignore + `; exec "$0" "$@"`, bin}, args...)...)
	}
	if o.guest {
		e.guestHome, e.cmd = withGuest(t, e.cmd)
	}
	if o.netns {
		e.cmd = inNetns(t, e.cmd)
		e.netns = true
	}
	e.cmd.Env = cleanEnv(o.env...)
	e.cmd.Stdout = e.stderr
	if o.stdout != nil {
		e.cmd.Stdout = o.stdout
	}
	e.cmd.Stderr = e.stderr
	if err := e.cmd.Start(); err != nil {
		t.Fatalf("start envd: %v", err)
	}
	go func() {
		e.err = e.cmd.Wait()
		close(e.exited)
	}()
	t.Cleanup(func() {
		e.kill(t)
		if cgroupRoot != "" {
			// A killed envd leaves its (empty) tree: remove it.
			// Its processes were sent SIGKILL; they leave their cgroups
			// as they exit, soon after.
			if m, err := cgroup.New(cgroup.Options{Root: cgroupRoot, Logger: slog.New(slog.DiscardHandler)}); err == nil {
				if !testutil.PollFor(requestTimeout, func() bool { return m.Close() == nil }) {
					t.Errorf("remove envd's cgroups: %v", m.Close())
				}
			}
		}
		if strings.Contains(e.stderr.String(), "WARNING: DATA RACE") {
			t.Errorf("envd reported a data race:\n%s", e.stderr)
		}
	})
	return e
}

// withGuest returns cmd run so that it sees an account guest that the
// machine lacks, and guest's home: unshare(1) gives it a private mount
// namespace (mounts in it never propagate out) in which copies of
// /etc/passwd and /etc/group with guest added are bind-mounted over the
// originals, then execs cmd (same pid: unshare and sh exec, neither forks).
// What envd starts inherits the namespace, and sees guest too.
func withGuest(t *testing.T, cmd *exec.Cmd) (home string, _ *exec.Cmd) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a guest account needs root (mount namespaces)")
	}
	// Not t.TempDir: guest must be able to reach its home.
	dir, err := os.MkdirTemp("", "envd-guest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	home = filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, guestUID, guestUID); err != nil {
		t.Fatal(err)
	}
	id := strconv.Itoa(guestUID)
	withLine := func(orig, line string) string {
		b, err := os.ReadFile(orig)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			b = append(b, '\n')
		}
		p := filepath.Join(dir, filepath.Base(orig))
		if err := os.WriteFile(p, append(b, line+"\n"...), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	passwd := withLine("/etc/passwd", guestName+":x:"+id+":"+id+"::"+home+":/bin/sh")
	group := withLine("/etc/group", guestName+":x:"+id+":")
	const script = `mount --bind "$1" /etc/passwd && mount --bind "$2" /etc/group && shift 2 && exec "$@"`
	args := append([]string{"-m", "--propagation", "private", "sh", "-c", script, "sh", passwd, group, cmd.Path}, cmd.Args[1:]...)
	return home, exec.Command("unshare", args...)
}

// inNetns returns cmd run in a network namespace of its own (see
// startOptions.netns): unshare(1) makes it, sh brings lo up, adds a veth
// pair with netnsAddr on one end and execs cmd (same pid). The namespace
// goes when its last process does.
func inNetns(t *testing.T, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a network namespace needs root")
	}
	const script = `ip link set lo up && ip link add ext0 type veth peer name ext1 && ip addr add "$1/24" dev ext0 && ip link set ext1 up && ip link set ext0 up && shift && exec "$@"`
	args := append([]string{"-n", "sh", "-c", script, "sh", netnsAddr, cmd.Path}, cmd.Args[1:]...)
	return exec.Command("unshare", args...)
}

// kill ends the daemon and whatever it started, by pid, if still running.
func (e *envd) kill(t *testing.T) {
	select {
	case <-e.exited:
		return
	default:
	}
	tree := descendants(e.cmd.Process.Pid)
	e.cmd.Process.Signal(syscall.SIGKILL)
	for _, p := range tree {
		p.killIfSame()
	}
	select {
	case <-e.exited:
	case <-time.After(requestTimeout):
		t.Errorf("envd (pid %d) did not die after SIGKILL", e.cmd.Process.Pid)
	}
}

func (e *envd) waitHealthy(timeout time.Duration) error {
	c := &http.Client{Timeout: timeout}
	url := e.url
	if e.netns {
		c.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", e.sock)
		}}
		url = "http://envd"
	}
	defer c.CloseIdleConnections()
	var last error
	exited := false
	healthy := testutil.PollFor(timeout, func() bool {
		select {
		case <-e.exited:
			exited = true
			return true
		default:
		}
		resp, err := c.Get(url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return true
			}
			err = fmt.Errorf("GET /health: %s", resp.Status)
		}
		last = err
		return false
	})
	switch {
	case exited:
		return fmt.Errorf("envd exited: %v", e.err)
	case !healthy:
		return fmt.Errorf("no 204 from /health after %v: %v", timeout, last)
	}
	return nil
}

// wait waits for the daemon to exit and returns its exit code.
func (e *envd) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-e.exited:
	case <-time.After(timeout):
		t.Fatalf("envd still running after %v\nstderr:\n%s", timeout, e.stderr)
	}
	return e.cmd.ProcessState.ExitCode()
}

func (e *envd) alive() bool {
	select {
	case <-e.exited:
		return false
	default:
		return true
	}
}

func httpClient(t *testing.T) *http.Client {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{}, Timeout: requestTimeout}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// streamClient has no overall timeout, for streams that outlive it; each
// call bounds itself with its context.
func streamClient(t *testing.T) *http.Client {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// processClient speaks Connect JSON, as the JS SDK does.
func processClient(c *http.Client, url string) processconnect.ProcessClient {
	return processconnect.NewProcessClient(c, url, connect.WithProtoJSON())
}

// proc is one process as /proc shows it. Its Start (clock ticks since
// boot) tells a pid apart from a later process that reuses it.
type proc struct{ procstat.Stat }

func readProc(pid int) (proc, bool) {
	st, err := procstat.Read(pid)
	return proc{st}, err == nil
}

func allProcs() map[int]proc {
	out := map[int]proc{}
	for _, st := range procstat.All() {
		out[st.Pid] = proc{st}
	}
	return out
}

// descendants lists every process below root, following ppid chains.
func descendants(root int) []proc {
	ps := allProcs()
	children := map[int][]int{}
	for _, p := range ps {
		children[p.PPid] = append(children[p.PPid], p.Pid)
	}
	var out []proc
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			out = append(out, ps[c])
			queue = append(queue, c)
		}
	}
	return out
}

// running tells whether the very same process still runs (not a zombie, and
// not a new process that reused the pid).
func (p proc) running() bool {
	now, ok := readProc(p.Pid)
	return ok && now.Start == p.Start && now.State != 'Z'
}

// killIfSame SIGKILLs p if it is still the same process.
func (p proc) killIfSame() {
	if p.running() {
		syscall.Kill(p.Pid, syscall.SIGKILL)
	}
}

// startProcess starts a process through envd and returns its pid once the
// start event came; the stream is drained until it ends or the test does.
func startProcess(t *testing.T, pc processconnect.ProcessClient, req *pb.StartRequest) uint32 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := pc.Start(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatalf("Start %s: %v", req.GetProcess().GetCmd(), err)
	}
	if !stream.Receive() {
		t.Fatalf("Start %s: %v", req.GetProcess().GetCmd(), stream.Err())
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	if pid == 0 {
		t.Fatalf("Start %s: first event %v, want start", req.GetProcess().GetCmd(), stream.Msg())
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for stream.Receive() {
		}
		stream.Close()
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return pid
}

// run starts a process through envd and collects its output and end.
func run(ctx context.Context, pc processconnect.ProcessClient, req *pb.StartRequest) (stdout string, end *pb.ProcessEvent_EndEvent, err error) {
	stream, err := pc.Start(ctx, connect.NewRequest(req))
	if err != nil {
		return "", nil, err
	}
	defer stream.Close()
	var out strings.Builder
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		out.Write(ev.GetData().GetStdout())
		out.Write(ev.GetData().GetPty())
		if e := ev.GetEnd(); e != nil {
			end = e
		}
	}
	return out.String(), end, stream.Err()
}

// randomName is 12 random hex digits.
func randomName() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}
