package backoff_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coder/quartz"
	"go.uber.org/goleak"

	"github.com/envd-dev/envd/backoff"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitLong turns a hang into a failure.
const waitLong = 30 * time.Second

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	t.Cleanup(cancel)
	return ctx
}

func mockClock(t *testing.T) *quartz.Mock {
	return quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
}

// requireNoTimer fails the test if f sets a timer of clk.
func requireNoTimer(t *testing.T, ctx context.Context, clk *quartz.Mock, f func()) {
	t.Helper()
	trap := clk.Trap().NewTimer()
	defer trap.Close()
	wctx, cancel := context.WithCancel(ctx)
	calls := make(chan *quartz.Call, 1)
	go func() {
		defer close(calls)
		if c, err := trap.Wait(wctx); err == nil {
			calls <- c
		}
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case c := <-calls:
		t.Errorf("a timer of %v was set", c.Duration)
		c.MustRelease(ctx)
		<-done
	}
	cancel()
	for range calls {
	}
}

// delays hands out n delays of b.
func delays(b *backoff.Backoff, n int) []time.Duration {
	var out []time.Duration
	for range n {
		out = append(out, b.Next())
	}
	return out
}

func TestSchedule(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		p    backoff.Policy
		want []time.Duration
	}{
		{"doubling to the cap", backoff.Policy{Floor: 5 * ms, Cap: time.Second},
			[]time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms, time.Second, time.Second}},
		{"factor", backoff.Policy{Floor: 50 * ms, Cap: 2 * time.Second, Factor: 1.5},
			[]time.Duration{50 * ms, 75 * ms, 112500 * time.Microsecond, 168750 * time.Microsecond}},
		{"a cap reached between two doublings", backoff.Policy{Floor: 100 * ms, Cap: 300 * ms},
			[]time.Duration{100 * ms, 200 * ms, 300 * ms, 300 * ms}},
		{"no cap", backoff.Policy{Floor: time.Hour},
			[]time.Duration{time.Hour, 2 * time.Hour, 4 * time.Hour}},
		{"a cap below the floor", backoff.Policy{Floor: time.Second, Cap: ms},
			[]time.Duration{time.Second, time.Second}},
		{"a factor that does not grow", backoff.Policy{Floor: 10, Factor: 1},
			[]time.Duration{10, 11, 12}},
		{"no floor", backoff.Policy{}, []time.Duration{1, 2, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := delays(backoff.New(tc.p, nil), len(tc.want)); !slices.Equal(got, tc.want) {
				t.Errorf("delays %v, want %v", got, tc.want)
			}
		})
	}
}

// TestScheduleSaturates: growing past the longest Duration stays there
// rather than wrapping to a negative delay.
func TestScheduleSaturates(t *testing.T) {
	t.Parallel()
	p := backoff.Policy{Floor: 1 << 61}
	got := delays(backoff.New(p, nil), 4)
	want := []time.Duration{1 << 61, 1 << 62, math.MaxInt64, math.MaxInt64}
	if !slices.Equal(got, want) {
		t.Errorf("delays %v, want %v", got, want)
	}
	if d := p.After(math.MaxInt64); d != math.MaxInt64 {
		t.Errorf("After(max) = %v", d)
	}
}

func TestAfter(t *testing.T) {
	t.Parallel()
	p := backoff.Policy{Floor: 50 * time.Millisecond, Cap: 2 * time.Second, Factor: 1.5}
	if d := p.After(0); d != p.Floor {
		t.Errorf("After(0) = %v, want the floor", d)
	}
	if d := p.After(-time.Second); d != p.Floor {
		t.Errorf("After(-1s) = %v, want the floor", d)
	}
	if d := p.After(time.Millisecond); d != p.Floor {
		t.Errorf("After(1ms) = %v, want the floor (never below it)", d)
	}
	if d := p.After(10 * time.Second); d != p.Cap {
		t.Errorf("After(10s) = %v, want the cap", d)
	}
}

func TestReset(t *testing.T) {
	t.Parallel()
	b := backoff.New(backoff.Policy{Floor: time.Second, Cap: 30 * time.Second}, nil)
	delays(b, 3)
	b.Reset()
	if got := delays(b, 2); !slices.Equal(got, []time.Duration{time.Second, 2 * time.Second}) {
		t.Errorf("after Reset: %v", got)
	}
	b.Delay() // drawn, not handed out: Reset drops it too
	b.Reset()
	if d := b.Next(); d != time.Second {
		t.Errorf("after a Delay and Reset: %v", d)
	}
}

// TestDelay: Delay tells what the next Next (or Wait) hands out, as many
// times as asked, without moving the schedule.
func TestDelay(t *testing.T) {
	t.Parallel()
	b := backoff.New(backoff.Policy{Floor: 10 * time.Millisecond, Jitter: 0.5, Rand: rand.New(rand.NewPCG(1, 2))}, nil)
	for range 5 {
		d := b.Delay()
		if again := b.Delay(); again != d {
			t.Fatalf("Delay %v then %v", d, again)
		}
		if n := b.Next(); n != d {
			t.Fatalf("Delay %v, then Next %v", d, n)
		}
	}
}

func TestJitter(t *testing.T) {
	t.Parallel()
	policy := func(seed uint64) backoff.Policy {
		return backoff.Policy{Floor: 100 * time.Millisecond, Cap: 800 * time.Millisecond, Jitter: 0.2, Rand: rand.New(rand.NewPCG(seed, 0))}
	}
	a := delays(backoff.New(policy(1), nil), 200)
	if b := delays(backoff.New(policy(1), nil), 200); !slices.Equal(a, b) {
		t.Error("two Backoffs of one seed differ")
	}
	if b := delays(backoff.New(policy(2), nil), 200); slices.Equal(a, b) {
		t.Error("two seeds give the same delays")
	}
	// Each delay within a tenth of the schedule's, which grows from the
	// delays before jitter: 100, 200, 400, then 800 ms for good.
	base := time.Duration(100 * time.Millisecond)
	spread := map[bool]int{}
	for i, d := range a {
		if lo, hi := base-base/10, base+base/10; d < lo || d >= hi {
			t.Fatalf("delay %d: %v, not in [%v, %v)", i, d, lo, hi)
		}
		spread[d < base]++
		base = min(2*base, 800*time.Millisecond)
	}
	if spread[true] < 50 || spread[false] < 50 {
		t.Errorf("delays below and above the schedule's: %v", spread)
	}
	// Unseeded, from math/rand/v2: still within its bounds.
	p := policy(0)
	p.Rand = nil
	for i, d := range delays(backoff.New(p, nil), 50) {
		if d < 90*time.Millisecond || d >= 880*time.Millisecond {
			t.Fatalf("unseeded delay %d: %v", i, d)
		}
	}
	// Jitter over 1 spreads as 1 does; under 10 ns nothing is spread.
	p = backoff.Policy{Floor: time.Second, Jitter: 5, Rand: rand.New(rand.NewPCG(3, 0))}
	for range 50 {
		if d := backoff.New(p, nil).Next(); d < 500*time.Millisecond || d >= 1500*time.Millisecond {
			t.Fatalf("jitter 5: %v", d)
		}
	}
	if d := backoff.New(backoff.Policy{Floor: 9, Jitter: 0.1}, nil).Next(); d != 9 {
		t.Errorf("jittered 9 ns: %v", d)
	}
}

// TestWait: each Wait is a timer of the clock, tagged, of the schedule's
// next delay, and returns once the clock has moved that far.
func TestWait(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	clk := mockClock(t)
	trap := clk.Trap().NewTimer("test", "retry")
	defer trap.Close()
	b := backoff.New(backoff.Policy{Floor: time.Second, Cap: 3 * time.Second}, clk, "test", "retry")
	for _, want := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second} {
		done := make(chan error, 1)
		go func() { done <- b.Wait(ctx) }()
		call := trap.MustWait(ctx)
		if call.Duration != want {
			t.Fatalf("waits %v, want %v", call.Duration, want)
		}
		call.MustRelease(ctx)
		clk.Advance(want - time.Nanosecond).MustWait(ctx)
		select {
		case err := <-done:
			t.Fatalf("Wait returned %v before its delay", err)
		default:
		}
		clk.Advance(time.Nanosecond).MustWait(ctx)
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("Wait did not return once its delay passed")
		}
	}
}

// TestWaitCancelled: Wait returns ctx's error as soon as ctx ends, with
// its timer stopped, and at once for a context already done.
func TestWaitCancelled(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	clk := mockClock(t)
	trap := clk.Trap().NewTimer("retry")
	closeTrap := sync.OnceFunc(trap.Close)
	defer closeTrap()
	b := backoff.New(backoff.Policy{Floor: time.Hour}, clk, "retry")
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Wait(wctx) }()
	trap.MustWait(ctx).MustRelease(ctx)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Wait: %v, want context.Canceled", err)
		}
	case <-ctx.Done():
		t.Fatal("Wait did not return once its context ended")
	}
	if d, ok := clk.Peek(); ok {
		t.Errorf("a timer is left, due in %v", d)
	}
	// Already done: at once, no timer set.
	closeTrap()
	requireNoTimer(t, ctx, clk, func() {
		if err := b.Wait(wctx); !errors.Is(err, context.Canceled) {
			t.Errorf("Wait on a done context: %v", err)
		}
	})
	dctx, dcancel := context.WithDeadline(ctx, time.Now())
	defer dcancel()
	if err := backoff.Sleep(dctx, clk, time.Hour, "retry"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Sleep past its deadline: %v", err)
	}
}

// TestSleep: a pause of zero or less returns at once without a timer;
// nil is the real clock.
func TestSleep(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	clk := mockClock(t)
	for _, d := range []time.Duration{0, -time.Second} {
		requireNoTimer(t, ctx, clk, func() {
			if err := backoff.Sleep(ctx, clk, d); err != nil {
				t.Errorf("Sleep(%v): %v", d, err)
			}
		})
	}
	began := time.Now()
	if err := backoff.Sleep(ctx, nil, 5*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(began); waited < 5*time.Millisecond {
		t.Errorf("the real clock's Sleep returned after %v", waited)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
	defer cancel()
	if err := backoff.New(backoff.Policy{Floor: time.Hour}, nil).Wait(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("an hour's Wait on the real clock, for 5 ms: %v", err)
	}
}
