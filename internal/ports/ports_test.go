package ports_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/coder/quartz"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/ports"
	"github.com/envd-dev/envd/internal/ports/portstest"
	"github.com/envd-dev/envd/internal/testutil"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// run starts m's scans; they and every forward stop when the test ends.
func run(t *testing.T, m *ports.Monitor) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		testutil.RequireClosed(t, done, "the monitor's end")
	})
}

// only returns the one port of ps on port n.
func only(t *testing.T, ps []ports.Port, n uint16) ports.Port {
	t.Helper()
	var out []ports.Port
	for _, p := range ps {
		if p.Port == n {
			out = append(out, p)
		}
	}
	if len(out) != 1 {
		t.Fatalf("port %d: %d listeners, want 1: %+v", n, len(out), ps)
	}
	return out[0]
}

func list(t *testing.T, m *ports.Monitor, f ports.Filter) []ports.Port {
	t.Helper()
	ps, err := m.List(f)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// TestScanners: netlink sock_diag and /proc/net/tcp* see the same
// listeners, both families, with their addresses and inodes.
func TestScanners(t *testing.T) {
	portstest.RequireNetns(t)
	s4 := portstest.StartServer(t, "127.0.0.1:0")
	s6 := portstest.StartServer(t, "[::1]:0")
	diag, err := ports.SockDiag()
	if err != nil {
		t.Fatal(err)
	}
	proc, err := ports.ProcNet("/proc")
	if err != nil {
		t.Fatal(err)
	}
	cmp := func(a, b ports.Listener) int { return strings.Compare(a.AddrPort().String(), b.AddrPort().String()) }
	slices.SortFunc(diag, cmp)
	slices.SortFunc(proc, cmp)
	if !slices.Equal(diag, proc) {
		t.Fatalf("sock_diag: %+v\n/proc/net: %+v", diag, proc)
	}
	want := map[netip.AddrPort]ports.Family{
		netip.MustParseAddrPort("127.0.0.1:" + strconv.Itoa(int(s4.Port))): ports.IPv4,
		netip.MustParseAddrPort("[::1]:" + strconv.Itoa(int(s6.Port))):     ports.IPv6,
	}
	for _, l := range diag {
		if fam, ok := want[l.AddrPort()]; ok && fam == l.Family && l.Inode != 0 && l.Loopback() {
			delete(want, l.AddrPort())
		}
	}
	if len(want) > 0 {
		t.Fatalf("not scanned: %v in %+v", want, diag)
	}
}

// TestListOwners: List says which process holds each listener, tells
// envd's own sockets apart, and filters precisely; bad filters are
// refused.
func TestListOwners(t *testing.T) {
	portstest.RequireNetns(t)
	m := ports.New(ports.Options{Logger: quietLog()})
	s := portstest.StartServer(t, "127.0.0.1:0")
	own, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	ownPort := uint16(own.Addr().(*net.TCPAddr).Port)

	p := only(t, list(t, m, ports.Filter{}), s.Port)
	if p.PID != s.PID || p.Process != portstest.ServerName() || p.Family != ports.IPv4 || p.Addr != netip.MustParseAddr("127.0.0.1") ||
		!p.Loopback() || p.Private != ports.NotPrivate || p.Forwarded() {
		t.Errorf("the server's listener: %+v, want pid %d, name %q, 127.0.0.1, not private, not forwarded", p, s.PID, portstest.ServerName())
	}
	if p := only(t, list(t, m, ports.Filter{}), ownPort); p.PID != os.Getpid() || p.Private != ports.PrivateEnvd || p.Forwarded() {
		t.Errorf("envd's own listener: %+v", p)
	}
	if ps := list(t, m, ports.Filter{PID: s.PID}); len(ps) != 1 || ps[0].Port != s.Port {
		t.Errorf("filter by pid %d: %+v", s.PID, ps)
	}
	if ps := list(t, m, ports.Filter{Ports: []uint16{s.Port}, Family: ports.IPv6}); len(ps) != 0 {
		t.Errorf("filter by port and IPv6: %+v", ps)
	}
	if ps := list(t, m, ports.Filter{ForwardedOnly: true}); len(ps) != 0 {
		t.Errorf("forwarded, with forwarding off: %+v", ps)
	}
	for f, want := range map[*ports.Filter]string{
		{Ports: []uint16{80, 0}}: "ports[1] is 0: a port is 1-65535",
		{PID: -1}:                "pid -1 is negative",
		{Family: 5}:              "family(5) is unknown: give ipv4, ipv6 or neither",
	} {
		if _, err := m.List(*f); !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("List(%+v): %v, want %q", *f, err, want)
		}
	}
}

// TestForward: a server bound only to 127.0.0.1 is reachable at both
// external addresses (IPv6 goes to the IPv4 listener), half-closes pass
// through, and the forward stops when the server goes: its addresses
// refuse connections again.
func TestForward(t *testing.T) {
	portstest.RequireNetns(t)
	m := ports.New(ports.Options{Logger: quietLog(), Forward: true, Clock: quartz.NewMock(t)})
	run(t, m)
	s := portstest.StartServer(t, "127.0.0.1:0")
	port := strconv.Itoa(int(s.Port))
	from4, from6 := net.JoinHostPort(portstest.ExtV4, port), net.JoinHostPort(portstest.ExtV6, port)
	if _, err := portstest.RoundTrip(from4, "x"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("before any scan, %s: %v, want refused", from4, err)
	}

	p := only(t, list(t, m, ports.Filter{Ports: []uint16{s.Port}}), s.Port)
	want := []netip.AddrPort{netip.MustParseAddrPort(from4), netip.MustParseAddrPort(from6)}
	if !slices.Equal(p.ForwardedFrom, want) || len(p.Failures) > 0 || p.PID != s.PID {
		t.Fatalf("forwarded listener: %+v, want forwarded from %v", p, want)
	}
	for _, from := range []string{from4, from6} {
		if got, err := portstest.RoundTrip(from, "hello "+from); err != nil || got != "echo:hello "+from {
			t.Errorf("through %s: %q, %v", from, got, err)
		}
	}
	if ps := list(t, m, ports.Filter{ForwardedOnly: true}); len(ps) != 1 || ps[0].Port != s.Port {
		t.Errorf("forwarded only: %+v", ps)
	}

	s.Kill()
	if ps := list(t, m, ports.Filter{Ports: []uint16{s.Port}}); len(ps) != 0 {
		t.Fatalf("after the server's end: %+v", ps)
	}
	for _, from := range []string{from4, from6} {
		if _, err := portstest.RoundTrip(from, "x"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("after the server's end, %s: %v, want refused", from, err)
		}
	}
}

// TestNotForwarded: wildcard listeners, ports that also have a listener
// on an external address, envd's own and a kernel's channel are left
// alone; an external
// address that is taken is reported on the listener, the others are
// forwarded, and it is forwarded once free.
func TestNotForwarded(t *testing.T) {
	portstest.RequireNetns(t)
	// private is a kernel's channel (KernelChannels says so): the test
	// process stands for the Jupyter server, whose child private is.
	private := portstest.StartServer(t, "127.0.0.1:0")
	privateOf := func(pid int) []uint16 {
		if pid == private.PID {
			return []uint16{private.Port}
		}
		return nil
	}
	m := ports.New(ports.Options{Logger: quietLog(), Forward: true, Clock: quartz.NewMock(t), JupyterServer: os.Getpid, KernelChannels: privateOf})
	run(t, m)

	wild := portstest.StartServer(t, "0.0.0.0:0")
	lo := portstest.StartServer(t, "127.0.0.1:0")
	ext := portstest.StartServer(t, net.JoinHostPort(portstest.ExtV4, strconv.Itoa(int(lo.Port))))
	own, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	ownPort := uint16(own.Addr().(*net.TCPAddr).Port)

	// Taken: a socket bound to the IPv4 external address (not listening,
	// so no scan sees it), then a loopback server on its port.
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: netip.MustParseAddr(portstest.ExtV4).As4()}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	takenPort := strconv.Itoa(sa.(*unix.SockaddrInet4).Port)
	taken := portstest.StartServer(t, "127.0.0.1:"+takenPort)

	ps := list(t, m, ports.Filter{})
	for _, p := range []ports.Port{only(t, ps, wild.Port), only(t, ps, ownPort), only(t, ps, private.Port)} {
		if p.Forwarded() || len(p.Failures) > 0 {
			t.Errorf("forwarded: %+v", p)
		}
	}
	if p := only(t, ps, private.Port); p.Private != ports.PrivateKernel || p.PID != private.PID {
		t.Errorf("a kernel's channel not private: %+v", p)
	}
	for _, p := range ps {
		if p.Port == lo.Port && (p.Forwarded() || len(p.Failures) > 0) {
			t.Errorf("a port with an external listener forwarded: %+v", p)
		}
	}
	external := 0
	for _, p := range ps {
		if p.Port == ext.Port && p.PID == ext.PID && !p.Loopback() && !p.Wildcard() {
			external++
		}
	}
	if external != 1 {
		t.Errorf("the external listener (pid %d) not listed once: %+v", ext.PID, ps)
	}
	p := only(t, ps, taken.Port)
	from4 := netip.MustParseAddrPort(net.JoinHostPort(portstest.ExtV4, takenPort))
	from6 := netip.MustParseAddrPort(net.JoinHostPort(portstest.ExtV6, takenPort))
	if !slices.Equal(p.ForwardedFrom, []netip.AddrPort{from6}) || len(p.Failures) != 1 || p.Failures[0].From != from4 ||
		!strings.Contains(p.Failures[0].Err, "address already in use") {
		t.Fatalf("taken address: %+v, want forwarded from %v only and %v failed (in use)", p, from6, from4)
	}

	unix.Close(fd)
	p = only(t, list(t, m, ports.Filter{Ports: []uint16{taken.Port}}), taken.Port)
	if !slices.Equal(p.ForwardedFrom, []netip.AddrPort{from4, from6}) || len(p.Failures) > 0 {
		t.Fatalf("once free: %+v", p)
	}
	if got, err := portstest.RoundTrip(from4.String(), "freed"); err != nil || got != "echo:freed" {
		t.Errorf("through %s: %q, %v", from4, got, err)
	}
}

// TestWatch: the scans run on the monitor's clock; a watcher gets the
// snapshot, then the server opening (already forwarded by the same scan)
// and closing, and its forward stops with it.
func TestWatch(t *testing.T) {
	portstest.RequireNetns(t)
	clock := quartz.NewMock(t)
	ticker := clock.Trap().NewTicker("ports", "scan")
	defer ticker.Close()
	m := ports.New(ports.Options{Logger: quietLog(), Forward: true, Clock: clock, Interval: ports.DefaultInterval})
	run(t, m)
	ctx := testutil.Context(t, testutil.Wait)
	ticker.MustWait(ctx).MustRelease(ctx)

	w, snap, err := m.Watch(ports.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s := portstest.StartServer(t, "127.0.0.1:0")
	for _, p := range snap {
		if p.Port == s.Port {
			t.Fatalf("the server in the snapshot taken before it started: %+v", p)
		}
	}
	// next advances the clock to the next scan until a change of the
	// server's port comes.
	next := func(what string) ports.Change {
		t.Helper()
		for range 100 {
			clock.Advance(ports.DefaultInterval).MustWait(ctx)
			select {
			case <-w.Ready():
			case <-ctx.Done():
				t.Fatalf("no change after a scan, waiting for %s", what)
			}
			for _, c := range w.Changes() {
				if c.Port.Port == s.Port {
					return c
				}
			}
		}
		t.Fatalf("no change of port %d, waiting for %s", s.Port, what)
		return ports.Change{}
	}
	c := next("the server's start")
	if c.Kind != ports.Opened || c.Port.PID != s.PID || c.Port.Process != portstest.ServerName() || !c.Port.Forwarded() {
		t.Fatalf("first change: %v %+v, want opened, forwarded", c.Kind, c.Port)
	}
	from := net.JoinHostPort(portstest.ExtV4, strconv.Itoa(int(s.Port)))
	if got, err := portstest.RoundTrip(from, "w"); err != nil || got != "echo:w" {
		t.Fatalf("through %s: %q, %v", from, got, err)
	}
	s.Kill()
	if c := next("the server's end"); c.Kind != ports.Closed {
		t.Fatalf("change after the server's end: %v %+v", c.Kind, c.Port)
	}
	if _, err := portstest.RoundTrip(from, "x"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("after the server's end, %s: %v, want refused", from, err)
	}
	if _, _, err := m.Watch(ports.Filter{Family: 9}); !errors.Is(err, ports.ErrInvalid) {
		t.Errorf("Watch with a bad family: %v", err)
	}
}
