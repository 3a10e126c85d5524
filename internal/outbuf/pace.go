package outbuf

import (
	"context"
	"time"

	"github.com/coder/quartz"
)

// Pacing: a writer that paces itself to the readers that keep up.
//
// Plain [Log.Write] never waits, so a client reading as fast as the network
// allows falls out of the log within milliseconds of a program that prints
// faster than that (`cat big.log`, a 100 MB print in a kernel): it would be
// told it lost data where upstream's fan-out just throttles the program to
// its readers. So a writer may call [Log.WritePaced] instead, and a reader
// that wants to be waited for uses [Log.Follow]:
//
//   - Before appending, a paced write waits while the append would leave a
//     following [Reader] more than half the log behind (in bytes, or in
//     records: the log also keeps at most max(capacity/64, 64) of them).
//   - A follower that reads nothing for the reader grace while a paced
//     write waits for it is left behind for good: writes stop waiting for
//     it, the log evicts what it did not read, and its next Read returns a
//     [*LostError] saying how much it missed. The grace counts from when a
//     write first waits for it, not from its last read: a reader that was
//     idle through a quiet spell is not punished for it.
//   - A stuck reader so costs the writer at most the grace, once. Plain
//     cursors ([Log.Cursor]) are never waited for.
//
// Memory stays bounded: the log holds at most its capacity, and a Reader at
// most what one Read of the log returned (see [Reader.Read]).

// DefaultReaderGrace is the reader grace of a log made without
// [WithReaderGrace].
const DefaultReaderGrace = 2 * time.Second

// readBatch is about the most one Reader.Read returns (a larger single
// record still comes whole): each Read counts as progress, so a reader that
// sends what it read at a few hundred KiB/s is never taken for a stuck one.
const readBatch = 256 << 10

// An Option configures a [Log].
type Option func(*Log)

// WithReaderGrace sets how long a paced write waits for a following Reader
// that reads nothing before it leaves it behind. Zero or negative: the
// default, [DefaultReaderGrace].
func WithReaderGrace(d time.Duration) Option {
	return func(l *Log) {
		if d > 0 {
			l.grace = d
		}
	}
}

// WithClock sets the clock the reader grace is measured with. Nil: the real
// clock. Tests pass a quartz.Mock; paced writes create their timers with the
// tags "outbuf" and "pace".
func WithClock(c quartz.Clock) Option {
	return func(l *Log) {
		if c != nil {
			l.clock = c
		}
	}
}

// Reader follows a log from its own position, like a [Cursor], but paced
// writes wait for it (see [Log.WritePaced]) rather than evict what it has
// not read. Close it when done. A Reader is meant to be used by one
// goroutine.
type Reader struct {
	cur     Cursor
	pending []Record // read from cur, not yet returned

	// stalled is when a paced write first waited for it since its last
	// read; zero when none waits for it. Guarded by cur.log.mu.
	stalled time.Time
	// mark is the offset of the oldest byte whose record it may still use
	// (buffer reuse, reuse.go); closed is set by Close. Guarded by
	// cur.log.mu.
	mark   int64
	closed bool
}

// Follow returns a Reader positioned at offset from, as [Log.Cursor] does,
// that paced writes wait for.
func (l *Log) Follow(from int64) *Reader {
	l.mu.Lock()
	defer l.mu.Unlock()
	off := l.clampLocked(from)
	r := &Reader{cur: Cursor{log: l, off: off}, mark: off}
	l.followers[r] = struct{}{}
	if l.reuse != nil {
		l.reuse.readers[r] = struct{}{}
	}
	return r
}

// Read returns, without blocking, the next records (at most about 256 KiB,
// or one larger record), as [Cursor.Read] does: nil when nothing is new,
// io.EOF after the last byte of a closed log, a [*LostError] (once, then
// the rest) when the reader was left behind. Records are shared: do not
// modify their Data. Every Read that returns something counts as progress
// for the reader grace.
//
// On a log made WithBufferReuse, the records are valid until the next Read
// or Close (after Close, Read returns copies).
func (r *Reader) Read() ([]Record, error) {
	l := r.cur.log
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(r.pending) == 0 {
		recs, err := r.cur.readLocked()
		if err != nil || len(recs) == 0 {
			r.markLocked(r.cur.off)
		}
		if err != nil {
			r.progressLocked()
			return nil, err
		}
		if len(recs) == 0 {
			return nil, nil
		}
		r.pending = recs
	}
	r.markLocked(r.pending[0].Off)
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
	r.progressLocked()
	if r.closed && l.reuse != nil {
		out = copyRecords(out)
	}
	return out, nil
}

// markLocked moves r's low-water mark to off, releasing the buffers it held.
func (r *Reader) markLocked(off int64) {
	if r.mark != off {
		r.mark = off
		r.cur.log.releaseLocked()
	}
}

// progressLocked records that r read: writers waiting for it look again.
func (r *Reader) progressLocked() {
	r.stalled = time.Time{}
	r.cur.log.wakeWritersLocked()
}

// Wait returns a channel that is closed when Read has something new: data,
// a loss, or io.EOF. Call it again after each wake-up.
func (r *Reader) Wait() <-chan struct{} {
	if len(r.pending) > 0 {
		return closedChan
	}
	return r.cur.Wait()
}

// Offset returns the offset of the next byte Read returns.
func (r *Reader) Offset() int64 {
	r.cur.log.mu.Lock()
	defer r.cur.log.mu.Unlock()
	if len(r.pending) > 0 {
		return r.pending[0].Off
	}
	return r.cur.off
}

// Close stops paced writes from waiting for r. It may still Read (on a log
// made WithBufferReuse, it must not use the records of earlier Reads).
func (r *Reader) Close() {
	l := r.cur.log
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.followers, r)
	r.closed = true
	if l.reuse != nil {
		// What it has yet to Read is no longer held for it.
		r.pending = copyRecords(r.pending)
		delete(l.reuse.readers, r)
		l.releaseLocked()
	}
	l.wakeWritersLocked()
}

// wakeWritersLocked wakes the paced writers waiting for a follower.
func (l *Log) wakeWritersLocked() {
	if l.room != nil {
		close(l.room)
		l.room = nil
	}
}

// WritePaced writes p as [Log.Write] does, but first waits while appending
// it would leave a following [Reader] more than half the log behind. It
// stops waiting for a follower once that follower has read nothing for the
// reader grace since the wait began (it is then left behind for good), and
// for all of them when the log is closed or ctx is done (a killed process,
// a daemon shutting down). So it blocks at most the reader grace for each
// follower that stops reading, and never for plain cursors.
//
// Several writers may pace on one log; they may each append once the
// followers have room, so keep each p well under half the capacity.
func (l *Log) WritePaced(ctx context.Context, kind uint8, p []byte) {
	l.pace(ctx, len(p))
	l.Write(kind, p)
}

// WritePacedPart paces as WritePaced does, then appends p as
// [Log.WritePart] does.
func (l *Log) WritePacedPart(ctx context.Context, kind uint8, p, whole []byte) {
	l.pace(ctx, len(p))
	l.WritePart(kind, p, whole)
}

// pace returns when n more bytes fit (see WritePaced). Clock calls happen
// outside l.mu, so that a test's trap on them cannot block readers.
func (l *Log) pace(ctx context.Context, n int) {
	var timer *quartz.Timer
	defer func() {
		if timer != nil {
			timer.Stop("outbuf", "pace")
		}
	}()
	for ctx.Err() == nil {
		now := l.clock.Now("outbuf", "pace")
		l.mu.Lock()
		wait, room := l.roomLocked(n, now)
		l.mu.Unlock()
		if wait < 0 {
			return
		}
		if timer == nil {
			timer = l.clock.NewTimer(wait, "outbuf", "pace")
		} else {
			timer.Reset(wait, "outbuf", "pace")
		}
		select {
		case <-room:
		case <-timer.C:
		case <-ctx.Done():
		}
	}
}

// roomLocked returns -1 when n more bytes leave every follower less than
// half the log behind, leaving behind the followers that have stalled for
// the grace. Otherwise it returns how long until the next of them has, and
// a channel closed when a follower reads or leaves.
func (l *Log) roomLocked(n int, now time.Time) (time.Duration, <-chan struct{}) {
	if l.closed {
		return -1, nil
	}
	wait := time.Duration(-1)
	for r := range l.followers {
		if !l.behindLocked(r, n) {
			continue
		}
		if r.stalled.IsZero() {
			r.stalled = now
		}
		left := l.grace - max(now.Sub(r.stalled), 0)
		if left <= 0 {
			delete(l.followers, r) // left behind: its next Read reports the loss
			continue
		}
		if wait < 0 || left < wait {
			wait = left
		}
	}
	if wait < 0 {
		return -1, nil
	}
	if l.room == nil {
		l.room = make(chan struct{})
	}
	return wait, l.room
}

// behindLocked reports whether appending n bytes as one record would leave
// r more than half the log behind, in bytes or in records. A reader with
// nothing unread is never behind, however large the record.
func (l *Log) behindLocked(r *Reader, n int) bool {
	unread := l.end - r.cur.off
	if unread <= 0 {
		return false
	}
	recs := len(l.recs) - l.head - l.firstLocked(r.cur.off)
	return unread+int64(n) > int64(l.capacity/2) || recs+1 > l.maxRecords/2
}

// Unfollowed waits until no Reader follows l any more (each was closed, or
// left behind as too slow), or ctx ends; it reports which. A daemon shutting
// down uses it to let streams deliver what the log ends with.
func (l *Log) Unfollowed(ctx context.Context) bool {
	for {
		l.mu.Lock()
		if len(l.followers) == 0 {
			l.mu.Unlock()
			return true
		}
		if l.room == nil {
			l.room = make(chan struct{})
		}
		wake := l.room // closed when a follower reads or leaves
		l.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return false
		}
	}
}
