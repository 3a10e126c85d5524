package jupyter_test

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/testutil"
)

// TestKernelChannels: a kernel of the server is known by its ZeroMQ
// channels (the five ports its connection file names, each one it listens
// on); the kernel's own other listeners, and processes that are not its
// kernels, are not.
func TestKernelChannels(t *testing.T) {
	t.Parallel()
	k, _ := startKernel(t, shared.client, "python3", jupyter.KernelOptions{})
	pid := pidOf(t, k)
	ports := shared.sup.KernelChannels(pid)
	if len(ports) != 5 {
		t.Fatalf("KernelChannels(kernel %d) = %v, want the 5 channel ports", pid, ports)
	}
	for _, p := range ports {
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(p))))
		if err != nil {
			t.Errorf("channel port %d: %v", p, err)
			continue
		}
		c.Close()
	}
	// A server the user runs inside the kernel is the workload's.
	r := mustOK(t, execute(t, k, "import socket\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\ns.listen()\nprint(s.getsockname()[1])"))
	user, err := strconv.Atoi(r.stdout[:len(r.stdout)-1])
	if err != nil {
		t.Fatalf("port: %q", r.stdout)
	}
	if slices.Contains(ports, uint16(user)) {
		t.Errorf("the user's listener %d counted among the kernel's channels %v", user, ports)
	}
	outsideEphemeral(t, ports)
	for _, p := range ports {
		if !reserved(t, p) {
			t.Errorf("kernel port %d is not reserved while its kernel runs", p)
		}
	}
	if got := shared.sup.KernelChannels(os.Getpid()); got != nil {
		t.Errorf("KernelChannels(the test) = %v", got)
	}
	if got := shared.sup.KernelChannels(1 << 30); got != nil {
		t.Errorf("KernelChannels(no such pid) = %v", got)
	}
	// A connection file named on a command line but outside the runtime
	// directory is not the server's.
	fake := fmt.Sprintf("%s/kernel-x.json", t.TempDir())
	if err := os.WriteFile(fake, []byte(`{"shell_port": 1, "iopub_port": 2}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r = mustOK(t, execute(t, k, fmt.Sprintf("import subprocess, sys\np = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', '-f', %q])\nprint(p.pid)", fake)))
	child, err := strconv.Atoi(r.stdout[:len(r.stdout)-1])
	if err != nil {
		t.Fatalf("pid: %q", r.stdout)
	}
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	if got := shared.sup.KernelChannels(child); got != nil {
		t.Errorf("KernelChannels(a process naming a file outside the runtime directory) = %v", got)
	}
}

// outsideEphemeral fails t unless every port is outside the system's
// ephemeral range, where no connect() or bind to port 0 can take a
// kernel's port while it starts or restarts (kernel_ports.py).
func outsideEphemeral(t *testing.T, ports []uint16) {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Fatal(err)
	}
	var lo, hi uint16
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
		t.Fatalf("ip_local_port_range %q: %v", b, err)
	}
	if lo < 20000+4096 && hi > 65535-4096 {
		t.Logf("ephemeral range %d-%d leaves no room outside it: ports not checked", lo, hi)
		return
	}
	t.Logf("kernel ports %v, ephemeral range %d-%d", ports, lo, hi)
	for _, p := range ports {
		if p >= lo && p <= hi {
			t.Errorf("kernel port %d is in the ephemeral range %d-%d", p, lo, hi)
		}
	}
}

// reserved tells whether a Jupyter server of this network namespace holds
// port's reservation (kernel_ports.py: the abstract unix socket named after
// it), which keeps other servers from handing it out too.
func reserved(t *testing.T, port uint16) bool {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	err = syscall.Bind(fd, &syscall.SockaddrUnix{Name: fmt.Sprintf("@envd-kernel-port-%d", port)})
	if err != nil && err != syscall.EADDRINUSE {
		t.Fatalf("bind the reservation of port %d: %v", port, err)
	}
	return err == syscall.EADDRINUSE
}

// TestKernelPortsReleased: the ports of a kernel that was shut down are
// no longer reserved, so that a long-lived server does not run out.
func TestKernelPortsReleased(t *testing.T) {
	t.Parallel()
	ctx := testutil.Context(t, kernelTimeout)
	m, err := shared.client.StartKernel(ctx, "python3", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	k, err := shared.client.Connect(ctx, m.ID, jupyter.KernelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t, execute(t, k, "1"))
	ports := shared.sup.KernelChannels(pidOf(t, k))
	k.Close()
	if len(ports) != 5 {
		t.Fatalf("channels %v", ports)
	}
	if err := shared.client.DeleteKernel(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	if !testutil.PollFor(10*time.Second, func() bool {
		for _, p := range ports {
			if reserved(t, p) {
				return false
			}
		}
		return true
	}) {
		t.Errorf("ports %v still reserved after their kernel was shut down", ports)
	}
}
