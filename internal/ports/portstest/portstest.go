// Package portstest runs a package's tests in a network namespace of
// their own, with a veth interface that has the test's external addresses,
// and starts loopback servers in processes of their own, and a fake
// Jupyter server with its kernel (jupyter.go). Only tests import it.
package portstest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/envd-dev/envd/internal/testutil"
)

// Main runs the tests in a network namespace of their own: as root, it
// re-executes the test binary under `unshare --net` and, in there, brings
// lo up and adds a veth pair with the test's addresses (extV4, extV6) on
// one end. Nothing is bound or forwarded in the machine's namespace; the
// namespace and its interfaces go when the process does.
const (
	netnsEnv      = "ENVD_PORTS_TEST_NETNS"
	netnsReadyEnv = "ENVD_PORTS_TEST_NETNS_READY" // set up already, by a parent
	serveEnv      = "ENVD_PORTS_TEST_SERVE"       // the helper server's address
)

// The sandbox's external addresses in the test namespace.
const (
	ExtV4 = "10.213.0.2"
	ExtV6 = "fd00:213::2"
)

// Main is a test package's TestMain: in the namespace, or as a helper
// (a server, a fake Jupyter server or kernel), it runs that and never
// returns.
func Main(m *testing.M) {
	if addr := os.Getenv(serveEnv); addr != "" {
		serve(addr)
		return
	}
	switch { // the kernel inherits the server's environment
	case os.Getenv(kernelEnv) != "":
		fakeKernel()
	case os.Getenv(jupyterEnv) != "":
		fakeJupyter()
	}
	if os.Geteuid() == 0 && os.Getenv(netnsEnv) == "" {
		os.Exit(inNetns())
	}
	if os.Getenv(netnsEnv) != "" && os.Getenv(netnsReadyEnv) == "" {
		if err := setupNetns(); err != nil {
			fmt.Fprintln(os.Stderr, "set up the test network namespace:", err)
			os.Exit(1)
		}
		// Test binaries this one starts in it (go test -fuzz's workers)
		// find it set up.
		os.Setenv(netnsReadyEnv, "1")
	}
	goleak.VerifyTestMain(m)
}

// inNetns runs this test binary again in a new network namespace and
// returns its exit code.
func inNetns() int {
	cmd := exec.Command("unshare", append([]string{"--net", "--", os.Args[0]}, os.Args[1:]...)...)
	cmd.Env = append(os.Environ(), netnsEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// unshare execs the binary in its own pid: it dies with us.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			return ee.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "run the tests in a network namespace:", err)
		return 1
	}
	return 0
}

func setupNetns() error {
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "ev0", "type", "veth", "peer", "name", "ev1"},
		// No link-local addresses (their duplicate detection would make
		// binding them fail for a while): only the test's own.
		{"link", "set", "ev0", "addrgenmode", "none"},
		{"link", "set", "ev1", "addrgenmode", "none"},
		{"addr", "add", ExtV4 + "/24", "dev", "ev0"},
		{"-6", "addr", "add", ExtV6 + "/64", "dev", "ev0", "nodad"},
		{"link", "set", "ev0", "up"},
		{"link", "set", "ev1", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// InNetns reports whether the tests run in their own network namespace:
// only there may they forward.
func InNetns() bool { return os.Getenv(netnsEnv) != "" }

// RequireNetns skips a test that needs the test namespace (not root).
func RequireNetns(t *testing.T) {
	t.Helper()
	if os.Getenv(netnsEnv) == "" {
		t.Skip("needs root: the test makes its own network namespace")
	}
}

// serve is the helper server: it listens on addr, prints its port, and
// answers each connection, once the peer has closed its writing side,
// with "echo:" and what it read. It runs until killed.
func serve(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	for {
		c, err := ln.Accept()
		if err != nil {
			os.Exit(1)
		}
		go func() {
			defer c.Close()
			b, _ := io.ReadAll(c)
			c.Write(append([]byte("echo:"), b...))
		}()
	}
}

// Server is a helper server process.
type Server struct {
	PID  int
	Port uint16
	cmd  *exec.Cmd
}

// StartServer starts a helper server listening on addr ("127.0.0.1:0").
// It is killed when the test ends.
func StartServer(t *testing.T, addr string) *Server {
	t.Helper()
	cmd, line := StartHelper(t, serveEnv+"="+addr)
	s := &Server{PID: cmd.Process.Pid, cmd: cmd}
	t.Cleanup(s.Kill)
	l := testutil.RequireReceive(t, line)
	p, err := strconv.ParseUint(l, 10, 16)
	if err != nil {
		t.Fatalf("helper server on %s: %q", addr, l)
	}
	s.Port = uint16(p)
	return s
}

// Kill ends the server and waits for it: its listener is gone after.
func (s *Server) Kill() {
	if s.cmd.ProcessState != nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

// ServerName is the helper's process name: the test binary's, as comm
// holds it (15 bytes at most).
func ServerName() string {
	n := filepath.Base(os.Args[0])
	return n[:min(len(n), 15)]
}

// RoundTrip connects to addr, sends msg, closes its writing side, and
// returns the answer (the helper answers after the half-close).
func RoundTrip(addr, msg string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, testutil.Wait)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(testutil.Wait))
	if _, err := io.WriteString(c, msg); err != nil {
		return "", err
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}
