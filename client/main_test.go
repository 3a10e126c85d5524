package client_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/envd-dev/envd/internal/testutil"
)

// The tests and the examples of this package run against a real envd, built
// from ../cmd/envd and started by TestMain on a free 127.0.0.1 port and a
// unix socket, with code execution: its Jupyter server starts in the
// background, and only the code examples wait for it. It is built without
// -race even when these tests run with it: the race detector here watches
// the client; test/e2e watches the daemon.
var (
	envdBin  string // the built binary
	envdAddr string // http://127.0.0.1:port of the shared daemon
	envdSock string // its unix socket
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "envd-client-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	defer testutil.RemoveBuilt()
	if envdBin, err = testutil.Build("envd", false); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	envdSock = filepath.Join(dir, "envd.sock")
	d, err := startDaemon(envdSock, true)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	envdAddr = d.addr
	// The examples find envd where a reader's program would: ENVD_ADDR.
	os.Setenv("ENVD_ADDR", envdAddr)
	code := m.Run()
	if err := d.stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

// daemon is one running envd.
type daemon struct {
	cmd    *exec.Cmd
	addr   string
	exited chan struct{}
}

// startDaemon starts envd on a free port (and sock, if not "") with extra
// flags, and with code execution (Jupyter) if asked, and waits until
// /health answers.
func startDaemon(sock string, jupyter bool, extra ...string) (*daemon, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	// Its own cgroup tree: envd's default one ("envd") is shared with every
	// other envd on the machine, and one that stops removes it.
	tree := fmt.Sprintf("envd-client-test-%d-%d", os.Getpid(), port)
	args := []string{"-host", "127.0.0.1", "-port", strconv.Itoa(port), "-code-port", "0", "-log-level", "warn", "-cgroup-tree", tree}
	if !jupyter {
		args = append(args, "-no-jupyter")
	}
	if sock != "" {
		args = append(args, "-unix-socket", sock)
	}
	cmd := exec.Command(envdBin, append(args, extra...)...)
	cmd.Env = testutil.CleanEnv()
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start envd: %w", err)
	}
	d := &daemon{cmd: cmd, addr: "http://127.0.0.1:" + strconv.Itoa(port), exited: make(chan struct{})}
	go func() { cmd.Wait(); close(d.exited) }()
	hc := &http.Client{Timeout: testutil.Start, Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	exited := false
	healthy := testutil.PollFor(testutil.Start, func() bool {
		select {
		case <-d.exited:
			exited = true
			return true
		default:
		}
		resp, err := hc.Get(d.addr + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusNoContent
	})
	switch {
	case exited:
		return nil, fmt.Errorf("envd exited at start: %v", cmd.ProcessState)
	case !healthy:
		d.stop()
		return nil, fmt.Errorf("envd did not answer /health in %v", testutil.Start)
	}
	return d, nil
}

// stop ends the daemon with SIGTERM, and SIGKILL if it lingers.
func (d *daemon) stop() error {
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(testutil.Wait):
		d.cmd.Process.Kill()
		<-d.exited
		return fmt.Errorf("envd (pid %d) ignored SIGTERM for %v", d.cmd.Process.Pid, testutil.Wait)
	}
	if !d.cmd.ProcessState.Success() {
		return fmt.Errorf("envd exited with %v after SIGTERM", d.cmd.ProcessState)
	}
	return nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// testContext is a context bounded by the test's deadline, or d.
func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	return testutil.Context(t, d)
}
