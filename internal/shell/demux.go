package shell

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/envd-dev/envd/internal/outbuf"
	"github.com/envd-dev/envd/internal/process"
)

// The demux reads the shell's output log, as a Reader the shell's output
// waits for (process.Reader: it never falls behind, since it only scans),
// and finds in it where each command's output ends: its marker, anywhere in
// the byte stream (a command's last line need not end with a newline).
// What may be the start of a marker is held back (held), never more than a
// marker's length, until the bytes after it tell. The readers of a command
// (reader.go) read the same log and pass on what the demux has classified
// as the command's: its output is in the log only once, and a command's
// Connect replays it from there.
//
// Offsets are the log's: every byte of the shell's output, all kinds, has
// one. A command's output of kind k is the bytes of kind k from startOff
// (the demux's position when envd sent its line) up to its marker of kind
// k. Bytes of a kind after its marker and before the next command's line
// (a background job's) are no command's; so are a marker's own bytes, and
// a second copy of a marker (fb after an interrupted end).

// demux runs until the shell's output ends (or a handover parks it).
func (s *Session) demux(rd *process.Reader) {
	defer close(s.demuxDone)
	defer rd.Close()
	for {
		recs, err := rd.Read()
		if len(recs) > 0 {
			s.mu.Lock()
			for _, r := range recs {
				s.scanLocked(r)
			}
			s.changedLocked()
			s.mu.Unlock()
			continue
		}
		switch {
		case err == nil:
			select {
			case <-rd.Wait():
			case <-s.demuxStop:
				return
			}
		case errors.Is(err, io.EOF):
			s.mu.Lock()
			s.outputEndedLocked()
			s.mu.Unlock()
			<-s.proc.Done()
			s.shellEnded()
			return
		default:
			// Cannot happen: the log waits for this reader, which only
			// scans. Without the lost bytes the commands' ends cannot be
			// told: the session cannot go on.
			s.breakSession(fmt.Sprintf("envd lost track of the shell's output (%v): the session was ended", err))
		}
	}
}

// scanLocked classifies the record r.
func (s *Session) scanLocked(r outbuf.Record) {
	end := r.Off + int64(len(r.Data))
	if end <= s.frontier {
		return // scanned before a live upgrade
	}
	// The frontier moves first: a command that this record ends starts
	// the next, whose output begins after it.
	s.frontier = end
	c := s.activeLocked()
	if c == nil || !s.relevant(r.Kind) || c.found[r.Kind] {
		return
	}
	k, d, m := r.Kind, r.Data, marker(c.nonce)
	if h := len(c.held[k].data); h > 0 {
		n := min(markerLen-h, len(d))
		if bytes.Equal(d[:n], m[h:h+n]) {
			if h+n < markerLen {
				c.held[k].data = append(c.held[k].data, d[:n]...)
				return
			}
			s.markerLocked(c, k, c.held[k].off)
			return
		}
		c.bytes[k] += int64(h) // not a marker after all: output
		c.held[k] = held{}
	}
	if i := bytes.Index(d, m); i >= 0 {
		c.bytes[k] += int64(i)
		s.markerLocked(c, k, r.Off+int64(i))
		return
	}
	p := prefixAtEnd(d, m)
	c.bytes[k] += int64(p)
	if p < len(d) {
		c.held[k] = held{off: r.Off + int64(p), data: append([]byte(nil), d[p:]...)}
	}
}

// prefixAtEnd is where the longest proper prefix of m that ends d begins,
// or len(d). m's first byte (ESC) is in it once: a prefix can only begin at
// an ESC of d.
func prefixAtEnd(d, m []byte) int {
	for p := max(0, len(d)-(len(m)-1)); p < len(d); p++ {
		if d[p] == m[0] && bytes.HasPrefix(m, d[p:]) {
			return p
		}
	}
	return len(d)
}

// markerLocked notes c's marker of kind k, beginning at off.
func (s *Session) markerLocked(c *Command, k uint8, off int64) {
	c.found[k], c.endOff[k], c.held[k] = true, off, held{}
	s.tryEndLocked(c)
}

// outputEndedLocked is the end of the shell's output: what the active
// command held is its output, and its output ends here.
func (s *Session) outputEndedLocked() {
	s.outEOF = true
	if c := s.activeLocked(); c != nil {
		for _, k := range s.kinds() {
			if !c.found[k] {
				c.bytes[k] += int64(len(c.held[k].data))
				c.found[k], c.endOff[k], c.held[k] = true, s.frontier, held{}
			}
		}
	}
	s.changedLocked()
}

// limitLocked is the offset below which c's bytes of kind k are all
// classified: its marker, or the demux's position (less what it holds).
func (c *Command) limitLocked(k uint8) int64 {
	if c.found[k] {
		return c.endOff[k]
	}
	if len(c.held[k].data) > 0 {
		return c.held[k].off
	}
	return c.s.frontier
}
