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
	requireNetns(t)
	s4 := startServer(t, "127.0.0.1:0")
	s6 := startServer(t, "[::1]:0")
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
		netip.MustParseAddrPort("127.0.0.1:" + strconv.Itoa(int(s4.port))): ports.IPv4,
		netip.MustParseAddrPort("[::1]:" + strconv.Itoa(int(s6.port))):     ports.IPv6,
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
	requireNetns(t)
	m := ports.New(ports.Options{Logger: quietLog()})
	s := startServer(t, "127.0.0.1:0")
	own, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	ownPort := uint16(own.Addr().(*net.TCPAddr).Port)

	p := only(t, list(t, m, ports.Filter{}), s.port)
	if p.PID != s.pid || p.Process != serverName() || p.Family != ports.IPv4 || p.Addr != netip.MustParseAddr("127.0.0.1") ||
		!p.Loopback() || p.Envd || p.Forwarded() {
		t.Errorf("the server's listener: %+v, want pid %d, name %q, 127.0.0.1, not envd's, not forwarded", p, s.pid, serverName())
	}
	if p := only(t, list(t, m, ports.Filter{}), ownPort); p.PID != os.Getpid() || !p.Envd || p.Forwarded() {
		t.Errorf("envd's own listener: %+v", p)
	}
	if ps := list(t, m, ports.Filter{PID: s.pid}); len(ps) != 1 || ps[0].Port != s.port {
		t.Errorf("filter by pid %d: %+v", s.pid, ps)
	}
	if ps := list(t, m, ports.Filter{Ports: []uint16{s.port}, Family: ports.IPv6}); len(ps) != 0 {
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
	requireNetns(t)
	m := ports.New(ports.Options{Logger: quietLog(), Forward: true, Clock: quartz.NewMock(t)})
	run(t, m)
	s := startServer(t, "127.0.0.1:0")
	port := strconv.Itoa(int(s.port))
	from4, from6 := net.JoinHostPort(extV4, port), net.JoinHostPort(extV6, port)
	if _, err := roundTrip(from4, "x"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("before any scan, %s: %v, want refused", from4, err)
	}

	p := only(t, list(t, m, ports.Filter{Ports: []uint16{s.port}}), s.port)
	want := []netip.AddrPort{netip.MustParseAddrPort(from4), netip.MustParseAddrPort(from6)}
	if !slices.Equal(p.ForwardedFrom, want) || len(p.Failures) > 0 || p.PID != s.pid {
		t.Fatalf("forwarded listener: %+v, want forwarded from %v", p, want)
	}
	for _, from := range []string{from4, from6} {
		if got, err := roundTrip(from, "hello "+from); err != nil || got != "echo:hello "+from {
			t.Errorf("through %s: %q, %v", from, got, err)
		}
	}
	if ps := list(t, m, ports.Filter{ForwardedOnly: true}); len(ps) != 1 || ps[0].Port != s.port {
		t.Errorf("forwarded only: %+v", ps)
	}

	s.kill()
	if ps := list(t, m, ports.Filter{Ports: []uint16{s.port}}); len(ps) != 0 {
		t.Fatalf("after the server's end: %+v", ps)
	}
	for _, from := range []string{from4, from6} {
		if _, err := roundTrip(from, "x"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("after the server's end, %s: %v, want refused", from, err)
		}
	}
}

// TestNotForwarded: wildcard listeners, ports that also have a listener
// on an external address, and envd's own are left alone; an external
// address that is taken is reported on the listener, the others are
// forwarded, and it is forwarded once free.
func TestNotForwarded(t *testing.T) {
	requireNetns(t)
	m := ports.New(ports.Options{Logger: quietLog(), Forward: true, Clock: quartz.NewMock(t)})
	run(t, m)

	wild := startServer(t, "0.0.0.0:0")
	lo := startServer(t, "127.0.0.1:0")
	ext := startServer(t, net.JoinHostPort(extV4, strconv.Itoa(int(lo.port))))
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
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: netip.MustParseAddr(extV4).As4()}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	takenPort := strconv.Itoa(sa.(*unix.SockaddrInet4).Port)
	taken := startServer(t, "127.0.0.1:"+takenPort)

	ps := list(t, m, ports.Filter{})
	for _, p := range []ports.Port{only(t, ps, wild.port), only(t, ps, ownPort)} {
		if p.Forwarded() || len(p.Failures) > 0 {
			t.Errorf("forwarded: %+v", p)
		}
	}
	for _, p := range ps {
		if p.Port == lo.port && (p.Forwarded() || len(p.Failures) > 0) {
			t.Errorf("a port with an external listener forwarded: %+v", p)
		}
	}
	external := 0
	for _, p := range ps {
		if p.Port == ext.port && p.PID == ext.pid && !p.Loopback() && !p.Wildcard() {
			external++
		}
	}
	if external != 1 {
		t.Errorf("the external listener (pid %d) not listed once: %+v", ext.pid, ps)
	}
	p := only(t, ps, taken.port)
	from4 := netip.MustParseAddrPort(net.JoinHostPort(extV4, takenPort))
	from6 := netip.MustParseAddrPort(net.JoinHostPort(extV6, takenPort))
	if !slices.Equal(p.ForwardedFrom, []netip.AddrPort{from6}) || len(p.Failures) != 1 || p.Failures[0].From != from4 ||
		!strings.Contains(p.Failures[0].Err, "address already in use") {
		t.Fatalf("taken address: %+v, want forwarded from %v only and %v failed (in use)", p, from6, from4)
	}

	unix.Close(fd)
	p = only(t, list(t, m, ports.Filter{Ports: []uint16{taken.port}}), taken.port)
	if !slices.Equal(p.ForwardedFrom, []netip.AddrPort{from4, from6}) || len(p.Failures) > 0 {
		t.Fatalf("once free: %+v", p)
	}
	if got, err := roundTrip(from4.String(), "freed"); err != nil || got != "echo:freed" {
		t.Errorf("through %s: %q, %v", from4, got, err)
	}
}

// TestWatch: the scans run on the monitor's clock; a watcher gets the
// snapshot, then the server opening (already forwarded by the same scan)
// and closing, and its forward stops with it.
func TestWatch(t *testing.T) {
	requireNetns(t)
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
	s := startServer(t, "127.0.0.1:0")
	for _, p := range snap {
		if p.Port == s.port {
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
				if c.Port.Port == s.port {
					return c
				}
			}
		}
		t.Fatalf("no change of port %d, waiting for %s", s.port, what)
		return ports.Change{}
	}
	c := next("the server's start")
	if c.Kind != ports.Opened || c.Port.PID != s.pid || c.Port.Process != serverName() || !c.Port.Forwarded() {
		t.Fatalf("first change: %v %+v, want opened, forwarded", c.Kind, c.Port)
	}
	from := net.JoinHostPort(extV4, strconv.Itoa(int(s.port)))
	if got, err := roundTrip(from, "w"); err != nil || got != "echo:w" {
		t.Fatalf("through %s: %q, %v", from, got, err)
	}
	s.kill()
	if c := next("the server's end"); c.Kind != ports.Closed {
		t.Fatalf("change after the server's end: %v %+v", c.Kind, c.Port)
	}
	if _, err := roundTrip(from, "x"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("after the server's end, %s: %v, want refused", from, err)
	}
	if _, _, err := m.Watch(ports.Filter{Family: 9}); !errors.Is(err, ports.ErrInvalid) {
		t.Errorf("Watch with a bad family: %v", err)
	}
}
