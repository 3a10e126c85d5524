package interpreter

import (
	"errors"
	"io"

	"github.com/envd-dev/envd/internal/outbuf"
)

// Flow control between an execution and the readers that follow it is
// outbuf's paced log (internal/outbuf/pace.go), as for process output: the
// runner stores events with WritePaced, so before storing an event that
// would leave a following Reader more than half the log behind, it waits
// for it to read on; a Reader that reads nothing for Options.ReaderGrace
// while the runner waits for it is left behind, and its next Read reports
// the loss. So a client streaming a 100 MB print gets all of it while the
// log (and envd's memory) stays bounded, and a stuck client costs the
// execution at most ReaderGrace, once.

// Reader follows an execution's events from its first one. It is meant to
// be used by one goroutine. Close it when done.
type Reader struct {
	r *outbuf.Reader
}

// Follow returns a Reader of the execution's events from the oldest one
// still stored. The execution paces itself to it (see above).
func (x *Execution) Follow() *Reader {
	return &Reader{r: x.log.Follow(outbuf.Oldest)}
}

// Read returns, without blocking, the next events (about 256 KiB of them
// at most): nil when nothing is new, io.EOF after the end event was
// returned. A reader that was left behind gets an EventLost first.
func (r *Reader) Read() ([]Event, error) {
	var out []Event
	recs, err := r.r.Read()
	if lost, ok := errors.AsType[*outbuf.LostError](err); ok {
		out = append(out, Event{Kind: EventLost, Lost: lost.Lost()})
		recs, err = r.r.Read()
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return out, err
	}
	if errors.Is(err, io.EOF) && len(out) == 0 {
		return nil, io.EOF
	}
	for _, rec := range recs {
		if ev, ok := decodeEvent(rec.Data); ok {
			out = append(out, ev)
		}
		// else: the one record the log cut at its start, after a loss.
	}
	return out, nil
}

// Wait returns a channel that is closed when Read has something new.
func (r *Reader) Wait() <-chan struct{} { return r.r.Wait() }

// Close stops the execution from waiting for r.
func (r *Reader) Close() { r.r.Close() }
