package process

import (
	"time"

	"github.com/envd-dev/envd/internal/outbuf"
)

// Flow control between a process's output and the readers that follow it.
//
// The drain goroutines never wait long for a reader, but they do pace
// themselves to the readers that keep up: before appending a chunk that
// would leave a following Reader more than half the log behind, a drain
// waits for it to read on. A Reader that reads nothing for ReaderGrace while
// a drain waits for it is left behind for good: the drains stop waiting for
// it, the log evicts what it did not read, and its next Read reports the
// loss. Plain cursors (Process.Output) are never waited for.
//
// Without this, a client reading as fast as the network allows falls out of
// the log within milliseconds of a program that prints faster than that
// (`cat big.log`, `head -c 1G /dev/zero`): it would get data_loss where
// upstream's fan-out just throttles the program to its readers. A stuck
// client still costs the program at most ReaderGrace, once.

// readBatch is the most one Reader.Read returns (a larger single record
// still comes whole): each Read counts as progress, so a reader that sends
// what it read at a few hundred KiB/s is never taken for a stuck one.
const readBatch = 256 << 10

// ready is a closed channel, for a Wait with something pending.
var ready = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Reader follows a process's output from the oldest retained byte, like
// Output's cursor, but the process waits for it (up to ReaderGrace) rather
// than evict what it has not read. Close it when done. A Reader is meant to
// be used by one goroutine.
type Reader struct {
	p       *Process
	cur     *outbuf.Cursor
	pending []outbuf.Record // read from cur, not yet returned

	// stalled is when a drain first waited for it since it last read;
	// zero when no drain waits for it. Guarded by p.flowMu.
	stalled time.Time
	seen    uint64 // guarded by p.flowMu; p.chunks before its last cur.Read
}

// Follow returns a Reader of the process's output.
func (p *Process) Follow() *Reader {
	r := &Reader{p: p, cur: p.log.Cursor(outbuf.Oldest)}
	p.flowMu.Lock()
	p.readers[r] = struct{}{}
	p.flowMu.Unlock()
	return r
}

// Read returns, without blocking, the next records (at most about
// readBatch bytes), nil when nothing is new, io.EOF after the last byte of
// an ended process, or a *outbuf.LostError when the reader was left behind.
// Records are shared: do not modify their Data.
func (r *Reader) Read() ([]outbuf.Record, error) {
	fromCursor := len(r.pending) == 0
	var seen uint64
	if fromCursor {
		seen = r.p.chunks.Load() // before the read: overcounts what is unread, never under
		recs, err := r.cur.Read()
		if err != nil || len(recs) == 0 {
			return nil, err
		}
		r.pending = recs
	}
	n, size := 0, 0
	for n < len(r.pending) && (n == 0 || size+len(r.pending[n].Data) <= readBatch) {
		size += len(r.pending[n].Data)
		n++
	}
	out := r.pending[:n:n]
	r.pending = r.pending[n:]
	if len(r.pending) == 0 {
		r.pending = nil
	}
	r.p.progress(r, fromCursor, seen)
	return out, nil
}

// Wait returns a channel that is closed when Read has something new.
func (r *Reader) Wait() <-chan struct{} {
	if len(r.pending) > 0 {
		return ready
	}
	return r.cur.Wait()
}

// Close stops the process from waiting for r.
func (r *Reader) Close() {
	p := r.p
	p.flowMu.Lock()
	delete(p.readers, r)
	p.wakeDrainsLocked()
	p.flowMu.Unlock()
}

func (p *Process) progress(r *Reader, fromCursor bool, seen uint64) {
	p.flowMu.Lock()
	r.stalled = time.Time{}
	if fromCursor {
		r.seen = seen
	}
	p.wakeDrainsLocked()
	p.flowMu.Unlock()
}

func (p *Process) wakeDrainsLocked() {
	if p.flowWake != nil {
		close(p.flowWake)
		p.flowWake = nil
	}
}

// holdBack returns when appending n more bytes leaves every following
// Reader less than half the log behind, or once the ones that are not have
// read nothing for ReaderGrace (they are then left behind), or when the
// process was killed and its output is no longer waited for.
func (p *Process) holdBack(n int) {
	p.flowMu.Lock()
	defer p.flowMu.Unlock()
	var timer *time.Timer
	for len(p.readers) > 0 {
		end, chunks := p.log.End(), p.chunks.Load()
		wait := time.Duration(-1)
		for r := range p.readers {
			unread := end - r.cur.Offset()
			if unread <= 0 {
				continue
			}
			// Half the log in bytes, or half its records (outbuf keeps at
			// most max(capacity/64, 64) of them, for tiny writes).
			if unread+int64(n) <= int64(p.logSize/2) && chunks-r.seen < uint64(max(p.logSize/64, 64)/2) {
				continue
			}
			if r.stalled.IsZero() {
				r.stalled = time.Now()
			}
			idle := time.Since(r.stalled)
			if idle >= p.grace {
				delete(p.readers, r) // left behind: its next Read reports the loss
				continue
			}
			if wait < 0 || p.grace-idle < wait {
				wait = p.grace - idle
			}
		}
		if wait < 0 {
			break
		}
		if p.flowWake == nil {
			p.flowWake = make(chan struct{})
		}
		wake := p.flowWake
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		p.flowMu.Unlock()
		select {
		case <-wake:
		case <-timer.C:
		case <-p.hurry:
			p.flowMu.Lock()
			return
		}
		p.flowMu.Lock()
	}
}
