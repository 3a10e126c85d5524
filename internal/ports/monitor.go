package ports

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/coder/quartz"
)

// Defaults of Options.
const (
	DefaultInterval    = time.Second
	DefaultMaxConns    = 1024
	DefaultDialTimeout = 10 * time.Second
)

// Options configures New. Zero values are the defaults.
type Options struct {
	Logger *slog.Logger // zero: slog.Default()
	// Clock drives the scans (a ticker tagged "ports", "scan"). Zero: the
	// real clock.
	Clock quartz.Clock
	// Interval is the time between two scans. Zero: DefaultInterval.
	Interval time.Duration
	// Forward turns forwarding on. Off, Run scans only while someone
	// watches, and List scans when asked.
	Forward bool
	// MaxConns bounds the connections forwarded at once, every forward
	// together; more wait in their listener's backlog. Zero:
	// DefaultMaxConns.
	MaxConns int
	// DialTimeout bounds the connection to a loopback listener. Zero:
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// JupyterServer, if set, returns the pid of envd's Jupyter server, 0
	// while none runs. What it listens on is private (PrivateJupyter), and
	// so are its kernels' lines to it (PrivateKernel): see private.go.
	// Zero: no Jupyter server.
	JupyterServer func() int
	// KernelChannels, if set, returns the ports of the ZeroMQ channels of
	// process pid when its command line names a connection file of that
	// server (the file's ports), else nil. It is asked only about the
	// server's children holding listeners, at most once per process and
	// scan. Zero: no process is a kernel.
	KernelChannels func(pid int) []uint16
	// Proc is where procfs is mounted. Zero: "/proc".
	Proc string
}

// Monitor scans the listeners and forwards to the loopback ones. Run runs
// it; List and Watch serve what it sees. Safe for concurrent use.
type Monitor struct {
	opts Options
	log  *slog.Logger
	self int
	fwd  *forwarder
	wake chan struct{} // a watcher arrived: scan now

	updateMu sync.Mutex // one update at a time; guards what follows
	owners   *owners
	privacy  *privacy
	useProc  bool   // sock_diag is missing: read /proc/net
	lastErr  string // the last scan error logged

	mu       sync.Mutex
	ports    []Port        // the last scan's, sorted
	changed  chan struct{} // closed when ports changes
	watchers int
}

// New returns a monitor; Run starts its scans.
func New(opts Options) *Monitor {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = quartz.NewReal()
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	if opts.Proc == "" {
		opts.Proc = "/proc"
	}
	return &Monitor{
		opts: opts, log: opts.Logger, self: os.Getpid(),
		fwd:     newForwarder(opts.Logger, opts.Clock, opts.MaxConns, opts.DialTimeout),
		wake:    make(chan struct{}, 1),
		owners:  newOwners(opts.Proc),
		privacy: newPrivacy(opts.Proc, opts.JupyterServer, opts.KernelChannels),
		changed: make(chan struct{}),
	}
}

// Run scans every Interval until ctx ends (with forwarding off, only while
// someone watches), then stops every forward: it closes their listeners
// and connections. No forward opens after Run returns.
func (m *Monitor) Run(ctx context.Context) {
	t := m.opts.Clock.NewTicker(m.opts.Interval, "ports", "scan")
	defer t.Stop("ports", "scan")
	defer m.fwd.closeAll()
	for {
		if m.active() {
			m.update() //nolint:errcheck // logged by update
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.wake:
		}
	}
}

func (m *Monitor) active() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.opts.Forward || m.watchers > 0
}

// List scans now and returns the ports f selects.
func (m *Monitor) List(f Filter) ([]Port, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	ports, err := m.update()
	if err != nil {
		return nil, err
	}
	return filter(ports, f), nil
}

func filter(ports []Port, f Filter) []Port {
	out := []Port{}
	for _, p := range ports {
		if f.Match(p) {
			out = append(out, p)
		}
	}
	return out
}

// update scans, forwards what it should, publishes and returns the ports.
func (m *Monitor) update() ([]Port, error) {
	m.updateMu.Lock()
	defer m.updateMu.Unlock()
	ports, err := m.scan()
	if err != nil {
		if msg := err.Error(); msg != m.lastErr {
			m.lastErr = msg
			m.log.Warn("scan listening sockets", "error", err)
		}
		if ports == nil {
			return nil, err
		}
	} else {
		m.lastErr = ""
	}
	var desired map[netip.AddrPort]netip.AddrPort
	if m.opts.Forward {
		ext, err := externals()
		if err != nil {
			return nil, err
		}
		desired = forwards(ports, ext)
	}
	active, failed := m.fwd.reconcile(desired)
	byAddr := make(map[netip.AddrPort]*Port, len(ports))
	for i := range ports {
		byAddr[ports[i].AddrPort()] = &ports[i]
	}
	for from, to := range active {
		if p := byAddr[to]; p != nil {
			p.ForwardedFrom = append(p.ForwardedFrom, from)
		}
	}
	for from, msg := range failed {
		if p := byAddr[desired[from]]; p != nil {
			p.Failures = append(p.Failures, Failure{From: from, Err: msg})
		}
	}
	for i := range ports {
		slices.SortFunc(ports[i].ForwardedFrom, compareAddrPort)
		slices.SortFunc(ports[i].Failures, func(a, b Failure) int { return compareAddrPort(a.From, b.From) })
	}
	m.publish(ports)
	return ports, nil
}

// scan lists the listeners (but the forwards' own) with their owners.
func (m *Monitor) scan() ([]Port, error) {
	var ls []Listener
	var err error
	if !m.useProc {
		ls, err = sockDiag()
		if err != nil && sockDiagMissing(err) {
			m.log.Info("netlink sock_diag is missing; reading /proc/net/tcp instead", "error", err)
			m.useProc = true
		}
	}
	if m.useProc {
		ls, err = procNet(m.opts.Proc)
	}
	if err != nil && !errors.Is(err, errTooMany) {
		return nil, err
	}
	own := m.fwd.own()
	inodes := make([]uint64, 0, len(ls))
	kept := ls[:0]
	for _, l := range ls {
		if !own[l.AddrPort()] {
			kept = append(kept, l)
			inodes = append(inodes, l.Inode)
		}
	}
	owners := m.owners.resolve(inodes)
	private := m.privacy.classify(m.self, kept, owners)
	ports := make([]Port, 0, len(kept))
	for _, l := range kept {
		ow := owners[l.Inode]
		ports = append(ports, Port{Listener: l, PID: ow.pid, Process: ow.name, Private: private[l.Inode]})
	}
	slices.SortFunc(ports, func(a, b Port) int {
		return cmp.Or(cmp.Compare(a.Port, b.Port), cmp.Compare(a.Family, b.Family), a.Addr.Compare(b.Addr), cmp.Compare(a.Inode, b.Inode))
	})
	return ports, err
}

func compareAddrPort(a, b netip.AddrPort) int { return a.Compare(b) }

// forwards returns what should be forwarded: for each port whose every
// listener is bound to loopback and has a known holder, and none is
// private, each external address on that port goes to the loopback
// listener of its family (the other family's if it has none). ports is
// sorted: the first listener of a family wins.
func forwards(ports []Port, ext []netip.Addr) map[netip.AddrPort]netip.AddrPort {
	out := map[netip.AddrPort]netip.AddrPort{}
	for i := 0; i < len(ports); {
		j := i + 1
		for j < len(ports) && ports[j].Port == ports[i].Port {
			j++
		}
		ps := ports[i:j]
		i = j
		var v4, v6 *Port
		ok := true
		for i := range ps {
			p := &ps[i]
			// A listener whose holder was not found (the owner walk's
			// budget ran out before it reached it) may be envd's, its
			// Jupyter server's or a kernel's: never forward it.
			if !p.Loopback() || p.Private != NotPrivate || p.PID == 0 {
				ok = false
				break
			}
			if p.Addr.Unmap().Is4() && v4 == nil {
				v4 = p
			} else if !p.Addr.Unmap().Is4() && v6 == nil {
				v6 = p
			}
		}
		if !ok {
			continue
		}
		for _, a := range ext {
			to := cmp.Or(v6, v4)
			if a.Is4() {
				to = cmp.Or(v4, v6)
			}
			out[netip.AddrPortFrom(a, ps[0].Port)] = to.AddrPort()
		}
	}
	return out
}

// externals returns the sandbox's external addresses: every non-loopback
// unicast address of its interfaces that are up (IPv6 link-local ones with
// their interface as zone).
func externals() ([]netip.Addr, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list network interfaces: %w", err)
	}
	var out []netip.Addr
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			return nil, fmt.Errorf("addresses of %s: %w", ifc.Name, err)
		}
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(n.IP)
			if !ok {
				continue
			}
			ip = ip.Unmap()
			if ip.IsLoopback() || ip.IsMulticast() || ip.IsUnspecified() {
				continue
			}
			if ip.Is6() && ip.IsLinkLocalUnicast() {
				ip = ip.WithZone(ifc.Name)
			}
			out = append(out, ip)
		}
	}
	return out, nil
}

// publish makes ports the current state, waking the watchers if it
// changed.
func (m *Monitor) publish(ports []Port) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if slices.EqualFunc(m.ports, ports, Port.equal) && m.ports != nil {
		return
	}
	m.ports = ports
	close(m.changed)
	m.changed = make(chan struct{})
}

// current returns the last scan's ports and the channel closed when they
// change.
func (m *Monitor) current() ([]Port, <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ports, m.changed
}

func (p Port) equal(q Port) bool {
	return p.Listener == q.Listener && p.PID == q.PID && p.Process == q.Process && p.Private == q.Private &&
		slices.Equal(p.ForwardedFrom, q.ForwardedFrom) && slices.Equal(p.Failures, q.Failures)
}

// ChangeKind says how a port changed.
type ChangeKind int

// The kinds of change.
const (
	Opened  ChangeKind = iota + 1 // appeared, or now matches the filter
	Closed                        // went away, or no longer matches the filter
	Updated                       // its owner, privacy or forwarding changed
)

func (k ChangeKind) String() string {
	switch k {
	case Opened:
		return "opened"
	case Closed:
		return "closed"
	case Updated:
		return "updated"
	}
	return fmt.Sprintf("change(%d)", int(k))
}

// Change is a port that changed; for Closed, its last state.
type Change struct {
	Kind ChangeKind
	Port Port
}

// Watcher follows the ports a filter selects. It keeps the monitor
// scanning until Close. Changes are computed against what it returned
// last: a slow reader never blocks the scans, and misses no state, only
// intermediate ones. Use it from one goroutine.
type Watcher struct {
	m     *Monitor
	f     Filter
	sent  map[portKey]Port
	ready <-chan struct{}
	once  sync.Once
}

// Watch scans now and returns a watcher and the ports f selects now.
func (m *Monitor) Watch(f Filter) (*Watcher, []Port, error) {
	if err := f.Validate(); err != nil {
		return nil, nil, err
	}
	m.mu.Lock()
	m.watchers++
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
	w := &Watcher{m: m, f: f}
	if _, err := m.update(); err != nil {
		w.Close()
		return nil, nil, err
	}
	ports, ready := m.current()
	w.ready = ready
	now := filter(ports, f)
	w.sent = make(map[portKey]Port, len(now))
	for _, p := range now {
		w.sent[p.key()] = p
	}
	return w, now, nil
}

// Ready returns a channel closed when Changes may have something new.
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// Changes returns what changed since the snapshot or the last Changes:
// closed ports first, then opened, then updated, each in port order.
func (w *Watcher) Changes() []Change {
	ports, ready := w.m.current()
	w.ready = ready
	var closed, opened, updated []Change
	now := make(map[portKey]Port, len(ports))
	for _, p := range filter(ports, w.f) {
		k := p.key()
		now[k] = p
		old, ok := w.sent[k]
		switch {
		case !ok:
			opened = append(opened, Change{Opened, p})
		case !old.equal(p):
			updated = append(updated, Change{Updated, p})
		}
	}
	for k, p := range w.sent {
		if _, ok := now[k]; !ok {
			closed = append(closed, Change{Closed, p})
		}
	}
	slices.SortFunc(closed, func(a, b Change) int {
		return cmp.Or(cmp.Compare(a.Port.Port, b.Port.Port), a.Port.Addr.Compare(b.Port.Addr), cmp.Compare(a.Port.Inode, b.Port.Inode))
	})
	w.sent = now
	return slices.Concat(closed, opened, updated)
}

// Close ends the watch: the monitor stops scanning for it.
func (w *Watcher) Close() {
	w.once.Do(func() {
		w.m.mu.Lock()
		w.m.watchers--
		w.m.mu.Unlock()
	})
}
