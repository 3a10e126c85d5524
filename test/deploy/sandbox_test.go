package deploy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/internal/mountinfo"
	"github.com/envd-dev/envd/internal/testutil"
)

// envd's ports, as every deployment here has them.
const (
	envdPort = 49983
	codePort = 49999
)

// entrypoint is one way a deployment starts envd, as its file says.
type entrypoint struct {
	file string   // the file it comes from, for messages
	argv []string // the command line, exactly as the file has it
	env  []string // KEY=VALUE the file sets for it
}

// runOptions say how the test runs an entrypoint beyond what its file says.
type runOptions struct {
	// jupyter runs envd with code execution. Without it the test adds
	// ENVD_NO_JUPYTER=true to the environment (never to the command line):
	// a Jupyter server takes seconds to start and the checks need none.
	jupyter bool
}

// sandbox is an entrypoint running in namespaces of its own:
//
//   - a network namespace with only loopback, up: envd's ports are its own,
//     and nothing outside answers (not Firecracker's MMDS at
//     169.254.169.254, which an envd without -isnotfc polls);
//   - a pid namespace whose PID 1 is envd (the wrapper execs the command
//     line): when envd dies the kernel kills everything left in it;
//   - a mount namespace with its own /proc and an empty /run (envd writes
//     /run/e2b), and the sandbox image's layout over the machine's: the
//     built envd at /usr/bin/envd and /usr/local/bin/envd, and the
//     repository's start-up.sh at /usr/local/bin/start-up.sh (read-only
//     overlays of /usr/bin and /usr/local/bin), so that the command line
//     runs as it is written;
//   - cgroups of its own (freezer and memory on v1, the v2 hierarchy),
//     which envd makes its tree under, as under systemd's envd.service.
//
// The test reaches envd by dialing 127.0.0.1 from inside the network
// namespace (netnsDialer).
type sandbox struct {
	ep     entrypoint
	cmd    *exec.Cmd // unshare(1)
	pid    int       // the namespace's PID 1 (envd), as the test sees it
	netns  *os.File  // the sandbox's network namespace
	out    *testutil.SyncBuffer
	exited chan struct{} // closed once unshare has been waited for
	err    error         // unshare's Wait result (envd's exit), valid once exited
	client *client.Client
}

// wrapper is what runs in the namespaces, as sh -c: $1 is the image's
// layout to lay over the machine's, $2 the cgroup.procs files to join, the
// rest the command line it execs.
const wrapper = `set -e
ip link set lo up
mount -t tmpfs -o mode=0755 envd-deploy-run /run
mount -t overlay envd-deploy-usr-bin -o "lowerdir=$1/usr/bin:/usr/bin" /usr/bin
mount -t overlay envd-deploy-usr-local-bin -o "lowerdir=$1/usr/local/bin:/usr/local/bin" /usr/local/bin
for f in $2; do echo $$ >"$f"; done
shift 2
exec "$@"`

// startSandbox runs ep and returns once envd answers /health. Everything
// it started is gone when the test ends.
func startSandbox(t *testing.T, ep entrypoint, o runOptions) *sandbox {
	t.Helper()
	requireRoot(t)
	unshare := requireTool(t, "unshare", "util-linux")
	requireTool(t, "ip", "iproute2")
	requireTool(t, "mount", "mount")

	img := imageLayout(t)
	procs := freshCgroups(t)
	// The test's environment, less envd's variables (only the file's reach
	// it) and XDG_RUNTIME_DIR (a login session's, under the /run the
	// sandbox does not share).
	var env []string
	for _, kv := range envWithout("ENVD_") {
		if !strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") {
			env = append(env, kv)
		}
	}
	env = append(env, ep.env...)
	if !o.jupyter {
		env = append(env, "ENVD_NO_JUPYTER=true")
	}
	args := []string{"--mount", "--net", "--pid", "--fork", "--mount-proc", "--kill-child",
		"sh", "-c", wrapper, "sh", img, strings.Join(procs, " ")}
	s := &sandbox{
		ep:     ep,
		cmd:    exec.Command(unshare, append(args, ep.argv...)...),
		out:    &testutil.SyncBuffer{},
		exited: make(chan struct{}),
	}
	s.cmd.Env = env
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	// unshare dies with the test process, and takes the namespace's PID 1
	// with it (--kill-child), and so everything in the namespace. The
	// signal comes when the thread that started unshare ends, not the
	// process: a goroutine locked to its thread starts unshare and waits
	// for it, so that thread lives as long as unshare (Go ends the threads
	// of the netnsDialer's goroutines, and any thread may run those).
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	t.Logf("%s: %s", ep.file, strings.Join(ep.argv, " "))
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := s.cmd.Start()
		started <- err
		if err == nil {
			s.err = s.cmd.Wait()
		}
		close(s.exited)
	}()
	if err := <-started; err != nil {
		t.Fatalf("start %s: %v", unshare, err)
	}
	t.Cleanup(func() { s.kill(t) })

	// unshare forks the namespace's PID 1 (the wrapper, then envd).
	if !testutil.PollFor(testutil.Wait, func() bool {
		s.pid = firstChild(s.cmd.Process.Pid)
		return s.pid != 0 || s.done()
	}) || s.pid == 0 {
		t.Fatalf("%s: no process in the namespaces:\n%s", ep.file, s.out)
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", s.pid))
	if err != nil {
		t.Fatalf("%s: the sandbox's network namespace: %v\n%s", ep.file, err, s.out)
	}
	s.netns = ns
	s.client = client.New(client.Options{Dialer: s.dialer(envdPort)})
	t.Cleanup(func() { s.client.Close() })

	var last error
	healthy := testutil.PollFor(testutil.Start, func() bool {
		if s.done() {
			return true
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		last = s.client.Health(ctx)
		return last == nil
	})
	if s.done() {
		t.Fatalf("%s: envd exited (%v) before answering /health:\n%s", ep.file, s.err, s.out)
	}
	if !healthy {
		t.Fatalf("%s: GET /health on port %d did not answer 2xx within %v: %v\n%s", ep.file, envdPort, testutil.Start, last, s.out)
	}
	return s
}

func (s *sandbox) done() bool {
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// stop sends envd SIGTERM, as systemd, the kubelet or docker stop do, and
// checks that it exits 0 (unshare exits as its child did).
func (s *sandbox) stop(t *testing.T) {
	t.Helper()
	s.client.Close()
	if err := syscall.Kill(s.pid, syscall.SIGTERM); err != nil {
		t.Fatalf("%s: SIGTERM to envd (pid %d): %v", s.ep.file, s.pid, err)
	}
	select {
	case <-s.exited:
	case <-time.After(2 * testutil.Wait):
		t.Fatalf("%s: envd still runs %v after SIGTERM:\n%s", s.ep.file, 2*testutil.Wait, s.out)
	}
	if s.err != nil {
		t.Errorf("%s: envd ended with %v after SIGTERM, want exit 0:\n%s", s.ep.file, s.err, s.out)
	}
}

// kill ends whatever still runs: SIGKILL to the namespace's PID 1 makes
// the kernel kill every process in the namespace; unshare then exits.
func (s *sandbox) kill(t *testing.T) {
	if !s.done() && s.pid != 0 {
		syscall.Kill(s.pid, syscall.SIGKILL)
		testutil.PollFor(testutil.Wait, s.done)
	}
	if !s.done() {
		// --kill-child: the namespace's PID 1 dies with unshare.
		s.cmd.Process.Kill()
		select {
		case <-s.exited:
		case <-time.After(testutil.Wait):
			t.Errorf("%s: unshare (pid %d) did not exit after SIGKILL", s.ep.file, s.cmd.Process.Pid)
		}
	}
	if s.netns != nil {
		s.netns.Close()
	}
	if strings.Contains(s.out.String(), "WARNING: DATA RACE") {
		t.Errorf("%s: envd reported a data race:\n%s", s.ep.file, s.out)
	}
}

// firstChild is the first child of pid, 0 while it has none.
func firstChild(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	child, _ := strconv.Atoi(f[0])
	return child
}

// envWithout is this process's environment without the variables whose
// names start with prefix.
func envWithout(prefix string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, prefix) {
			env = append(env, kv)
		}
	}
	return env
}

// imageLayout is a directory with what the sandbox image adds to
// /usr/bin and /usr/local/bin: envd (the built one) and start-up.sh (the
// repository's). start-up.sh finds envd beside itself.
func imageLayout(t *testing.T) string {
	t.Helper()
	img := t.TempDir()
	links := map[string]string{
		"usr/bin/envd":              envdBin,
		"usr/local/bin/envd":        envdBin,
		"usr/local/bin/start-up.sh": repoPath(t, "start-up.sh"),
	}
	for name, target := range links {
		p := filepath.Join(img, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	return img
}

// freshCgroups makes a cgroup of the test's own under its current one in
// each hierarchy envd may use (cgroup v2, v1's freezer and memory), and
// returns their cgroup.procs files for the wrapper to join: envd then makes
// its tree under them, apart from any other envd's on the machine (envds
// sharing a tree remove each other's empty cgroups). They are removed,
// with what envd left in them, when the test ends.
func freshCgroups(t *testing.T) []string {
	t.Helper()
	mounts, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	// controller ("" for v2) -> the test's cgroup in that hierarchy
	paths := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(own)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			paths[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			paths[c] = parts[2]
		}
	}
	name := "envd-deploy-test-" + randomHex(t)
	var dirs, procs []string
	for _, m := range mounts {
		if !strings.HasPrefix(m.Point+"/", "/sys/fs/cgroup/") {
			continue
		}
		var path string
		switch {
		case m.FSType == "cgroup2":
			path = paths[""]
		case m.FSType == "cgroup" && slices.Contains(m.Super, "freezer"):
			path = paths["freezer"]
		case m.FSType == "cgroup" && slices.Contains(m.Super, "memory"):
			path = paths["memory"]
		default:
			continue
		}
		rel, err := filepath.Rel(m.Root, path)
		if path == "" || err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			continue // this mount does not show the test's cgroup
		}
		dir := filepath.Join(m.Point, rel, name)
		if slices.Contains(dirs, dir) {
			continue
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			// A read-only cgroup filesystem (a container's): envd cannot
			// make cgroups there either, and runs without them.
			t.Logf("no cgroup of its own for the sandbox in %s: %v", m.Point, err)
			continue
		}
		dirs = append(dirs, dir)
		procs = append(procs, filepath.Join(dir, "cgroup.procs"))
	}
	t.Cleanup(func() {
		// Registered before the sandbox's own cleanup, so run after it:
		// its processes were killed and leave their cgroups as they exit.
		for _, dir := range dirs {
			var err error
			if !testutil.PollFor(testutil.Wait, func() bool { err = removeCgroup(dir); return err == nil }) {
				t.Errorf("remove the sandbox's cgroup: %v", err)
			}
		}
	})
	return procs
}

// removeCgroup removes a cgroup and every cgroup under it, deepest first.
func removeCgroup(dir string) error {
	var sub []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			sub = append(sub, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := len(sub) - 1; i >= 0; i-- {
		if err := unix.Rmdir(sub[i]); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("rmdir %s: %w", sub[i], err)
		}
	}
	return nil
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// dialer reaches a port of 127.0.0.1 inside the sandbox.
func (s *sandbox) dialer(port int) netnsDialer { return netnsDialer{ns: s.netns, port: port} }

// netnsDialer is a client.Dialer to 127.0.0.1:port in a network namespace:
// the socket is made by a thread that entered the namespace (setns), and a
// socket stays in the namespace it was made in.
type netnsDialer struct {
	ns   *os.File
	port int
}

func (d netnsDialer) String() string {
	return fmt.Sprintf("tcp 127.0.0.1:%d in the sandbox's network namespace", d.port)
}

func (d netnsDialer) Dial(ctx context.Context) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	type made struct {
		fd  int
		err error
	}
	ch := make(chan made, 1)
	go func() {
		// The thread never leaves the namespace: the goroutine ends
		// locked, and Go ends its thread with it.
		runtime.LockOSThread()
		if err := unix.Setns(int(d.ns.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- made{-1, fmt.Errorf("enter the sandbox's network namespace: %w", err)}
			return
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		ch <- made{fd, err}
	}()
	m := <-ch
	if m.err != nil {
		return nil, m.err
	}
	// Loopback answers a connect at once: accepted or refused.
	if err := unix.Connect(m.fd, &unix.SockaddrInet4{Port: d.port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(m.fd)
		return nil, &client.DialError{Target: d.String(), Err: err}
	}
	f := os.NewFile(uintptr(m.fd), d.String())
	defer f.Close()
	return net.FileConn(f)
}

// httpClient is a plain HTTP client of a port in the sandbox.
func (s *sandbox) httpClient(port int) *http.Client {
	d := s.dialer(port)
	return &http.Client{
		Timeout: testutil.Program,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.Dial(ctx)
		}},
	}
}

// checkServes is what every deployment must give a client: a command runs
// (in the sandbox's namespaces, where envd is PID 1 with the entrypoint's
// command line) and its output comes back; a file goes in and comes back
// out unchanged; the code-interpreter port answers.
func (s *sandbox) checkServes(t *testing.T) {
	t.Helper()
	ctx := testutil.Context(t, testutil.Program)

	res, err := s.client.Run(ctx, client.Command{
		Name: "/bin/sh",
		Args: []string{"-c", `echo "ran as $(id -un): $((6 * 7))"; tr '\0' '\n' </proc/1/cmdline`},
	})
	if err != nil {
		t.Fatalf("%s: run a command: %v\n%s", s.ep.file, err, s.out)
	}
	lines := strings.Split(strings.TrimSuffix(string(res.Stdout), "\n"), "\n")
	if !res.Exit.Success() || len(lines) < 2 || !strings.HasSuffix(lines[0], ": 42") {
		t.Fatalf("%s: command: %v, stdout %q, stderr %q", s.ep.file, res.Exit, res.Stdout, res.Stderr)
	}
	t.Logf("%s: %s", s.ep.file, lines[0])
	// PID 1 of the sandbox is envd, started as the file says: start-up.sh
	// execs the envd beside it with -host 0.0.0.0 and the arguments it got.
	want := s.ep.argv
	if filepath.Base(want[0]) == "start-up.sh" {
		want = append([]string{filepath.Join(filepath.Dir(want[0]), "envd"), "-host", "0.0.0.0"}, want[1:]...)
	}
	if got := lines[1:]; !slices.Equal(got, want) {
		t.Errorf("%s: envd's command line in the sandbox is %q, want %q", s.ep.file, got, want)
	}

	// A file round trip: POST /files, then GET /files.
	data := make([]byte, 1<<20)
	rand.Read(data)
	data = append(data, "\nlast line\n"...)
	path := filepath.Join(testutil.WorkDir(t), "round-trip.bin")
	if _, err := s.client.Upload(ctx, path, bytes.NewReader(data)); err != nil {
		t.Fatalf("%s: upload %s: %v", s.ep.file, path, err)
	}
	fr, err := s.client.Download(ctx, path)
	if err != nil {
		t.Fatalf("%s: download %s: %v", s.ep.file, path, err)
	}
	back, err := io.ReadAll(fr)
	fr.Close()
	if err != nil {
		t.Fatalf("%s: download %s: %v", s.ep.file, path, err)
	}
	if !bytes.Equal(back, data) {
		t.Errorf("%s: downloaded %d bytes, not the %d uploaded", s.ep.file, len(back), len(data))
	}
	if onDisk, err := os.ReadFile(path); err != nil || !bytes.Equal(onDisk, data) {
		t.Errorf("%s: the uploaded file on disk: %d bytes, %v", s.ep.file, len(onDisk), err)
	}

	// The code-interpreter API listens on its port: 200 once code can
	// run, 503 saying why while it cannot (always so without Jupyter).
	hc := s.httpClient(codePort)
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://envd/health", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s: GET /health on the code port %d: %v", s.ep.file, codePort, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("%s: GET /health on the code port: %s %s", s.ep.file, resp.Status, body)
	}
}
