// Package outbuf is a bounded, append-only, in-memory log of process output,
// with any number of independent readers.
//
// envd's rule for output is "never block the producer". A program that
// prints a lot must never stall because an RPC client is slow or gone,
// and a slow client must not hold back the others. So the model is:
//
//   - One goroutine per output source (a stdout pipe, a stderr pipe, a
//     pty, a Jupyter channel) always drains it and calls [Log.Write]. Write
//     copies the bytes, appends them, and returns; it never waits for a
//     reader.
//   - The [Log] keeps only the newest capacity bytes. Older bytes are
//     evicted, so memory stays bounded however much a program prints.
//   - Every byte has a fixed offset in the stream of everything ever
//     written. Offsets start at 0 and keep counting up after eviction.
//   - Each subscriber owns a [Cursor], which is just an offset into that
//     stream. It reads at its own pace with [Cursor.Read] and sleeps on
//     [Cursor.Wait] between reads.
//   - A cursor that falls behind the oldest retained byte gets a
//     [*LostError] that says exactly how many bytes it missed. The caller
//     decides whether to end the stream with that error or to continue
//     from the oldest byte still retained.
//   - A client that connects late, or reconnects, asks for a cursor at
//     [Oldest] (everything still retained, no loss error) or at the last
//     offset it saw (with a loss error if that offset was evicted). Then it
//     keeps reading live output from the same cursor. There is no separate
//     "replay" step, so nothing can be missed or duplicated between replay
//     and live output.
//   - [Log.Close] marks the end of the stream. Data stays readable after
//     Close, and a cursor that has read everything gets io.EOF.
//   - A writer may pace itself to the readers that keep up, rather than
//     evict what they have not read: see [Log.Follow] and [Log.WritePaced]
//     (pace.go). A paced writer still never waits long for a reader that
//     does not read.
//
// Records are never modified while in the log, and readers get shared
// slices (no copying on read), so a reader and the writer can run
// concurrently without data races. A log made [WithBufferReuse] gives the
// buffers of evicted records back to its writer once its readers are done
// with them (reuse.go): there, a Reader's records are valid until its next
// Read.
//
// A typical subscriber loop:
//
//	c := log.Cursor(outbuf.Oldest)
//	for {
//		recs, err := c.Read()
//		if err != nil {
//			return err // io.EOF at the end; *LostError if too slow
//		}
//		for _, r := range recs {
//			send(r) // must not modify r.Data
//		}
//		if len(recs) == 0 {
//			select {
//			case <-c.Wait():
//			case <-ctx.Done():
//				return ctx.Err()
//			}
//		}
//	}
package outbuf

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/coder/quartz"
)

// Oldest, passed to [Log.Cursor], positions the cursor at the oldest byte
// still retained. Unlike an explicit offset that has been evicted, it never
// produces a [*LostError].
const Oldest int64 = -1

// recordCost limits how many records a log holds: at most capacity/recordCost
// of them (but never fewer than minRecords). Each record costs a header
// (about 40 bytes) plus a heap allocation, so without a limit a program that
// writes one byte at a time would make a 4 MiB log hold 4 million records and
// use hundreds of MiB. With the limit, tiny writes retain fewer bytes of
// history instead of using more memory.
const (
	recordCost = 64
	minRecords = 64
)

// Record is one chunk written to the log.
//
// Off is the byte offset of Data[0] in the whole stream of all records ever
// written (the sum of len(Data) of all earlier records). Kind is an opaque
// tag chosen by the writer (for example stdout=1, stderr=2, pty=3).
//
// Records returned to readers are immutable and shared: readers must not
// modify Data. (Appending to Data is safe: its capacity is capped at its
// length, so append copies.)
type Record struct {
	Off  int64
	Kind uint8
	Data []byte
}

// Log is a bounded log of output records. All methods are safe for
// concurrent use. The zero value is not usable; call [New].
type Log struct {
	capacity   int // max retained bytes of Data
	maxRecords int // max retained records; see recordCost

	mu sync.Mutex
	// recs[head:] are the retained records, contiguous in offset: the first
	// starts at start and the last ends at end. Evicting advances head
	// instead of shifting the slice; the dead prefix is compacted away once
	// it is at least half of the slice, which keeps eviction amortized O(1).
	recs   []Record
	head   int
	start  int64 // offset of the oldest retained byte (== end when empty)
	end    int64 // offset after the newest byte written
	closed bool
	// notify is closed, and set to nil, on every Write or Close, waking all
	// goroutines blocked in Wait. It is created lazily by Wait, so writes
	// that nobody waits for do not allocate a channel.
	notify chan struct{}

	// Pacing (pace.go).
	grace     time.Duration
	clock     quartz.Clock
	followers map[*Reader]struct{} // guarded by mu; the readers paced writes wait for
	// room is closed, and set to nil, when a follower reads or leaves or
	// the log closes, waking the paced writers waiting for them. Guarded
	// by mu; created lazily by a writer that waits.
	room chan struct{}

	reuse *reuse // nil unless WithBufferReuse (reuse.go)

	// wholeRecords: a record larger than the capacity is kept whole while
	// it is the newest (WithWholeRecords).
	wholeRecords bool
}

// WithWholeRecords makes the log keep a record larger than its capacity
// whole, rather than only its last capacity bytes, for as long as it is
// the newest record: a log of records that mean nothing cut (encoded
// events) can then carry one bigger than itself to a Reader that keeps up
// (a paced write waits until its followers have read everything before
// it). The next write cuts it to what fits, copying that part, so the log
// holds at most its capacity plus its newest record.
func WithWholeRecords() Option {
	return func(l *Log) { l.wholeRecords = true }
}

// New returns a log that retains at most capacity bytes of Data, the newest
// ones. It panics if capacity < 1. The options matter only to paced
// writes (see [Log.WritePaced]).
//
// The log may retain fewer bytes when writes are very small: it also keeps
// at most max(capacity/64, 64) records, so per-record overhead cannot
// multiply memory use. The memory held for Data is at most capacity plus the
// evicted part of one partially evicted record, so under 2*capacity.
func New(capacity int, opts ...Option) *Log {
	if capacity < 1 {
		panic(fmt.Sprintf("outbuf: capacity %d < 1", capacity))
	}
	l := &Log{
		capacity:   capacity,
		maxRecords: max(capacity/recordCost, minRecords),
		grace:      DefaultReaderGrace,
		clock:      quartz.NewReal(),
		followers:  map[*Reader]struct{}{},
	}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Write appends a copy of p as one record tagged with kind. Callers may
// reuse p after Write returns. Write never blocks on readers.
//
// Writing an empty p is a no-op. If p is larger than the capacity, only its
// last capacity bytes are kept, but offsets still advance by len(p), so
// readers see the loss. Writing after Close is a no-op.
//
// Several writers may share a log (for example stdout and stderr reader
// goroutines); their records are totally ordered.
func (l *Log) Write(kind uint8, p []byte) {
	if len(p) == 0 {
		return
	}
	n := int64(len(p))
	if len(p) > l.capacity && !l.wholeRecords {
		p = p[len(p)-l.capacity:]
	}
	// Allocate and copy outside the lock so readers and other writers are
	// not held up by a large copy.
	data := make([]byte, len(p))
	copy(data, p)
	l.append(kind, n, data, nil)
}

// WriteOwned appends p as Write does, without copying it: the log takes p,
// and the caller must not modify it afterwards. A drain that fills a
// buffer with a read hands the buffer over and reads the next chunk into
// a new one: a copy fewer for every byte of bulk output. p's spare
// capacity is held with it, so hand over only buffers that are about
// full; one larger than the capacity is cut to its last capacity bytes by
// a copy, as Write does.
func (l *Log) WriteOwned(kind uint8, p []byte) {
	l.WritePart(kind, p[:len(p):len(p)], p[:cap(p)])
}

// WritePart appends p, a part of a buffer the caller fills piece by piece,
// without copying it: the caller must not modify p afterwards. A drain
// reads into the rest of its buffer after each read and hands over each
// piece as it comes, so output that arrives in reads of any size is never
// copied. whole is nil, or the buffer of which p is the last part: the log
// then takes the buffer, and reuses it (see [Log.Buffer]) once p and the
// parts before it are gone. p larger than the capacity is cut by a copy,
// as Write does, and whole is left to the collector.
func (l *Log) WritePart(kind uint8, p, whole []byte) {
	if len(p) > l.capacity && !l.wholeRecords {
		l.Write(kind, p)
		return
	}
	if len(p) == 0 {
		return
	}
	l.append(kind, int64(len(p)), p[:len(p):len(p)], whole)
}

// append adds data as the record of the last len(data) of n bytes written;
// whole is the buffer it came in, if the log owns it.
func (l *Log) append(kind uint8, n int64, data, whole []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	// For an oversized p, the record starts where its kept suffix starts;
	// everything before it is evicted below because it is more than
	// capacity bytes behind the new end.
	l.recs = append(l.recs, Record{Off: l.end + n - int64(len(data)), Kind: kind, Data: data})
	l.appendWholeLocked(whole)
	l.end += n
	l.evict()
	l.wake()
}

// evict drops the oldest records until at most capacity bytes and
// maxRecords records remain. The first remaining record may be cut: its
// header is re-sliced so that it starts at the new start offset. Its Data
// bytes are not touched, so readers holding the old record are unaffected.
func (l *Log) evict() {
	limit := l.end - int64(l.capacity) // bytes before limit must go
	if last := len(l.recs) - 1; l.wholeRecords && last >= l.head && l.recs[last].Off < limit {
		limit = l.recs[last].Off // the newest record stays whole
	}
	for l.head < len(l.recs) {
		r := &l.recs[l.head]
		if r.Off+int64(len(r.Data)) <= limit || len(l.recs)-l.head > l.maxRecords {
			l.evictedLocked(l.head, r.Off+int64(len(r.Data)))
			*r = Record{} // drop the reference so the GC can free Data
			l.head++
			continue
		}
		if r.Off < limit {
			whole := len(r.Data) > l.capacity // only with WithWholeRecords
			r.Data = r.Data[limit-r.Off:]
			if whole {
				// Hold only the part that fits, not the whole buffer.
				r.Data = append([]byte(nil), r.Data...)
			}
			r.Off = limit
		}
		break
	}
	if l.head == len(l.recs) {
		l.start = l.end
	} else {
		l.start = l.recs[l.head].Off
	}
	if l.head > 0 && l.head >= len(l.recs)/2 {
		n := copy(l.recs, l.recs[l.head:])
		clear(l.recs[n:])
		l.recs = l.recs[:n]
		if u := l.reuse; u != nil {
			copy(u.whole, u.whole[l.head:])
			clear(u.whole[n:])
			u.whole = u.whole[:n]
		}
		l.head = 0
	}
}

// wake wakes every goroutine waiting on the current notify channel.
// Callers must hold l.mu.
func (l *Log) wake() {
	if l.notify != nil {
		close(l.notify)
		l.notify = nil
	}
}

// Close marks the end of the stream: cursors that have read everything get
// io.EOF. Retained data stays readable. Close is idempotent.
func (l *Log) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		l.wake()
		l.wakeWritersLocked()
	}
}

// Start returns the offset of the oldest byte still retained.
func (l *Log) Start() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.start
}

// End returns the offset after the newest byte written. It counts every
// byte ever written, including evicted and truncated ones.
func (l *Log) End() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.end
}

// Cursor returns a reader positioned at offset from.
//
//   - Oldest (or any negative offset) starts at the oldest byte still
//     retained, so it reports no loss for what was evicted before. Use it
//     to replay what is retained, then follow live output. (Like any
//     cursor, it does report bytes evicted after it was created and before
//     it read them.)
//   - l.End() starts at live output only.
//   - An offset that was already evicted makes the first Read return a
//     [*LostError] for the bytes from that offset up to Start. This is what
//     a reconnecting client wants: it resumes where it left off, or learns
//     exactly what it missed.
//   - An offset past End is clamped to End (such an offset cannot come from
//     this log, e.g. it was saved from an earlier daemon run).
func (l *Log) Cursor(from int64) *Cursor {
	l.mu.Lock()
	defer l.mu.Unlock()
	return &Cursor{log: l, off: l.clampLocked(from)}
}

// clampLocked maps a starting offset as [Log.Cursor] documents: negative
// means the oldest retained byte, and past End means End.
func (l *Log) clampLocked(from int64) int64 {
	switch {
	case from < 0:
		return l.start
	case from > l.end:
		return l.end
	}
	return from
}

// Cursor reads a [Log] from its own position, independently of other
// cursors and of the writers. Its methods are safe for concurrent use, but
// a cursor is meant to be used by one subscriber.
type Cursor struct {
	log *Log
	off int64 // guarded by log.mu
}

// closedChan is returned by Wait when something is already pending.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Read returns, without blocking, all records (or parts of records) from
// the cursor's position up to the current end, and advances the cursor.
// The first record may be a part of a record: it starts at the cursor's
// position, with Off adjusted accordingly. Returned Data is shared with the
// log and other readers and must not be modified.
//
// If the cursor's position has been evicted (the reader fell behind), Read
// returns a [*LostError] for the bytes from the cursor's position up to
// Start, and moves the cursor to Start. A caller that wants to continue
// calls Read again; one that wants to end the stream reports the error.
//
// When the log is closed and the cursor has read everything, Read returns
// (nil, io.EOF). When nothing is available yet, it returns (nil, nil).
//
// On a log made WithBufferReuse, the records are copies.
func (c *Cursor) Read() ([]Record, error) {
	c.log.mu.Lock()
	defer c.log.mu.Unlock()
	recs, err := c.readLocked()
	if c.log.reuse != nil {
		recs = copyRecords(recs)
	}
	return recs, err
}

func (c *Cursor) readLocked() ([]Record, error) {
	l := c.log
	if c.off < l.start {
		err := &LostError{From: c.off, To: l.start, Capacity: l.capacity}
		c.off = l.start
		return nil, err
	}
	if c.off == l.end {
		if l.closed {
			return nil, io.EOF
		}
		return nil, nil
	}
	live := l.recs[l.head:]
	i := l.firstLocked(c.off)
	out := make([]Record, len(live)-i)
	for j, r := range live[i:] {
		skip := max(c.off-r.Off, 0) // non-zero only for the first record
		// Cap capacity at length so a reader's append cannot write into
		// memory that belongs to the log.
		out[j] = Record{Off: r.Off + skip, Kind: r.Kind, Data: r.Data[skip:len(r.Data):len(r.Data)]}
	}
	c.off = l.end
	return out, nil
}

// firstLocked returns the index in l.recs[l.head:] of the first retained
// record that ends after off: the one that contains off when start <= off <
// end, because records are contiguous from start to end.
func (l *Log) firstLocked(off int64) int {
	live := l.recs[l.head:]
	return sort.Search(len(live), func(i int) bool {
		return live[i].Off+int64(len(live[i].Data)) > off
	})
}

// Wait returns a channel that is closed when Read would return something
// new: data, a loss, or io.EOF. If something is already pending, the
// channel is already closed. After Read has returned io.EOF, Wait stays
// ready, since Read keeps returning io.EOF. Use it in a select:
//
//	select {
//	case <-c.Wait():
//	case <-ticker.C:
//	case <-ctx.Done():
//	}
//
// Call Wait again after each wake-up; each channel fires only once.
func (c *Cursor) Wait() <-chan struct{} {
	c.log.mu.Lock()
	defer c.log.mu.Unlock()
	return c.waitLocked()
}

func (c *Cursor) waitLocked() <-chan struct{} {
	l := c.log
	// c.off < l.start implies c.off != l.end, so this also covers a loss.
	if c.off != l.end || l.closed {
		return closedChan
	}
	if l.notify == nil {
		l.notify = make(chan struct{})
	}
	return l.notify
}

// Offset returns the cursor's current position: the offset of the next
// byte Read will return.
func (c *Cursor) Offset() int64 {
	c.log.mu.Lock()
	defer c.log.mu.Unlock()
	return c.off
}

// LostError reports bytes a cursor missed because they were evicted before
// it read them. The lost bytes are the offsets [From, To).
type LostError struct {
	From, To int64
	// Capacity is the capacity of the log, for the message. Zero means
	// unknown.
	Capacity int
}

// Error describes the loss so that it can be shown to a user as is.
func (e *LostError) Error() string {
	buf := "the buffer"
	if e.Capacity > 0 {
		buf = "the " + formatSize(e.Capacity) + " buffer"
	}
	return fmt.Sprintf("output fell out of %s: %d bytes lost (offsets %d..%d); the reader was too slow",
		buf, e.Lost(), e.From, e.To)
}

// Lost returns the number of bytes lost.
func (e *LostError) Lost() int64 { return e.To - e.From }

// ErrLost is the kind of every *LostError (errors.Is), for callers that map
// error kinds to codes.
var ErrLost = errors.New("output lost")

// Is matches ErrLost.
func (e *LostError) Is(target error) bool { return target == ErrLost }

// formatSize writes n as "4 MiB", "64 KiB" or "1000-byte" (for use as an
// adjective before "buffer"), using the largest unit that divides n.
func formatSize(n int) string {
	switch {
	case n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d-byte", n)
}
