package ports

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/coder/quartz"
)

// acceptResult is what one Accept of a fakeListener returns.
type acceptResult struct {
	conn net.Conn
	err  error
}

// fakeListener returns what the test sends it.
type fakeListener struct {
	accepts   chan acceptResult
	closed    chan struct{}
	closeOnce sync.Once
}

func (l *fakeListener) Accept() (net.Conn, error) {
	select {
	case r := <-l.accepts:
		return r.conn, r.err
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *fakeListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

func (l *fakeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// TestAcceptBackoff: a failing Accept is retried after acceptBackoff's
// delays, on the forwarder's clock, and a connection accepted starts
// them over.
func TestAcceptBackoff(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clk := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
	trap := clk.Trap().NewTimer("ports", "accept")
	defer trap.Close()
	f := newForwarder(slog.New(slog.DiscardHandler), clk, 4, time.Second)
	ln := &fakeListener{accepts: make(chan acceptResult), closed: make(chan struct{})}
	fctx, fcancel := context.WithCancel(context.Background())
	fw := &forward{f: f, from: netip.MustParseAddrPort("10.0.0.1:8080"), ln: ln, ctx: fctx, cancel: fcancel,
		target: netip.MustParseAddrPort("127.0.0.1:1"), conns: map[net.Conn]struct{}{}}
	fw.done.Add(1)
	go fw.accept()
	defer fw.close()

	fail := func(want time.Duration) {
		t.Helper()
		select {
		case ln.accepts <- acceptResult{err: errors.New("accept: too many open files")}:
		case <-ctx.Done():
			t.Fatal("the forward does not accept")
		}
		call := trap.MustWait(ctx)
		if call.Duration != want {
			t.Fatalf("waits %v after a failed Accept, want %v", call.Duration, want)
		}
		call.MustRelease(ctx)
		clk.Advance(want).MustWait(ctx)
	}
	ms := time.Millisecond
	for _, d := range []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms, time.Second, time.Second} {
		fail(d)
	}
	// A connection (its relay fails at once: nothing listens on port 1).
	c, peer := net.Pipe()
	defer peer.Close()
	select {
	case ln.accepts <- acceptResult{conn: c}:
	case <-ctx.Done():
		t.Fatal("the forward does not accept")
	}
	fail(5 * ms)
}
