package outbuf_test

import (
	"context"
	"errors"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/internal/outbuf"
	"github.com/envd-dev/envd/internal/testutil"
)

// bound is how long a test waits for something that happens at once; it
// only turns a hang into a failure, it measures nothing.
const bound = 30 * time.Second

// newClock returns a mock clock that does not log every call.
func newClock(t *testing.T) *quartz.Mock {
	return quartz.NewMock(t).WithLogger(quietLogger{})
}

type quietLogger struct{}

func (quietLogger) Log(...any)          {}
func (quietLogger) Logf(string, ...any) {}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	t.Cleanup(cancel)
	return ctx
}

// writePaced writes total bytes of pattern in chunks with WritePaced, then
// closes the log. It returns a channel closed when it is done.
func writePaced(ctx context.Context, l *outbuf.Log, total, chunk int) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for off := 0; off < total; off += chunk {
			l.WritePaced(ctx, 1, pattern(int64(off), chunk))
		}
		l.Close()
	}()
	return done
}

// readFollower reads r until io.EOF, checking every byte; it returns the
// bytes received and the bytes reported lost. A Read that returns nothing
// waits on r.Wait (or fails the test once ctx ends).
func readFollower(ctx context.Context, t *testing.T, r *outbuf.Reader) (got, lost int64) {
	t.Helper()
	next := r.Offset()
	for {
		recs, err := r.Read()
		if errors.Is(err, io.EOF) {
			return got, lost
		}
		if le, ok := errors.AsType[*outbuf.LostError](err); ok {
			if le.From != next {
				t.Fatalf("loss from %d, want from %d", le.From, next)
			}
			lost += le.Lost()
			next = le.To
			continue
		}
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		for _, rec := range recs {
			if rec.Off != next || string(rec.Data) != string(pattern(rec.Off, len(rec.Data))) {
				t.Fatalf("wrong data at offset %d (expected offset %d)", rec.Off, next)
			}
			got += int64(len(rec.Data))
			next += int64(len(rec.Data))
		}
		if len(recs) == 0 {
			select {
			case <-r.Wait():
			case <-ctx.Done():
				t.Fatalf("reader stuck at %d: %v", next, ctx.Err())
			}
		}
	}
}

// drainNow reads everything r has right now, without waiting.
func drainNow(t *testing.T, r *outbuf.Reader) (got int64) {
	t.Helper()
	for {
		recs, err := r.Read()
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if len(recs) == 0 {
			return got
		}
		for _, rec := range recs {
			got += int64(len(rec.Data))
		}
	}
}

// TestPacedLateReaderAfterQuiet is the drift of a late follower: after a
// second of quiet, a follower that comes 5 ms late into a 128 KiB burst
// through a 64 KiB log loses nothing. The grace counts from when the writer
// first waits for it, not from its last read (which was a second ago, as
// long as the grace).
func TestPacedLateReaderAfterQuiet(t *testing.T) {
	t.Parallel()
	const (
		capacity = 64 << 10
		burst    = 128 << 10
		chunk    = 16 << 10
		grace    = time.Second
	)
	ctx := testContext(t)
	clk := newClock(t)
	l := outbuf.New(capacity, outbuf.WithClock(clk), outbuf.WithReaderGrace(grace))
	l.Write(1, pattern(0, 1)) // an early byte, read at once
	r := l.Follow(outbuf.Oldest)
	defer r.Close()
	if got := drainNow(t, r); got != 1 {
		t.Fatalf("read %d bytes, want 1", got)
	}
	clk.Advance(time.Second).MustWait(ctx) // a quiet second

	trap := clk.Trap().NewTimer("outbuf", "pace")
	defer trap.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for off := 1; off < 1+burst; off += chunk {
			l.WritePaced(ctx, 1, pattern(int64(off), chunk))
		}
		l.Close()
	}()
	if call := testutil.FirstWait(ctx, t, trap, done); call != nil {
		if call.Duration != grace {
			t.Errorf("the writer waits %v for the reader, want the grace %v", call.Duration, grace)
		}
		call.MustRelease(ctx)
		trap.Close()
		clk.Advance(5 * time.Millisecond).MustWait(ctx) // the reader is 5 ms late
	} else {
		t.Error("the writer never waited for the reader")
	}
	got, lost := readFollower(ctx, t, r)
	if got != burst || lost != 0 {
		t.Fatalf("the late reader got %d bytes and lost %d, want %d and 0", got, lost, burst)
	}
	<-done
}

// TestPacedStalledReaderLeftBehind: a follower that reads nothing holds the
// writer exactly the grace, once; then it is left behind, and its next Read
// says how many bytes it lost. A follower that keeps up loses nothing.
func TestPacedStalledReaderLeftBehind(t *testing.T) {
	t.Parallel()
	const (
		capacity = 64 << 10
		total    = 1 << 20
		chunk    = 8 << 10
		grace    = 2 * time.Second
	)
	ctx := testContext(t)
	clk := newClock(t)
	l := outbuf.New(capacity, outbuf.WithClock(clk), outbuf.WithReaderGrace(grace))
	stuck, fast := l.Follow(outbuf.Oldest), l.Follow(outbuf.Oldest)
	defer stuck.Close()
	defer fast.Close()
	trap := clk.Trap().NewTimer("outbuf", "pace")
	defer trap.Close()
	done := writePaced(ctx, l, total, chunk)

	call := testutil.FirstWait(ctx, t, trap, done)
	if call == nil {
		t.Fatal("the writer never waited for its followers")
	}
	if call.Duration != grace {
		t.Errorf("the writer waits %v, want the grace %v", call.Duration, grace)
	}
	call.MustRelease(ctx)
	trap.Close()
	// The fast reader reads what there is; the writer still waits for the
	// stuck one, up to the grace counted from its first wait.
	fastGot := drainNow(t, fast)
	clk.Advance(grace - time.Nanosecond).MustWait(ctx)
	select {
	case <-done:
		t.Fatal("the writer stopped waiting before the grace")
	default:
	}
	clk.Advance(time.Nanosecond).MustWait(ctx)
	// The stuck reader is left behind: the clock stays still from now on,
	// and the writer finishes, paced only by the fast reader.
	got, lost := readFollower(ctx, t, fast)
	if got+fastGot != total || lost != 0 {
		t.Fatalf("the fast reader got %d bytes and lost %d, want %d and 0", got+fastGot, lost, total)
	}
	<-done

	_, err := stuck.Read()
	le, ok := errors.AsType[*outbuf.LostError](err)
	if !ok {
		t.Fatalf("stuck reader: Read = %v, want a *outbuf.LostError", err)
	}
	if le.From != 0 || le.To != l.Start() || le.Lost() != total-capacity {
		t.Errorf("stuck reader lost [%d, %d), want [0, %d)", le.From, le.To, total-capacity)
	}
	rest, more := readFollower(ctx, t, stuck)
	if rest != capacity || more != 0 || le.Lost()+rest != total {
		t.Errorf("stuck reader read %d more bytes (lost %d more) after losing %d: want %d, 0", rest, more, le.Lost(), capacity)
	}
}

// TestPacedWriterReleased: a waiting paced write returns when the reader it
// waits for reads, leaves, or when the log closes or its context ends,
// with no clock involved.
func TestPacedWriterReleased(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		release func(l *outbuf.Log, r *outbuf.Reader, cancel context.CancelFunc)
	}{
		{"reader reads", func(_ *outbuf.Log, r *outbuf.Reader, _ context.CancelFunc) { _, _ = r.Read() }},
		{"reader closes", func(_ *outbuf.Log, r *outbuf.Reader, _ context.CancelFunc) { r.Close() }},
		{"log closes", func(l *outbuf.Log, _ *outbuf.Reader, _ context.CancelFunc) { l.Close() }},
		{"context ends", func(_ *outbuf.Log, _ *outbuf.Reader, cancel context.CancelFunc) { cancel() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			clk := newClock(t)
			l := outbuf.New(1024, outbuf.WithClock(clk))
			r := l.Follow(outbuf.Oldest)
			defer r.Close()
			l.Write(1, make([]byte, 400))
			trap := clk.Trap().NewTimer("outbuf", "pace")
			defer trap.Close()
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan struct{})
			go func() {
				defer close(done)
				l.WritePaced(wctx, 1, make([]byte, 200)) // 600 unread > 512
			}()
			trap.MustWait(ctx).MustRelease(ctx)
			tt.release(l, r, cancel)
			select {
			case <-done:
			case <-ctx.Done():
				t.Fatal("the paced write still waits")
			}
		})
	}
}

// TestPacedNoFollowers: plain cursors are never waited for, and a reader
// with nothing unread is not behind, however large the record.
func TestPacedNoFollowers(t *testing.T) {
	t.Parallel()
	clk := newClock(t)
	l := outbuf.New(1024, outbuf.WithClock(clk))
	c := l.Cursor(outbuf.Oldest)
	r := l.Follow(outbuf.Oldest)
	defer r.Close()
	trap := clk.Trap().NewTimer("outbuf", "pace")
	defer trap.Close()
	l.WritePaced(t.Context(), 1, make([]byte, 1000)) // r has nothing unread
	if got := drainNow(t, r); got != 1000 {
		t.Fatalf("follower read %d, want 1000", got)
	}
	r.Close()
	for range 10 {
		l.WritePaced(t.Context(), 1, make([]byte, 1000)) // only a cursor and a closed reader
	}
	if _, err := c.Read(); err == nil {
		t.Fatal("the plain cursor lost nothing: the writer waited for it")
	}
}

// TestReaderBatches: one Read returns at most about 256 KiB (or a single
// larger record), so a follower's progress is seen often; Offset counts
// what was returned.
func TestReaderBatches(t *testing.T) {
	t.Parallel()
	l := outbuf.New(8 << 20)
	for off := int64(0); off < 1<<20; off += 64 << 10 {
		l.Write(1, pattern(off, 64<<10))
	}
	l.Write(1, pattern(1<<20, 512<<10))
	r := l.Follow(outbuf.Oldest)
	defer r.Close()
	var sizes []int
	for {
		recs, err := r.Read()
		if err != nil || len(recs) == 0 {
			break
		}
		n := 0
		for _, rec := range recs {
			n += len(rec.Data)
		}
		sizes = append(sizes, n)
		if r.Offset() != recs[len(recs)-1].Off+int64(len(recs[len(recs)-1].Data)) {
			t.Fatalf("Offset %d after a batch ending at %d", r.Offset(), recs[len(recs)-1].Off+int64(len(recs[len(recs)-1].Data)))
		}
	}
	want := []int{256 << 10, 256 << 10, 256 << 10, 256 << 10, 512 << 10}
	if len(sizes) != len(want) {
		t.Fatalf("batches %v, want %v", sizes, want)
	}
	for i := range want {
		if sizes[i] != want[i] {
			t.Fatalf("batches %v, want %v", sizes, want)
		}
	}
}

// TestPacedMemoryBound: 256 MiB through a 1 MiB paced log, with a follower
// left behind and one that keeps up, never holds more than the log plus
// what one Read returned.
func TestPacedMemoryBound(t *testing.T) {
	const (
		capacity = 1 << 20
		total    = 256 << 20
		chunk    = 64 << 10
	)
	ctx := testContext(t)
	clk := newClock(t)
	l := outbuf.New(capacity, outbuf.WithClock(clk), outbuf.WithReaderGrace(time.Second))
	stuck, fast := l.Follow(outbuf.Oldest), l.Follow(outbuf.Oldest)
	defer stuck.Close()
	defer fast.Close()
	trap := clk.Trap().NewTimer("outbuf", "pace")
	defer trap.Close()

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	p := make([]byte, chunk)
	done := make(chan struct{})
	var peak uint64
	go func() {
		defer close(done)
		for range total / chunk {
			l.WritePaced(ctx, 1, p)
			if kept := l.End() - l.Start(); kept > capacity {
				t.Errorf("retains %d bytes, capacity %d", kept, capacity)
			}
		}
		l.Close()
	}()
	call := testutil.FirstWait(ctx, t, trap, done)
	if call == nil {
		t.Fatal("the writer never waited")
	}
	// fast catches up while the writer is held in NewTimer, and the clock
	// moves on while it is held in the Now that follows (the read woke it):
	// advancing between that Now and the Reset after it would push the
	// deadline a second further, where no Advance comes.
	got := drainNow(t, fast)
	now := clk.Trap().Now("outbuf", "pace")
	defer now.Close()
	call.MustRelease(ctx)
	trap.Close()
	held := now.MustWait(ctx)
	clk.Advance(time.Second).MustWait(ctx) // stuck is left behind
	held.MustRelease(ctx)
	now.Close()
	for n := 0; ; n++ {
		recs, err := fast.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("fast reader: %v", err)
		}
		for _, r := range recs {
			got += int64(len(r.Data))
		}
		if n%64 == 0 {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
		}
		if len(recs) == 0 {
			select {
			case <-fast.Wait():
			case <-ctx.Done():
				t.Fatal("fast reader stuck")
			}
		}
	}
	<-done
	if got != total {
		t.Errorf("fast reader got %d of %d bytes", got, total)
	}
	// Garbage not yet collected counts too; 32 MiB is far under the
	// 256 MiB written and far over the ~2 MiB held.
	if grew := int64(peak) - int64(before.HeapInuse); grew > 32<<20 {
		t.Errorf("heap grew by %d MiB writing %d MiB through a %d MiB log", grew>>20, total>>20, capacity>>20)
	}
}

// TestUnfollowed: Unfollowed returns once every follower has closed, and
// reports a context that ends first.
func TestUnfollowed(t *testing.T) {
	t.Parallel()
	l := outbuf.New(1 << 10)
	if !l.Unfollowed(t.Context()) {
		t.Fatal("a log nobody follows is not unfollowed")
	}
	a, b := l.Follow(outbuf.Oldest), l.Follow(outbuf.Oldest)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if l.Unfollowed(ctx) {
		t.Fatal("Unfollowed returned true while two readers follow")
	}
	done := make(chan bool, 1)
	go func() { done <- l.Unfollowed(t.Context()) }()
	a.Close()
	select {
	case <-done:
		t.Fatal("Unfollowed returned while a reader still follows")
	default:
	}
	b.Close()
	if !<-done {
		t.Fatal("Unfollowed = false after both readers closed")
	}
}
