package jupyter

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// tailBuffer is an io.Writer that keeps only the last max bytes written. It
// holds the server's (and its kernels') stdout/stderr so that a crash can be
// logged with context, whatever the server prints over its lifetime.
type tailBuffer struct {
	mu      sync.Mutex
	buf     []byte // ring storage, len(buf) == max once full; guarded by mu
	start   int    // index of the oldest byte when full; guarded by mu
	full    bool   // guarded by mu
	max     int
	dropped int64 // bytes overwritten; guarded by mu
}

func newTailBuffer(max int) *tailBuffer {
	return &tailBuffer{max: max, buf: make([]byte, 0, min(max, 4096))}
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.max {
		t.dropped += int64(t.size() + len(p) - t.max)
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		t.start, t.full = 0, true
		return n, nil
	}
	if !t.full {
		if len(t.buf)+len(p) <= t.max {
			t.buf = append(t.buf, p...)
			return n, nil
		}
		// Grow to the full ring, then fall through to the wrapping copy.
		k := t.max - len(t.buf)
		t.buf = append(t.buf, p[:k]...)
		p = p[k:]
		t.full, t.start = true, 0
	}
	for len(p) > 0 {
		c := copy(t.buf[t.start:], p)
		p = p[c:]
		t.dropped += int64(c)
		t.start = (t.start + c) % t.max
	}
	return n, nil
}

func (t *tailBuffer) size() int { return len(t.buf) }

// String returns the retained bytes, oldest first.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.full {
		return string(t.buf)
	}
	return string(t.buf[t.start:]) + string(t.buf[:t.start])
}

// Lines returns the last n lines retained, oldest first, without their
// line breaks. A line cut by the ring's start is dropped, and so are empty
// trailing lines.
func (t *tailBuffer) Lines(n int) []string {
	lines := t.all()
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

// LinesFrom returns the retained lines from the first that holds mark,
// oldest first, as Lines does: at most n of them, the first n/2 and the
// last n-n/2 with a line saying how many were left out between. nil if no
// retained line holds mark.
func (t *tailBuffer) LinesFrom(mark string, n int) []string {
	lines := t.all()
	i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, mark) })
	if i < 0 || n <= 0 {
		return nil
	}
	lines = lines[i:]
	if len(lines) <= n {
		return lines
	}
	head := n / 2
	if head == 0 {
		return lines[len(lines)-n:]
	}
	tail := n - head - 1 // a line for the gap
	out := append([]string{}, lines[:head]...)
	out = append(out, fmt.Sprintf("[... %d lines ...]", len(lines)-head-tail))
	return append(out, lines[len(lines)-tail:]...)
}

// all returns the lines retained, as Lines does.
func (t *tailBuffer) all() []string {
	s := t.String()
	t.mu.Lock()
	cut := t.full
	t.mu.Unlock()
	if cut {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		} else {
			return nil
		}
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return nil
	}
	return lines
}
