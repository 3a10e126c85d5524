package outbuf_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/envd-dev/envd/internal/outbuf"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// pattern returns n bytes whose values depend on their stream offset, so a
// reader can check it got the right bytes at the right offsets.
func pattern(off int64, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = patternByte(off + int64(i))
	}
	return p
}

func patternByte(off int64) byte { return byte(off % 251) }

// readAll reads everything currently available, failing on any error.
func readAll(t testing.TB, c *outbuf.Cursor) []outbuf.Record {
	t.Helper()
	recs, err := c.Read()
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return recs
}

// checkContiguous checks that recs start at from and follow each other
// without gaps, and returns the offset after the last one.
func checkContiguous(t testing.TB, from int64, recs []outbuf.Record) int64 {
	t.Helper()
	for _, r := range recs {
		if r.Off != from {
			t.Fatalf("record at offset %d, want %d", r.Off, from)
		}
		if len(r.Data) == 0 {
			t.Fatalf("empty record at offset %d", r.Off)
		}
		from += int64(len(r.Data))
	}
	return from
}

func concat(recs []outbuf.Record) []byte {
	var b []byte
	for _, r := range recs {
		b = append(b, r.Data...)
	}
	return b
}

// ready reports whether ch is closed right now.
func ready(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestOffsets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		capacity int
		writes   []int // sizes; 0 is a no-op write
		want     []outbuf.Record
		start    int64
		end      int64
	}{
		{
			name:     "empty",
			capacity: 10,
			start:    0, end: 0,
		},
		{
			name:     "empty writes are no-ops",
			capacity: 10,
			writes:   []int{0, 3, 0},
			want:     []outbuf.Record{{Off: 0, Kind: 0, Data: pattern(0, 3)}},
			start:    0, end: 3,
		},
		{
			name:     "records in order",
			capacity: 10,
			writes:   []int{1, 2, 3},
			want: []outbuf.Record{
				{Off: 0, Kind: 0, Data: pattern(0, 1)},
				{Off: 1, Kind: 1, Data: pattern(1, 2)},
				{Off: 3, Kind: 2, Data: pattern(3, 3)},
			},
			start: 0, end: 6,
		},
		{
			name:     "exactly full",
			capacity: 6,
			writes:   []int{1, 2, 3},
			want: []outbuf.Record{
				{Off: 0, Kind: 0, Data: pattern(0, 1)},
				{Off: 1, Kind: 1, Data: pattern(1, 2)},
				{Off: 3, Kind: 2, Data: pattern(3, 3)},
			},
			start: 0, end: 6,
		},
		{
			name:     "whole record evicted",
			capacity: 5,
			writes:   []int{1, 2, 3},
			want: []outbuf.Record{
				{Off: 1, Kind: 1, Data: pattern(1, 2)},
				{Off: 3, Kind: 2, Data: pattern(3, 3)},
			},
			start: 1, end: 6,
		},
		{
			name:     "record partly evicted",
			capacity: 4,
			writes:   []int{1, 2, 3},
			want: []outbuf.Record{
				{Off: 2, Kind: 1, Data: pattern(2, 1)},
				{Off: 3, Kind: 2, Data: pattern(3, 3)},
			},
			start: 2, end: 6,
		},
		{
			name:     "oversized record keeps its tail",
			capacity: 4,
			writes:   []int{2, 10},
			want:     []outbuf.Record{{Off: 8, Kind: 1, Data: pattern(8, 4)}},
			start:    8, end: 12,
		},
		{
			name:     "record of exactly capacity",
			capacity: 4,
			writes:   []int{2, 4},
			want:     []outbuf.Record{{Off: 2, Kind: 1, Data: pattern(2, 4)}},
			start:    2, end: 6,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := outbuf.New(tt.capacity)
			var off int64
			kind := uint8(0)
			for _, n := range tt.writes {
				l.Write(kind, pattern(off, n))
				if n > 0 {
					kind++
				}
				off += int64(n)
			}
			if got := l.Start(); got != tt.start {
				t.Errorf("Start() = %d, want %d", got, tt.start)
			}
			if got := l.End(); got != tt.end {
				t.Errorf("End() = %d, want %d", got, tt.end)
			}
			c := l.Cursor(outbuf.Oldest)
			got := readAll(t, c)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d records %v, want %d %v", len(got), got, len(tt.want), tt.want)
			}
			for i := range got {
				g, w := got[i], tt.want[i]
				if g.Off != w.Off || g.Kind != w.Kind || !bytes.Equal(g.Data, w.Data) {
					t.Errorf("record %d = %+v, want %+v", i, g, w)
				}
			}
			if c.Offset() != tt.end {
				t.Errorf("Offset() after Read = %d, want %d", c.Offset(), tt.end)
			}
		})
	}
}

func TestWriteCopiesInput(t *testing.T) {
	t.Parallel()
	l := outbuf.New(100)
	p := []byte("hello")
	l.Write(1, p)
	copy(p, "XXXXX")
	if got := concat(readAll(t, l.Cursor(outbuf.Oldest))); string(got) != "hello" {
		t.Fatalf("got %q, want %q", got, "hello")
	}
}

// WriteOwned keeps the caller's buffer as the record (no copy), capped so
// that a reader's append cannot reach the buffer's spare capacity; an
// oversized buffer keeps its last capacity bytes, as Write does.
func TestWriteOwned(t *testing.T) {
	t.Parallel()
	l := outbuf.New(8)
	buf := make([]byte, 3, 16)
	copy(buf, "abc")
	l.WriteOwned(1, buf)
	l.WriteOwned(1, nil)
	recs := readAll(t, l.Cursor(outbuf.Oldest))
	if len(recs) != 1 || string(recs[0].Data) != "abc" || recs[0].Off != 0 || recs[0].Kind != 1 {
		t.Fatalf("records %+v, want one \"abc\" at 0", recs)
	}
	if &recs[0].Data[0] != &buf[0] {
		t.Error("the record is a copy of the owned buffer")
	}
	_ = append(recs[0].Data, "ZZ"...)
	if spare := buf[:5]; string(spare[3:]) == "ZZ" {
		t.Error("a reader's append wrote into the owner's spare capacity")
	}

	l.WriteOwned(2, []byte("0123456789")) // 10 bytes into a log of 8
	recs = readAll(t, l.Cursor(outbuf.Oldest))
	if got := concat(recs); string(got) != "23456789" {
		t.Fatalf("kept %q, want the last 8 bytes", got)
	}
	if l.Start() != 5 || l.End() != 13 {
		t.Fatalf("Start, End = %d, %d; want 5, 13", l.Start(), l.End())
	}
}

// A reader appending to a returned record must not corrupt the log.
func TestAppendToRecordDoesNotCorrupt(t *testing.T) {
	t.Parallel()
	l := outbuf.New(100)
	l.Write(1, []byte("abcdef"))
	l.Write(1, []byte("ghi"))
	// Partial read of the first record, then append to it.
	c := l.Cursor(2)
	recs := readAll(t, c)
	_ = append(recs[0].Data, "ZZZZ"...)
	if got := concat(readAll(t, l.Cursor(outbuf.Oldest))); string(got) != "abcdefghi" {
		t.Fatalf("got %q after a reader appended, want %q", got, "abcdefghi")
	}
}

func TestCursorPositions(t *testing.T) {
	t.Parallel()
	// capacity 10, 25 bytes written: retained [15, 25).
	newLog := func() *outbuf.Log {
		l := outbuf.New(10)
		for off := int64(0); off < 25; off += 5 {
			l.Write(1, pattern(off, 5))
		}
		return l
	}
	tests := []struct {
		name     string
		from     int64
		wantOff  int64 // Offset() right after Cursor
		wantLost *outbuf.LostError
		wantData []byte // after the loss, if any
	}{
		{"oldest replays retained", outbuf.Oldest, 15, nil, pattern(15, 10)},
		{"other negative means oldest", -7, 15, nil, pattern(15, 10)},
		{"start replays retained", 15, 15, nil, pattern(15, 10)},
		{"mid record", 17, 17, nil, pattern(17, 8)},
		{"record boundary", 20, 20, nil, pattern(20, 5)},
		{"end is live only", 25, 25, nil, nil},
		{"past end clamps to end", 1000, 25, nil, nil},
		{"evicted offset reports loss", 3, 3, &outbuf.LostError{From: 3, To: 15, Capacity: 10}, pattern(15, 10)},
		{"zero reports loss", 0, 0, &outbuf.LostError{From: 0, To: 15, Capacity: 10}, pattern(15, 10)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := newLog()
			c := l.Cursor(tt.from)
			if got := c.Offset(); got != tt.wantOff {
				t.Fatalf("Offset() = %d, want %d", got, tt.wantOff)
			}
			if tt.wantLost != nil {
				recs, err := c.Read()
				var lost *outbuf.LostError
				if !errors.As(err, &lost) || *lost != *tt.wantLost || recs != nil {
					t.Fatalf("Read() = %v, %v; want nil, %v", recs, err, tt.wantLost)
				}
				if c.Offset() != l.Start() {
					t.Fatalf("Offset() after loss = %d, want Start() = %d", c.Offset(), l.Start())
				}
			}
			recs := readAll(t, c)
			if got := concat(recs); !bytes.Equal(got, tt.wantData) {
				t.Fatalf("read %v, want %v", got, tt.wantData)
			}
			if len(recs) > 0 {
				checkContiguous(t, recs[0].Off, recs)
			}
			// Live output follows.
			l.Write(2, pattern(25, 3))
			recs = readAll(t, c)
			if len(recs) != 1 || recs[0].Off != 25 || recs[0].Kind != 2 || !bytes.Equal(recs[0].Data, pattern(25, 3)) {
				t.Fatalf("live read = %+v, want one record at 25", recs)
			}
		})
	}
}

func TestLostErrorCounts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		capacity int
		before   int   // bytes written before the cursor reads once
		writes   []int // then these writes, no reads in between
		wantLost int64
		wantFrom int64
		wantTo   int64
	}{
		{"no loss when exactly full", 8, 3, []int{4, 4}, 0, 0, 0},
		{"one byte lost", 8, 3, []int{4, 5}, 1, 3, 4},
		{"whole records lost", 8, 0, []int{4, 4, 4, 4}, 8, 0, 8},
		{"oversized write", 8, 5, []int{100}, 92, 5, 97},
		{"many small writes", 10, 0, []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 3, 0, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := outbuf.New(tt.capacity)
			c := l.Cursor(l.End())
			off := int64(0)
			write := func(n int) {
				l.Write(1, pattern(off, n))
				off += int64(n)
			}
			write(tt.before)
			readAll(t, c)
			for _, n := range tt.writes {
				write(n)
			}
			_, err := c.Read()
			if tt.wantLost == 0 {
				if err != nil {
					t.Fatalf("Read: %v, want no error", err)
				}
				return
			}
			var lost *outbuf.LostError
			if !errors.As(err, &lost) {
				t.Fatalf("Read error = %v, want *LostError", err)
			}
			if lost.Lost() != tt.wantLost || lost.From != tt.wantFrom || lost.To != tt.wantTo {
				t.Fatalf("lost %d [%d, %d), want %d [%d, %d)", lost.Lost(), lost.From, lost.To, tt.wantLost, tt.wantFrom, tt.wantTo)
			}
			// The cursor continues from the oldest retained byte.
			recs := readAll(t, c)
			if end := checkContiguous(t, tt.wantTo, recs); end != off {
				t.Fatalf("read up to %d, want %d", end, off)
			}
			if !bytes.Equal(concat(recs), pattern(tt.wantTo, int(off-tt.wantTo))) {
				t.Fatalf("wrong data after loss")
			}
		})
	}
}

func TestLostErrorMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  outbuf.LostError
		want string
	}{
		{outbuf.LostError{From: 10, To: 123466, Capacity: 4 << 20}, "output fell out of the 4 MiB buffer: 123456 bytes lost (offsets 10..123466); the reader was too slow"},
		{outbuf.LostError{From: 0, To: 5, Capacity: 64 << 10}, "output fell out of the 64 KiB buffer: 5 bytes lost (offsets 0..5); the reader was too slow"},
		{outbuf.LostError{From: 0, To: 5, Capacity: 1000}, "output fell out of the 1000-byte buffer: 5 bytes lost (offsets 0..5); the reader was too slow"},
		{outbuf.LostError{From: 0, To: 5}, "output fell out of the buffer: 5 bytes lost (offsets 0..5); the reader was too slow"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

func TestCloseAndEOF(t *testing.T) {
	t.Parallel()
	l := outbuf.New(100)
	c := l.Cursor(outbuf.Oldest)
	l.Write(1, []byte("abc"))
	l.Close()
	l.Close() // idempotent
	l.Write(1, []byte("ignored"))
	if l.End() != 3 {
		t.Fatalf("End() = %d after write after Close, want 3", l.End())
	}
	// Data written before Close is still delivered, then EOF, repeatedly.
	if got := concat(readAll(t, c)); string(got) != "abc" {
		t.Fatalf("got %q, want %q", got, "abc")
	}
	for range 2 {
		if recs, err := c.Read(); recs != nil || err != io.EOF {
			t.Fatalf("Read() = %v, %v; want nil, io.EOF", recs, err)
		}
	}
	// A cursor created after Close replays, then gets EOF.
	late := l.Cursor(outbuf.Oldest)
	if got := concat(readAll(t, late)); string(got) != "abc" {
		t.Fatalf("late cursor got %q, want %q", got, "abc")
	}
	if _, err := late.Read(); err != io.EOF {
		t.Fatalf("late cursor Read error = %v, want io.EOF", err)
	}
	// Nothing available and not closed: (nil, nil).
	if recs, err := outbuf.New(1).Cursor(0).Read(); recs != nil || err != nil {
		t.Fatalf("Read() on empty log = %v, %v; want nil, nil", recs, err)
	}
}

func TestWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// act makes something pending for a drained cursor of a log with
		// capacity 4 that already holds 2 bytes.
		act func(l *outbuf.Log)
		// wantErr is what the next Read returns: nil means data.
		wantErr func(error) bool
	}{
		{"write", func(l *outbuf.Log) { l.Write(1, []byte("x")) }, func(err error) bool { return err == nil }},
		{"close", func(l *outbuf.Log) { l.Close() }, func(err error) bool { return err == io.EOF }},
		{"loss", func(l *outbuf.Log) { l.Write(1, make([]byte, 10)) }, func(err error) bool {
			var lost *outbuf.LostError
			return errors.As(err, &lost)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := outbuf.New(4)
			l.Write(1, []byte("ab"))
			c := l.Cursor(outbuf.Oldest)
			if !ready(c.Wait()) {
				t.Fatal("Wait not ready with unread data")
			}
			readAll(t, c)
			w := c.Wait()
			if ready(w) {
				t.Fatal("Wait ready with nothing pending")
			}
			// The channel taken before the act is the one that wakes: a
			// goroutine blocked on it would wake.
			tt.act(l)
			if !ready(w) {
				t.Fatal("Wait did not wake")
			}
			if !ready(c.Wait()) {
				t.Fatal("Wait not ready while something is pending")
			}
			if _, err := c.Read(); !tt.wantErr(err) {
				t.Fatalf("Read error after wake-up: %v", err)
			}
		})
	}
}

// Two writers share a log, as a stdout and a stderr goroutine do. Each
// record must arrive whole, in each writer's order, at contiguous offsets.
func TestConcurrentWritersOrdering(t *testing.T) {
	t.Parallel()
	const perWriter = 2000
	l := outbuf.New(1 << 20) // big enough to keep everything
	var wg sync.WaitGroup
	for kind := uint8(1); kind <= 2; kind++ {
		wg.Go(func() {
			p := make([]byte, 8+int(kind)) // different sizes per writer
			for i := range perWriter {
				binary.BigEndian.PutUint64(p, uint64(i))
				l.Write(kind, p)
			}
		})
	}
	wg.Wait()
	l.Close()

	recs := readAll(t, l.Cursor(outbuf.Oldest))
	if len(recs) != 2*perWriter {
		t.Fatalf("got %d records, want %d", len(recs), 2*perWriter)
	}
	end := checkContiguous(t, 0, recs)
	if end != l.End() || end != perWriter*(9+10) {
		t.Fatalf("records end at %d, End() = %d, want %d", end, l.End(), perWriter*(9+10))
	}
	next := map[uint8]uint64{1: 0, 2: 0}
	for _, r := range recs {
		if len(r.Data) != 8+int(r.Kind) {
			t.Fatalf("record of kind %d has %d bytes", r.Kind, len(r.Data))
		}
		if seq := binary.BigEndian.Uint64(r.Data); seq != next[r.Kind] {
			t.Fatalf("kind %d: got seq %d, want %d", r.Kind, seq, next[r.Kind])
		}
		next[r.Kind]++
	}
}

// follow reads c until EOF, waking on Wait, and checks every byte. It
// returns the bytes it received and the bytes it lost.
func follow(c interface {
	Read() ([]outbuf.Record, error)
	Wait() <-chan struct{}
	Offset() int64
}) (got, lost int64, err error) {
	next := c.Offset()
	for {
		recs, err := c.Read()
		var le *outbuf.LostError
		switch {
		case err == io.EOF:
			return got, lost, nil
		case errors.As(err, &le):
			if le.From != next {
				return got, lost, fmt.Errorf("loss from %d, want from %d", le.From, next)
			}
			lost += le.Lost()
			next = le.To
			continue
		case err != nil:
			return got, lost, err
		}
		for _, r := range recs {
			if r.Off != next || !bytes.Equal(r.Data, pattern(r.Off, len(r.Data))) {
				return got, lost, fmt.Errorf("wrong data at offset %d (expected offset %d)", r.Off, next)
			}
			got += int64(len(r.Data))
			next += int64(len(r.Data))
		}
		if len(recs) == 0 {
			<-c.Wait()
		}
	}
}

// One subscriber never reads. The writer must not block on it, and the
// other subscribers must get everything.
func TestSlowCursorDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	const (
		capacity = 1 << 20
		chunk    = 4 << 10
		total    = 16 << 20 // 16 times the capacity
		readers  = 8
	)
	// The fast subscribers follow (paced writes wait for them); the mock
	// clock never moves, so none is ever left behind, however slowly it is
	// scheduled. The stuck one is a plain cursor: never waited for, it
	// falls 15 MiB behind.
	l := outbuf.New(capacity, outbuf.WithClock(newClock(t)))
	stuck := l.Cursor(outbuf.Oldest) // never reads until the end

	type result struct {
		got, lost int64
		err       error
	}
	results := make(chan result, readers)
	var wg sync.WaitGroup
	for range readers {
		r := l.Follow(outbuf.Oldest)
		wg.Go(func() {
			defer r.Close()
			got, lost, err := follow(r)
			results <- result{got, lost, err}
		})
	}
	for off := int64(0); off < total; off += chunk {
		l.WritePaced(t.Context(), 1, pattern(off, chunk))
	}
	l.Close()
	wg.Wait()
	close(results)
	for r := range results {
		if r.err != nil || r.got != total || r.lost != 0 {
			t.Errorf("fast reader got %d, lost %d, err %v; want %d, 0, nil", r.got, r.lost, r.err, total)
		}
	}

	// The stuck cursor learns exactly what it missed, then gets the rest.
	_, err := stuck.Read()
	var lost *outbuf.LostError
	if !errors.As(err, &lost) || lost.From != 0 || lost.To != total-capacity {
		t.Fatalf("stuck cursor: %v, want loss [0, %d)", err, total-capacity)
	}
	got, more, err := follow(stuck)
	if err != nil || got != capacity || more != 0 {
		t.Fatalf("stuck cursor after loss: got %d, lost %d, err %v; want %d, 0, nil", got, more, err, capacity)
	}
}

// Writers, readers and observers all run at once; run with -race.
func TestRace(t *testing.T) {
	t.Parallel()
	l := outbuf.New(64 << 10)
	var wg sync.WaitGroup
	done := make(chan struct{})

	// Observers poke at the log and at fresh cursors while it changes.
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				start, end := l.Start(), l.End()
				if start > end {
					t.Errorf("Start %d > End %d", start, end)
				}
				c := l.Cursor(outbuf.Oldest)
				recs, err := c.Read()
				// Oldest means no loss at creation; the writers may still
				// evict bytes before the first Read.
				var lost *outbuf.LostError
				if err != nil && err != io.EOF && !errors.As(err, &lost) {
					t.Errorf("fresh Oldest cursor: %v", err)
				}
				for _, r := range recs {
					_ = bytes.IndexByte(r.Data, 0) // read the shared bytes
				}
				_ = c.Offset()
				_ = c.Wait()
			}
		})
	}

	// Followers read everything, some continuing after losses.
	var mu sync.Mutex
	var total int64
	for range 4 {
		c := l.Cursor(outbuf.Oldest)
		wg.Go(func() {
			var got, lost int64
			for {
				recs, err := c.Read()
				var le *outbuf.LostError
				if err == io.EOF {
					break
				}
				if errors.As(err, &le) {
					lost += le.Lost()
					continue
				}
				for _, r := range recs {
					// Each writer fills a record with its kind.
					if bytes.Count(r.Data, []byte{r.Kind}) != len(r.Data) {
						t.Errorf("record at %d of kind %d has foreign bytes", r.Off, r.Kind)
					}
					got += int64(len(r.Data))
				}
				if len(recs) == 0 {
					<-c.Wait()
				}
			}
			mu.Lock()
			if total == 0 {
				total = l.End()
			}
			if got+lost != total {
				t.Errorf("follower got %d + lost %d, want %d", got, lost, total)
			}
			mu.Unlock()
		})
	}

	var writers sync.WaitGroup
	for kind := uint8(1); kind <= 3; kind++ {
		writers.Go(func() {
			p := make([]byte, 1000*int(kind))
			for range 2000 {
				// Reuse p as real pipe readers do; Write must have copied it.
				for i := range p {
					p[i] = kind
				}
				l.Write(kind, p)
			}
		})
	}
	writers.Wait()
	l.Close()
	close(done)
	wg.Wait()
}

// Pushing 512 MiB through a 1 MiB log never retains more than 1 MiB.
func TestMemoryBound(t *testing.T) {
	t.Parallel()
	const (
		capacity = 1 << 20
		chunk    = 32 << 10
		total    = 512 << 20
	)
	l := outbuf.New(capacity)
	p := make([]byte, chunk)
	for off := 0; off < total; off += chunk {
		l.Write(1, p)
		if kept := l.End() - l.Start(); kept > capacity {
			t.Fatalf("retains %d bytes at offset %d, capacity %d", kept, off, capacity)
		}
	}
	if l.End() != total || l.Start() != total-capacity {
		t.Fatalf("Start, End = %d, %d; want %d, %d", l.Start(), l.End(), total-capacity, total)
	}
	var kept int64
	for _, r := range readAll(t, l.Cursor(outbuf.Oldest)) {
		kept += int64(len(r.Data))
	}
	if kept != capacity {
		t.Fatalf("cursor read %d retained bytes, want %d", kept, capacity)
	}
}

// One-byte writes are bounded by record count too, so per-record overhead
// cannot blow up memory. The log still retains a contiguous suffix.
func TestTinyWritesBoundRecords(t *testing.T) {
	t.Parallel()
	const capacity = 1 << 20
	l := outbuf.New(capacity)
	for off := range int64(1 << 20) {
		l.Write(1, pattern(off, 1))
	}
	recs := readAll(t, l.Cursor(outbuf.Oldest))
	if max := capacity / 64; len(recs) > max {
		t.Fatalf("retains %d records, want at most %d", len(recs), max)
	}
	if len(recs) == 0 {
		t.Fatal("retains nothing")
	}
	if end := checkContiguous(t, l.Start(), recs); end != l.End() {
		t.Fatalf("records end at %d, End() = %d", end, l.End())
	}
}

func TestNewPanicsOnBadCapacity(t *testing.T) {
	t.Parallel()
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "capacity") {
			t.Fatalf("recover() = %v, want a capacity panic", r)
		}
	}()
	outbuf.New(0)
}

// FuzzLog drives a log with a random sequence of writes and reads from two
// cursors and checks the invariants against the deterministic pattern.
func FuzzLog(f *testing.F) {
	f.Add(uint16(8), []byte{3, 0x81, 5, 0x82, 20, 0x83, 1, 1, 1, 0x80})
	f.Add(uint16(1), []byte{1, 2, 0x81, 0x82})
	f.Add(uint16(100), []byte{0x7f, 0x7f, 0x80, 0x7f, 0x81})
	f.Add(uint16(3), []byte{})
	f.Fuzz(func(t *testing.T, capacity uint16, ops []byte) {
		// Keep each run cheap: the interesting cases are about sizes
		// relative to the capacity, not absolute sizes.
		capacity = capacity%1024 + 1
		if len(ops) > 512 {
			ops = ops[:512]
		}
		l := outbuf.New(int(capacity))
		// A cursor that reads when told to, and one that never does until
		// the end, to exercise losses.
		cursors := []*outbuf.Cursor{l.Cursor(outbuf.Oldest), l.Cursor(0)}
		next := []int64{0, 0} // where each cursor's next byte must be
		var end int64
		closed := false

		read := func(i int) {
			c := cursors[i]
			recs, err := c.Read()
			var lost *outbuf.LostError
			switch {
			case errors.As(err, &lost):
				if lost.From != next[i] || lost.To != l.Start() || lost.Lost() <= 0 {
					t.Fatalf("cursor %d: loss [%d, %d), expected from %d to Start %d", i, lost.From, lost.To, next[i], l.Start())
				}
				next[i] = lost.To
				return
			case err == io.EOF:
				if !closed || next[i] != end {
					t.Fatalf("cursor %d: io.EOF at %d, end %d, closed %v", i, next[i], end, closed)
				}
				return
			case err != nil:
				t.Fatalf("cursor %d: %v", i, err)
			}
			if len(recs) == 0 && next[i] != end {
				t.Fatalf("cursor %d: nothing read at %d, end %d", i, next[i], end)
			}
			next[i] = checkContiguous(t, next[i], recs)
			for _, r := range recs {
				if !bytes.Equal(r.Data, pattern(r.Off, len(r.Data))) {
					t.Fatalf("cursor %d: wrong data at offset %d", i, r.Off)
				}
			}
			if next[i] != end || c.Offset() != end {
				t.Fatalf("cursor %d: read up to %d (Offset %d), want %d", i, next[i], c.Offset(), end)
			}
		}

		for _, op := range ops {
			if op&0x80 != 0 {
				read(int(op) % len(cursors))
			} else {
				// Write sizes around the capacity, including 0 and oversized.
				n := int(op) * int(capacity) / 32
				l.Write(op%4, pattern(end, n))
				end += int64(n)
			}
			start := l.Start()
			if l.End() != end {
				t.Fatalf("End() = %d, want %d", l.End(), end)
			}
			if start > end || end-start > int64(capacity) {
				t.Fatalf("retains [%d, %d), more than capacity %d", start, end, capacity)
			}
		}
		l.Close()
		closed = true
		for i := range cursors {
			read(i) // may be a loss
			read(i) // the rest, or io.EOF
			if _, err := cursors[i].Read(); err != io.EOF {
				t.Fatalf("cursor %d: %v after draining a closed log, want io.EOF", i, err)
			}
		}
	})
}

// BenchmarkWriteRead streams 32 KiB chunks from one writer to one reader
// through a 4 MiB log.
func BenchmarkWriteRead(b *testing.B) {
	const chunk = 32 << 10
	l := outbuf.New(4 << 20)
	c := l.Cursor(outbuf.Oldest)
	p := make([]byte, chunk)
	b.SetBytes(chunk)

	var got, lost int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			recs, err := c.Read()
			var le *outbuf.LostError
			if err == io.EOF {
				return
			}
			if errors.As(err, &le) {
				lost += le.Lost()
				continue
			}
			for _, r := range recs {
				got += int64(len(r.Data))
			}
			if len(recs) == 0 {
				<-c.Wait()
			}
		}
	}()

	b.ResetTimer()
	for range b.N {
		l.Write(1, p)
	}
	l.Close()
	<-done
	b.StopTimer()
	if got+lost != int64(b.N)*chunk {
		b.Fatalf("got %d + lost %d, want %d", got, lost, int64(b.N)*chunk)
	}
	b.ReportMetric(float64(lost)/float64(b.N*chunk), "lost/byte")
}

// A log WithWholeRecords keeps a record larger than itself whole while it
// is the newest, and cuts it (copying what fits) at the next write.
func TestWholeRecords(t *testing.T) {
	l := outbuf.New(16, outbuf.WithWholeRecords())
	r := l.Follow(outbuf.Oldest)
	defer r.Close()
	big := bytes.Repeat([]byte("x"), 40)
	l.Write(1, []byte("ab"))
	if recs, err := r.Read(); err != nil || len(recs) != 1 {
		t.Fatalf("read %v, %v", recs, err)
	}
	l.Write(1, big)
	recs, err := r.Read()
	if err != nil || len(recs) != 1 || !bytes.Equal(recs[0].Data, big) {
		t.Fatalf("read %v, %v: want the big record whole", recs, err)
	}
	l.Write(1, []byte("cd"))
	if got := l.Start(); got != l.End()-16 {
		t.Errorf("start %d, end %d: the big record was not cut to fit", got, l.End())
	}
}
