package outbuf

// Buffer reuse: a log made with [WithBufferReuse] hands the buffers of
// evicted records back to its writer ([Log.Buffer]) once no reader can
// still hold them, rather than leave them to the garbage collector.
//
// A drain of bulk output hands a full buffer to the log for every read
// (WriteOwned) and reads on into a new one. Fresh memory for each read
// costs more than the copy it saves: the kernel faults the new pages in,
// and the collector runs often and returns pages to the system, to fault
// them in again. Streaming 1 GiB of output to a Go client over HTTP/1.1
// (BenchmarkStreamThroughput), taking the buffer and reusing it cut envd's
// cost over a bare relay from 1.17-1.29 to 1.00-1.14.
//
// The rule that makes it safe: records a [Reader] returns are valid until
// its next Read or its Close. Each open Reader has a low-water mark, the
// offset of the oldest byte it may still use (the first record of its last
// Read, or its position); an evicted buffer is reused once every open
// Reader's mark is past its end. A plain [Cursor] and [Log.Snapshot] on
// such a log return copies, since nothing says when their callers are
// done. A Reader that never reads again holds back reuse, not memory:
// buffers waiting for readers are bounded (maxHeldBytes), and past that the
// oldest are left to the collector.

// maxFreeBuffers bounds the buffers kept for the writer: bulk output needs
// about one at a time.
const maxFreeBuffers = 4

// WithBufferReuse makes the log reuse the buffers of evicted WriteOwned
// records (see [Log.Buffer]). Readers of such a log must not use the
// records of a Read after their next Read or Close.
func WithBufferReuse() Option {
	return func(l *Log) {
		l.reuse = &reuse{readers: map[*Reader]struct{}{}}
	}
}

// reuse is a log's buffer reuse state, all guarded by the log's mu.
type reuse struct {
	// whole[i] is the buffer record l.recs[i] was written in by WriteOwned
	// (nil for a copied record); its Data may be a suffix of it.
	whole     [][]byte
	held      []heldBuf // evicted buffers readers may still use, oldest first
	heldBytes int
	free      [][]byte             // buffers ready for Buffer
	readers   map[*Reader]struct{} // the open readers
}

// heldBuf is an evicted buffer whose last byte had offset end-1.
type heldBuf struct {
	end int64
	buf []byte
}

// Buffer returns a buffer of length n for a WriteOwned: a reused one when
// the log has one of the size, else a new one.
func (l *Log) Buffer(n int) []byte {
	l.mu.Lock()
	if u := l.reuse; u != nil {
		for i := len(u.free) - 1; i >= 0; i-- {
			if b := u.free[i]; cap(b) == n {
				u.free = append(u.free[:i], u.free[i+1:]...)
				l.mu.Unlock()
				return b[:n]
			}
		}
	}
	l.mu.Unlock()
	return make([]byte, n)
}

// maxHeldBytes bounds the evicted buffers kept for readers that lag.
func (l *Log) maxHeldBytes() int { return l.capacity }

// evictedLocked notes that record i of l.recs is gone from the log.
func (l *Log) evictedLocked(i int, end int64) {
	u := l.reuse
	if u == nil {
		return
	}
	b := u.whole[i]
	u.whole[i] = nil
	if b == nil {
		return
	}
	u.held = append(u.held, heldBuf{end: end, buf: b})
	u.heldBytes += cap(b)
	for u.heldBytes > l.maxHeldBytes() {
		u.heldBytes -= cap(u.held[0].buf)
		u.held[0] = heldBuf{}
		u.held = u.held[1:]
	}
	l.releaseLocked()
}

// releaseLocked moves the held buffers that no open reader can use any
// more to the free list.
func (l *Log) releaseLocked() {
	u := l.reuse
	if u == nil || len(u.held) == 0 {
		return
	}
	mark := l.end
	for r := range u.readers {
		mark = min(mark, r.mark)
	}
	n := 0
	for n < len(u.held) && u.held[n].end <= mark {
		h := u.held[n]
		u.heldBytes -= cap(h.buf)
		u.keepFree(h.buf[:cap(h.buf)])
		u.held[n] = heldBuf{}
		n++
	}
	u.held = u.held[n:]
	if len(u.held) == 0 {
		u.held = nil // let the backing array go
	}
}

// keepFree adds b to the free list. A full list keeps the larger buffers:
// a drain's buffer only grows, so the small ones it started with would
// otherwise take the places of the ones it needs.
func (u *reuse) keepFree(b []byte) {
	if len(u.free) < maxFreeBuffers {
		u.free = append(u.free, b)
		return
	}
	small := 0
	for i, f := range u.free {
		if cap(f) < cap(u.free[small]) {
			small = i
		}
	}
	if cap(u.free[small]) < cap(b) {
		u.free[small] = b
	}
}

// appendWholeLocked records the buffer of the record just appended.
func (l *Log) appendWholeLocked(b []byte) {
	if u := l.reuse; u != nil {
		u.whole = append(u.whole, b)
	}
}

// copyRecords returns recs with their Data copied, for readers a reusing
// log cannot track.
func copyRecords(recs []Record) []Record {
	for i, r := range recs {
		recs[i].Data = append([]byte(nil), r.Data...)
	}
	return recs
}
