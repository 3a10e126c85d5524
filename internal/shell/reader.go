package shell

import (
	"errors"
	"io"
	"time"

	"github.com/envd-dev/envd/internal/outbuf"
	"github.com/envd-dev/envd/internal/process"
)

// EventKind says what an Event is.
type EventKind uint8

// Event kinds, in the order a command's stream has them.
const (
	// EventQueued: the command waits behind Ahead others of its session.
	EventQueued EventKind = iota + 1
	// EventStarted: the command began (Seq, Time).
	EventStarted
	// EventOutput: Data of kind Stream (process.Stdout, process.Stderr or
	// process.PTY).
	EventOutput
	// EventEnd: the command ended (End); Lost bytes of its output were
	// dropped from the log before this reader read them.
	EventEnd
)

// Event is one event of a command's stream.
type Event struct {
	Kind      EventKind
	CommandID string
	Ahead     int       // EventQueued
	Seq       uint64    // EventStarted
	Time      time.Time // EventStarted
	Stream    uint8     // EventOutput
	Data      []byte    // EventOutput: valid until the next Next
	End       End       // EventEnd
	Lost      int64     // EventEnd
}

// Reader reads one command's events: what is retained of its output from
// its start, then live, then its end. The shell's output waits for it (up
// to the process manager's reader grace) rather than evict what it has not
// read. One goroutine uses it; Close it when done.
type Reader struct {
	s  *Session
	c  *Command
	rd *process.Reader

	announce bool // send queued, if the command waits
	queued   bool // sent queued
	started  bool // sent started
	ended    bool // sent the end
	eof      bool // rd read the log's end

	pending []outbuf.Record // read, not yet classified: copies
	emitted int64
	// ready is the session's change channel as of the last Next: closed
	// by any change after Next looked, so none is missed.
	ready <-chan struct{}
}

// newReaderLocked is a reader of c, following the shell's output from
// now: it is registered before c can print.
func (s *Session) newReaderLocked(c *Command) *Reader {
	return &Reader{s: s, c: c, rd: s.proc.Follow(), announce: true}
}

// Command is the command read.
func (r *Reader) Command() *Command { return r.c }

// Ready returns a channel that is closed when Next may have more: when
// the session changed since the last Next looked.
func (r *Reader) Ready() <-chan struct{} {
	if r.ready != nil {
		return r.ready
	}
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return r.s.changedChanLocked()
}

// Close stops the shell's output from waiting for r.
func (r *Reader) Close() { r.rd.Close() }

// Next returns the events there are now, without waiting; done once it
// returned the end. Output events hold data valid until the next call.
func (r *Reader) Next() (evs []Event, done bool) {
	s, c := r.s, r.c
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.ended {
		return nil, true
	}
	r.ready = s.changedChanLocked()
	if c.state == queued {
		// Queued only behind other commands: a command waiting only for
		// the shell to be done with an interrupt starts in a moment.
		if ahead := s.aheadLocked(c); r.announce && !r.queued && ahead > 0 {
			r.queued = true
			evs = append(evs, Event{Kind: EventQueued, CommandID: c.id, Ahead: ahead})
		}
		// Keep reading, or the shell's output would wait for this
		// reader: what the demux has read is no concern of c's yet.
		evs = r.pumpLocked(evs)
		return evs, false
	}
	if !r.started && !c.startedAt.IsZero() {
		r.started = true
		evs = append(evs, Event{Kind: EventStarted, CommandID: c.id, Seq: c.seq, Time: c.startedAt})
	}
	if !c.startedAt.IsZero() {
		evs = r.pumpLocked(evs)
	}
	if c.state == ended && r.passedLocked() {
		r.ended = true
		e := Event{Kind: EventEnd, CommandID: c.id, End: c.end}
		if !c.startedAt.IsZero() {
			e.Lost = max(c.totalLocked()-r.emitted, 0)
		}
		evs = append(evs, e)
		return evs, true
	}
	return evs, false
}

// passedLocked tells whether r has passed on all of the ended command's
// output that it will ever see.
func (r *Reader) passedLocked() bool {
	c := r.c
	if c.startedAt.IsZero() {
		return true
	}
	if len(r.pending) > 0 {
		return false
	}
	return r.eof || r.rd.Offset() >= c.lastOffLocked()
}

// pumpLocked classifies what is pending; then, while nothing is and it
// has passed nothing on, it reads the log and classifies that: output
// events for c's bytes (their data is the log's: it stops reading once it
// has some), pending copies of what the demux has not classified yet. It
// appends to evs.
func (r *Reader) pumpLocked(evs []Event) []Event {
	if len(r.pending) > 0 {
		pend := r.pending
		r.pending = nil
		for _, rec := range pend {
			evs = r.classifyLocked(rec, evs)
		}
		if len(r.pending) > 0 {
			return evs // the demux has not caught up: wait for it
		}
	}
	for sent := r.emitted; r.emitted == sent && !r.eof && !(r.c.state == ended && r.passedLocked()); {
		recs, err := r.rd.Read()
		var lost *outbuf.LostError
		switch {
		case errors.As(err, &lost):
			continue // counted at the end: c's bytes not passed on
		case errors.Is(err, io.EOF):
			r.eof = true
		}
		if len(recs) == 0 {
			break
		}
		for _, rec := range recs {
			evs = r.classifyLocked(rec, evs)
		}
		if len(r.pending) > 0 {
			break
		}
	}
	return evs
}

// classifyLocked passes on the bytes of rec that are c's, drops those that
// are not, and keeps a copy of those not classified yet.
func (r *Reader) classifyLocked(rec outbuf.Record, evs []Event) []Event {
	s, c := r.s, r.c
	k, o, end := rec.Kind, rec.Off, rec.Off+int64(len(rec.Data))
	if !s.relevant(k) {
		return evs
	}
	keep := func(from int64) {
		if from < end {
			r.pending = append(r.pending, outbuf.Record{Off: from, Kind: k, Data: append([]byte(nil), rec.Data[from-o:]...)})
		}
	}
	if c.state == queued {
		// Bytes the demux has read belong to the command before; the
		// rest may be c's once it starts.
		keep(max(o, s.frontier))
		return evs
	}
	lo := max(o, c.startOff)
	if lo >= end {
		return evs
	}
	hi := min(end, max(lo, c.limitLocked(k)))
	if hi > lo {
		evs = append(evs, Event{Kind: EventOutput, CommandID: c.id, Stream: k, Data: rec.Data[lo-o : hi-o : hi-o]})
		r.emitted += hi - lo
	}
	if !c.found[k] {
		keep(hi)
	}
	return evs
}
