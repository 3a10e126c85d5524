package interpreter

import (
	"errors"
	"io"
	"time"

	"github.com/envd-dev/envd/internal/outbuf"
)

// Flow control between an execution and the readers that follow it, as
// for process output (internal/process/flow.go): before storing an event
// that would leave a following Reader more than half the log behind, the
// execution waits for it to read on; a Reader that reads nothing for
// Options.ReaderGrace is left behind, and its next Read reports the loss.
// So a client streaming a 100 MB print gets all of it while the log (and
// envd's memory) stays bounded, and a stuck client costs the execution at
// most ReaderGrace, once.

// readBatch is about the most one Reader.Read returns.
const readBatch = 256 << 10

// Reader follows an execution's events from its first one. It is meant to
// be used by one goroutine. Close it when done.
type Reader struct {
	x       *Execution
	cur     *outbuf.Cursor
	pending []outbuf.Record // read from cur, not yet returned

	last time.Time // guarded by x.flowMu; when it last read
	seen uint64    // guarded by x.flowMu; x.records before its last cursor read
}

// Follow returns a Reader of the execution's events from the oldest one
// still stored. The execution paces itself to it (see above).
func (x *Execution) Follow() *Reader {
	r := &Reader{x: x, cur: x.log.Cursor(outbuf.Oldest), last: time.Now()}
	x.flowMu.Lock()
	x.readers[r] = struct{}{}
	x.flowMu.Unlock()
	return r
}

// Read returns, without blocking, the next events (about readBatch bytes
// at most): nil when nothing is new, io.EOF after the end event was
// returned. A reader that was left behind gets an EventLost first.
func (r *Reader) Read() ([]Event, error) {
	fromCursor := len(r.pending) == 0
	var seen uint64
	var out []Event
	if fromCursor {
		seen = r.x.records.Load() // before the read: overcounts what is unread, never under
		recs, err := r.cur.Read()
		if lost, ok := errors.AsType[*outbuf.LostError](err); ok {
			out = append(out, Event{Kind: EventLost, Lost: lost.Lost()})
			recs, err = r.cur.Read()
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return out, err
		}
		if errors.Is(err, io.EOF) && len(out) == 0 {
			return nil, io.EOF
		}
		r.pending = recs
	}
	n, size := 0, 0
	for n < len(r.pending) && (n == 0 || size+len(r.pending[n].Data) <= readBatch) {
		size += len(r.pending[n].Data)
		n++
	}
	for _, rec := range r.pending[:n] {
		if ev, ok := decodeEvent(rec.Data); ok {
			out = append(out, ev)
		}
		// else: the one record the log cut at its start, after a loss.
	}
	r.pending = r.pending[n:]
	if len(r.pending) == 0 {
		r.pending = nil
	}
	r.x.progress(r, fromCursor, seen)
	return out, nil
}

// Wait returns a channel that is closed when Read has something new.
func (r *Reader) Wait() <-chan struct{} {
	if len(r.pending) > 0 {
		return granted
	}
	return r.cur.Wait()
}

// Close stops the execution from waiting for r.
func (r *Reader) Close() {
	x := r.x
	x.flowMu.Lock()
	delete(x.readers, r)
	x.wakeLocked()
	x.flowMu.Unlock()
}

func (x *Execution) progress(r *Reader, fromCursor bool, seen uint64) {
	x.flowMu.Lock()
	r.last = time.Now()
	if fromCursor {
		r.seen = seen
	}
	x.wakeLocked()
	x.flowMu.Unlock()
}

func (x *Execution) wakeLocked() {
	if x.flowWake != nil {
		close(x.flowWake)
		x.flowWake = nil
	}
}

// holdBack returns when storing n more bytes leaves every following Reader
// less than half the log behind, or once those that are not have read
// nothing for ReaderGrace (they are then left behind), or at shutdown.
func (x *Execution) holdBack(n int) {
	grace := x.eng.opts.ReaderGrace
	maxRecs := uint64(max(x.logSize/64, 64) / 2) // outbuf keeps at most max(capacity/64, 64) records
	x.flowMu.Lock()
	defer x.flowMu.Unlock()
	var timer *time.Timer
	for len(x.readers) > 0 {
		end, recs := x.log.End(), x.records.Load()
		wait := time.Duration(-1)
		for r := range x.readers {
			unread := end - r.cur.Offset()
			if unread <= 0 {
				continue
			}
			if unread+int64(n) <= int64(x.logSize/2) && recs-r.seen < maxRecs {
				continue
			}
			idle := time.Since(r.last)
			if idle >= grace {
				delete(x.readers, r) // left behind: its next Read reports the loss
				continue
			}
			if wait < 0 || grace-idle < wait {
				wait = grace - idle
			}
		}
		if wait < 0 {
			break
		}
		if x.flowWake == nil {
			x.flowWake = make(chan struct{})
		}
		wake := x.flowWake
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		x.flowMu.Unlock()
		select {
		case <-wake:
		case <-timer.C:
		case <-x.eng.ctx.Done():
			x.flowMu.Lock()
			return
		}
		x.flowMu.Lock()
	}
}
