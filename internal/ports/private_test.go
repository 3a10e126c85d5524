package ports_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/internal/ports"
	"github.com/envd-dev/envd/internal/ports/portstest"
	"github.com/envd-dev/envd/internal/testutil"
)

// forwardedFrom are the test namespace's external addresses on port n.
func forwardedFrom(n uint16) []netip.AddrPort {
	port := strconv.Itoa(int(n))
	return []netip.AddrPort{
		netip.MustParseAddrPort(net.JoinHostPort(portstest.ExtV4, port)),
		netip.MustParseAddrPort(net.JoinHostPort(portstest.ExtV6, port)),
	}
}

// wantPorts checks the listeners of ps on the ports of want: each one
// listener, of pid, private as said, and forwarded from both external
// addresses exactly when not private.
func wantPorts(t *testing.T, ps []ports.Port, want map[uint16]ports.Port) {
	t.Helper()
	for port, w := range want {
		p := only(t, ps, port)
		var from []netip.AddrPort
		if w.Private == ports.NotPrivate {
			from = forwardedFrom(port)
		}
		if p.PID != w.PID || p.Private != w.Private || !slices.Equal(p.ForwardedFrom, from) || len(p.Failures) > 0 {
			t.Errorf("%s: %+v, want pid %d, private %q, forwarded from %v", w.Process, p, w.PID, w.Private, from)
		}
	}
}

// TestPrivate: with a fake Jupyter server and kernel (their sockets laid
// out as envd's server's and ipykernel's are), whatever the server listens
// on is private (jupyter), and so are the kernel's listeners on its
// channels' ports and those in the same poller (ipykernel's IOPub pipe):
// never forwarded, nothing answers at their external addresses. The
// kernel's listener in no poller (a server run in a thread) or in one of
// its own, and its subprocess's, are the workload's: forwarded, the
// subprocess's even though it claims a connection file, since it is not
// the server's child. A second scan says the same.
func TestPrivate(t *testing.T) {
	portstest.RequireNetns(t)
	j := portstest.StartJupyter(t)
	k := j.Kernel
	// The kernel names its connection file; so does its subprocess (a
	// process's command line is its own to write).
	channels := func(pid int) []uint16 {
		switch pid {
		case k.PID:
			return []uint16{k.Channel}
		case k.SubPID:
			return []uint16{k.Sub}
		}
		return nil
	}
	m := ports.New(ports.Options{Logger: quietLog(), Forward: true, Clock: quartz.NewMock(t),
		JupyterServer: func() int { return j.ServerPID }, KernelChannels: channels})
	run(t, m)

	want := map[uint16]ports.Port{
		j.ServerPort: {PID: j.ServerPID, Private: ports.PrivateJupyter, Process: "the server's port"},
		k.Channel:    {PID: k.PID, Private: ports.PrivateKernel, Process: "the kernel's channel"},
		k.Pipe:       {PID: k.PID, Private: ports.PrivateKernel, Process: "the kernel's pipe, in its channels' poller"},
		k.Thread:     {PID: k.PID, Process: "the kernel's listener in no poller"},
		k.OwnPoller:  {PID: k.PID, Process: "the kernel's listener in a poller of its own"},
		k.Sub:        {PID: k.SubPID, Process: "the kernel's subprocess's, naming a connection file"},
	}
	for range 2 {
		wantPorts(t, list(t, m, ports.Filter{}), want)
	}
	for _, port := range []uint16{j.ServerPort, k.Channel, k.Pipe} {
		from := net.JoinHostPort(portstest.ExtV4, strconv.Itoa(int(port)))
		if _, err := portstest.RoundTrip(from, "x"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s, to a private listener: %v, want refused", from, err)
		}
	}
	from := net.JoinHostPort(portstest.ExtV4, strconv.Itoa(int(k.Sub)))
	if got, err := portstest.RoundTrip(from, "sub"); err != nil || got != "echo:sub" {
		t.Errorf("through %s to the subprocess's server: %q, %v", from, got, err)
	}

	// Without a Jupyter server, a kernel is a process like any other.
	m = ports.New(ports.Options{Logger: quietLog(), JupyterServer: func() int { return 0 }, KernelChannels: channels})
	for _, p := range list(t, m, ports.Filter{PID: k.PID}) {
		if p.Private != ports.NotPrivate {
			t.Errorf("with no server, the kernel's %+v", p)
		}
	}
}

// TestPrivateLate: a kernel's listener that joins its channels' poller
// after a scan found it outside (as ZeroMQ's I/O thread registers a
// listener just after it starts listening) is found private at the next
// scan: one verdict "the workload's" does not stand until a second.
func TestPrivateLate(t *testing.T) {
	portstest.RequireNetns(t)
	j := portstest.StartJupyter(t)
	k := j.Kernel
	m := ports.New(ports.Options{Logger: quietLog(), JupyterServer: func() int { return j.ServerPID },
		KernelChannels: func(pid int) []uint16 {
			if pid == k.PID {
				return []uint16{k.Channel}
			}
			return nil
		}})
	if p := only(t, list(t, m, ports.Filter{}), k.Late); p.Private != ports.NotPrivate {
		t.Fatalf("outside the poller: %+v, want the workload's", p)
	}
	j.Late(t)
	if p := only(t, list(t, m, ports.Filter{}), k.Late); p.Private != ports.PrivateKernel {
		t.Fatalf("once in the channels' poller: %+v, want the kernel's", p)
	}
}

// startupServers is an IPython startup file: code run in the kernel, once
// its channels listen, that starts servers of the user's (one in a thread
// of the kernel, one in a ZeroMQ context of its own, one in a subprocess)
// and writes them, with the kernel's IOPub pipe, to the file %q.
const startupServers = `
import http.server, json, os, socket, subprocess, sys, threading, zmq
_s = socket.socket(); _s.bind(("127.0.0.1", 0)); _sub_port = _s.getsockname()[1]; _s.close()
_sub = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(_sub_port)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
_srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
threading.Thread(target=_srv.serve_forever, daemon=True).start()
_z = zmq.Context().socket(zmq.PULL)
_facts = {"pipe": get_ipython().kernel.iopub_thread._pipe_port, "thread": _srv.server_address[1],
          "own_context": _z.bind_to_random_port("tcp://127.0.0.1"), "sub": _sub_port, "sub_pid": _sub.pid}
with open(%[1]q + ".tmp", "w") as _f:
    json.dump(_facts, _f)
os.rename(%[1]q + ".tmp", %[1]q)
`

// TestPrivateIPyKernel: a real ipykernel, the test's child (the test
// stands for its Jupyter server): its five channels and its IOPub pipe,
// on a port its connection file does not name, are private; the servers
// code run in it starts (in a thread, in a ZeroMQ context of its own, in a
// subprocess) are the workload's, forwarded.
func TestPrivateIPyKernel(t *testing.T) {
	portstest.RequireNetns(t)
	const python = "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import ipykernel, zmq").Run(); err != nil {
		t.Skipf("%s has no ipykernel: %v", python, err)
	}
	dir := t.TempDir()
	conn, factsFile := filepath.Join(dir, "kernel-test.json"), filepath.Join(dir, "facts.json")
	startup := filepath.Join(dir, "ipython", "profile_default", "startup")
	if err := os.MkdirAll(startup, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(startup, "00-servers.py"), fmt.Appendf(nil, startupServers, factsFile), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-m", "ipykernel_launcher", "-f", conn)
	cmd.Env = append(os.Environ(), "IPYTHONDIR="+filepath.Join(dir, "ipython"), "JUPYTER_RUNTIME_DIR="+dir, "PYDEVD_DISABLE_FILE_VALIDATION=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var facts struct {
		Pipe       uint16 `json:"pipe"`
		Thread     uint16 `json:"thread"`
		OwnContext uint16 `json:"own_context"`
		Sub        uint16 `json:"sub"`
		SubPID     int    `json:"sub_pid"`
	}
	t.Cleanup(func() {
		if facts.SubPID > 0 {
			syscall.Kill(facts.SubPID, syscall.SIGKILL)
		}
		cmd.Process.Kill()
		cmd.Wait()
	})
	if !testutil.PollFor(testutil.Start, func() bool {
		b, err := os.ReadFile(factsFile)
		return err == nil && json.Unmarshal(b, &facts) == nil
	}) {
		t.Fatalf("the kernel's startup file wrote nothing; its output:\n%s", out)
	}
	var info map[string]any
	b, err := os.ReadFile(conn)
	if err != nil || json.Unmarshal(b, &info) != nil {
		t.Fatalf("the connection file: %v: %s", err, b)
	}
	var chans []uint16
	for _, key := range []string{"shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"} {
		chans = append(chans, uint16(info[key].(float64)))
	}
	m := ports.New(ports.Options{Logger: quietLog(), Forward: true, Clock: quartz.NewMock(t), JupyterServer: os.Getpid,
		KernelChannels: func(pid int) []uint16 {
			if pid == cmd.Process.Pid {
				return chans
			}
			return nil
		}})
	run(t, m)

	want := map[uint16]ports.Port{
		facts.Pipe:       {PID: cmd.Process.Pid, Private: ports.PrivateKernel, Process: "the IOPub pipe"},
		facts.Thread:     {PID: cmd.Process.Pid, Process: "a server in a thread of the kernel"},
		facts.OwnContext: {PID: cmd.Process.Pid, Process: "a ZeroMQ socket of a context of its own"},
		facts.Sub:        {PID: facts.SubPID, Process: "a server in a subprocess"},
	}
	for _, c := range chans {
		want[c] = ports.Port{PID: cmd.Process.Pid, Private: ports.PrivateKernel, Process: "channel " + strconv.Itoa(int(c))}
	}
	if slices.Contains(chans, facts.Pipe) {
		t.Fatalf("the pipe %d is among the channels %v", facts.Pipe, chans)
	}
	// The subprocess's server listens soon after the startup file ends.
	var ps []ports.Port
	if !testutil.PollFor(testutil.Wait, func() bool {
		ps = list(t, m, ports.Filter{Ports: []uint16{facts.Sub}})
		return len(ps) == 1 && ps[0].Forwarded()
	}) {
		t.Fatalf("the subprocess's server on %d: %+v", facts.Sub, ps)
	}
	ps = list(t, m, ports.Filter{})
	wantPorts(t, ps, want)
	var kernels []string
	for _, p := range ps {
		if p.Private == ports.PrivateKernel {
			kernels = append(kernels, strconv.Itoa(int(p.Port)))
		}
	}
	if len(kernels) != len(chans)+1 {
		t.Errorf("the kernel's private listeners: %s, want its 5 channels and its pipe", strings.Join(kernels, " "))
	}
}

// TestParseEpollInfo: the files an epoll instance watches, from its
// fdinfo (Linux 6.x's, of ipykernel's ZeroMQ I/O thread); other lines and
// malformed entries are left out.
func TestParseEpollInfo(t *testing.T) {
	t.Parallel()
	const info = `pos:	0
flags:	02000002
mnt_id:	15
ino:	1038
tfd:       13 events:       19 data:     7f4ac0000b90  pos:0 ino:26b0d sdev:9
tfd:        7 events:       19 data:         2aaefa30  pos:0 ino:40e sdev:10
tfd:       29 events:       19 data:     7f4ac0002300  pos:0 ino:26b19 sdev:9
tfd:       30 events:       19 data:     7f4ac0002300  pos:0 ino:zz sdev:9
`
	inos, devs := ports.ParseEpollInfo(info)
	if !slices.Equal(inos, []uint64{0x26b0d, 0x40e, 0x26b19}) || !slices.Equal(devs, []string{"9", "10", "9"}) {
		t.Errorf("ParseEpollInfo: %x %q", inos, devs)
	}
}

// TestPrivateManyFDs: the owner walk reads at most 65536 descriptors per
// scan, lowest pid first, and a listener whose holder it did not reach
// has no owner: it is then taken for the workload's and forwarded. The
// processes of lower pids than the Jupyter server's or a kernel's (envd,
// whose descriptors grow with the connections any network client keeps
// open on its main port, its processes' pipes, watches and tunnels; the
// workload's processes started before a kernel) holding more than 65536
// descriptors together is enough: the server's port and the kernel's
// channels are then forwarded to the sandbox's external addresses, though
// a private listener never is (docs/ports.md). Here four helper
// processes, started before the fake Jupyter server, hold them.
func TestPrivateManyFDs(t *testing.T) {
	portstest.RequireNetns(t)
	for range 4 {
		holdFDs(t, 19_000)
	}
	j := portstest.StartJupyter(t)
	k := j.Kernel
	m := ports.New(ports.Options{Logger: quietLog(), Forward: true, Clock: quartz.NewMock(t),
		JupyterServer: func() int { return j.ServerPID },
		KernelChannels: func(pid int) []uint16 {
			if pid == k.PID {
				return []uint16{k.Channel}
			}
			return nil
		}})
	run(t, m)
	want := []struct {
		port    uint16
		private ports.Private
	}{{j.ServerPort, ports.PrivateJupyter}, {k.Channel, ports.PrivateKernel}, {k.Pipe, ports.PrivateKernel}}
	// A scan may leave them to the next (its walk cut short): never
	// forwarded meanwhile, and known as private after a few.
	var ps []ports.Port
	for range 3 {
		ps = list(t, m, ports.Filter{})
		for _, w := range want {
			if p := only(t, ps, w.port); p.Forwarded() {
				t.Errorf("port %d: private %q, pid %d, forwarded from %v; want private %q, never forwarded", w.port, p.Private, p.PID, p.ForwardedFrom, w.private)
			}
			from := net.JoinHostPort(portstest.ExtV4, strconv.Itoa(int(w.port)))
			if c, err := net.Dial("tcp", from); err == nil {
				c.Close()
				t.Errorf("%s reaches private port %d from the sandbox's external address", from, w.port)
			}
		}
		if t.Failed() {
			return
		}
	}
	for _, w := range want {
		if p := only(t, ps, w.port); p.Private != w.private {
			t.Errorf("port %d after 3 scans: private %q, pid %d; want %q", w.port, p.Private, p.PID, w.private)
		}
	}
}

// holdFDs starts a helper process (main_test.go) that holds n open
// descriptors until the test ends.
func holdFDs(t *testing.T, n int) {
	t.Helper()
	cmd, line := portstest.StartHelper(t, holdFDsEnv+"="+strconv.Itoa(n))
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	if l := testutil.RequireReceive(t, line); l != "ready" {
		t.Fatalf("the descriptor holder said %q", l)
	}
}
