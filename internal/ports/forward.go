package ports

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/backoff"
	"github.com/envd-dev/envd/relay"
)

// forwarder owns the forwards: one listener per external address and port,
// each connection it accepts copied both ways to a loopback listener.
type forwarder struct {
	log         *slog.Logger
	clock       quartz.Clock
	dialTimeout time.Duration
	// slots bounds the forwarded connections of every forward together.
	slots chan struct{}

	mu     sync.Mutex
	fwds   map[netip.AddrPort]*forward // by external address
	failed map[netip.AddrPort]string   // external addresses that could not be listened on
	closed bool                        // no forward opens any more
}

func newForwarder(log *slog.Logger, clock quartz.Clock, maxConns int, dialTimeout time.Duration) *forwarder {
	return &forwarder{
		log: log, clock: clock, dialTimeout: dialTimeout,
		slots: make(chan struct{}, maxConns),
		fwds:  map[netip.AddrPort]*forward{}, failed: map[netip.AddrPort]string{},
	}
}

// forward is one external address forwarded to a loopback listener.
type forward struct {
	f      *forwarder
	from   netip.AddrPort
	ln     net.Listener
	ctx    context.Context // ends when the forward closes
	cancel context.CancelFunc
	done   sync.WaitGroup // the accept loop and every connection

	mu     sync.Mutex
	target netip.AddrPort        // where new connections go
	conns  map[net.Conn]struct{} // open connections, both sides
}

// reconcile makes the forwards desired's (external address -> loopback
// listener): it closes those no longer wanted, retargets those kept,
// opens the new ones, and returns what is forwarded and what failed.
func (f *forwarder) reconcile(desired map[netip.AddrPort]netip.AddrPort) (active map[netip.AddrPort]netip.AddrPort, failed map[netip.AddrPort]string) {
	f.mu.Lock()
	var stale []*forward
	for from, fw := range f.fwds {
		if _, ok := desired[from]; !ok || f.closed {
			stale = append(stale, fw)
			delete(f.fwds, from)
		}
	}
	for from := range f.failed {
		if _, ok := desired[from]; !ok {
			delete(f.failed, from)
		}
	}
	closed := f.closed
	f.mu.Unlock()
	for _, fw := range stale {
		fw.close()
		f.log.Info("stopped forwarding", "from", fw.from.String(), "to", fw.getTarget().String())
	}
	if !closed {
		for from, to := range desired {
			f.mu.Lock()
			fw := f.fwds[from]
			f.mu.Unlock()
			if fw != nil {
				fw.setTarget(to)
				continue
			}
			f.open(from, to)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	active = make(map[netip.AddrPort]netip.AddrPort, len(f.fwds))
	for from, fw := range f.fwds {
		active[from] = fw.getTarget()
	}
	failed = make(map[netip.AddrPort]string, len(f.failed))
	for from, msg := range f.failed {
		failed[from] = msg
	}
	return active, failed
}

// open starts forwarding from to to; a failure to listen is recorded.
func (f *forwarder) open(from, to netip.AddrPort) {
	ln, err := net.Listen("tcp", from.String())
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		msg := errors.Unwrap(err)
		if msg == nil {
			msg = err
		}
		if _, seen := f.failed[from]; !seen {
			f.log.Warn("cannot forward an address to a loopback listener", "from", from.String(), "to", to.String(), "error", err)
		}
		f.failed[from] = "listen on " + from.String() + ": " + msg.Error()
		return
	}
	if f.closed {
		ln.Close() // closeAll ran while this one was listening
		return
	}
	delete(f.failed, from)
	ctx, cancel := context.WithCancel(context.Background())
	fw := &forward{f: f, from: from, ln: ln, ctx: ctx, cancel: cancel, target: to, conns: map[net.Conn]struct{}{}}
	f.fwds[from] = fw
	fw.done.Add(1)
	go fw.accept()
	f.log.Info("forwarding", "from", from.String(), "to", to.String())
}

// closeAll stops every forward; none opens afterwards.
func (f *forwarder) closeAll() {
	f.mu.Lock()
	f.closed = true
	fwds := f.fwds
	f.fwds = map[netip.AddrPort]*forward{}
	f.mu.Unlock()
	for _, fw := range fwds {
		fw.close()
	}
}

// own returns the forwards' own listening addresses, without zones (as
// a scan shows them).
func (f *forwarder) own() map[netip.AddrPort]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[netip.AddrPort]bool, len(f.fwds))
	for from := range f.fwds {
		out[netip.AddrPortFrom(from.Addr().WithZone(""), from.Port())] = true
	}
	return out
}

func (fw *forward) getTarget() netip.AddrPort {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return fw.target
}

func (fw *forward) setTarget(to netip.AddrPort) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	fw.target = to
}

// close closes the listener and every connection, and waits for their
// goroutines.
func (fw *forward) close() {
	fw.cancel()
	fw.ln.Close()
	fw.mu.Lock()
	for c := range fw.conns {
		c.Close()
	}
	fw.mu.Unlock()
	fw.done.Wait()
}

// acceptBackoff spaces the retries of a failing Accept.
var acceptBackoff = backoff.Policy{Floor: 5 * time.Millisecond, Cap: time.Second}

// accept serves the forward's listener until it closes. A connection is
// accepted only once a slot is free: the others wait in the backlog.
func (fw *forward) accept() {
	defer fw.done.Done()
	retry := backoff.New(acceptBackoff, fw.f.clock, "ports", "accept")
	for {
		select {
		case fw.f.slots <- struct{}{}:
		case <-fw.ctx.Done():
			return
		}
		c, err := fw.ln.Accept()
		if err != nil {
			<-fw.f.slots
			if fw.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of fds, most likely: wait a little, growing, and retry.
			fw.f.log.Warn("accept a forwarded connection", "from", fw.from.String(), "error", err)
			if retry.Wait(fw.ctx) != nil {
				return
			}
			continue
		}
		retry.Reset()
		fw.done.Add(1)
		go func() {
			defer fw.done.Done()
			defer func() { <-fw.f.slots }()
			fw.serve(c)
		}()
	}
}

// track registers c so that close closes it; false if the forward is
// closing already (c is then closed).
func (fw *forward) track(c net.Conn) bool {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.ctx.Err() != nil {
		c.Close()
		return false
	}
	fw.conns[c] = struct{}{}
	return true
}

func (fw *forward) untrack(c net.Conn) {
	fw.mu.Lock()
	delete(fw.conns, c)
	fw.mu.Unlock()
	c.Close()
}

// serve connects c to the loopback listener and copies both ways.
func (fw *forward) serve(c net.Conn) {
	if !fw.track(c) {
		return
	}
	defer fw.untrack(c)
	target := fw.getTarget()
	d := net.Dialer{Timeout: fw.f.dialTimeout}
	up, err := d.DialContext(fw.ctx, "tcp", target.String())
	if err != nil {
		fw.f.log.Debug("reach a forwarded listener", "from", fw.from.String(), "to", target.String(), "error", err)
		return
	}
	if !fw.track(up) {
		return
	}
	defer fw.untrack(up)
	relay.Both(c, up)
}
