// Package backoff is the one retry schedule of envd and of its client: a
// delay that starts at a floor and grows by a factor up to a cap, spread
// by an optional jitter, waited on a quartz.Clock (so that a test drives
// it with a mock clock) and cut short when the caller's context ends.
//
// A Policy is the schedule; a Backoff walks it for one retry loop; Sleep
// is the context-aware wait on a clock underneath, for fixed pauses too.
//
// It lives at the module's root rather than under internal/ because the
// public client package retries with it, and client must not import
// envd's internals. It is kept small on purpose: it is not a general
// retry library, and it grows only with what envd and the client need.
package backoff

import (
	"context"
	"math"
	"math/rand/v2"
	"time"

	"github.com/coder/quartz"
)

// Policy is an exponential schedule. Its zero value is not useful: set
// Floor at least.
type Policy struct {
	// Floor is the first delay, and the first again after Reset. Zero or
	// less: 1 ns.
	Floor time.Duration
	// Cap is the longest delay; one below Floor is Floor. Zero: none.
	Cap time.Duration
	// Factor is how much each delay is longer than the one before. Zero:
	// 2. Below the cap a delay always grows, by at least 1 ns, whatever
	// the factor.
	Factor float64
	// Jitter spreads each delay d a Backoff hands out uniformly over
	// [d - d*Jitter/2, d + d*Jitter/2), so that many clients started
	// together do not retry in step; the schedule grows from the delays
	// before their jitter. Zero: none; above 1: 1.
	Jitter float64
	// Rand is the jitter's source: a seeded one makes the delays
	// reproducible (in a test, say). A rand.Rand is not safe for
	// concurrent use: Backoffs sharing one must not run at once. Nil:
	// math/rand/v2's.
	Rand *rand.Rand
}

// After is the delay that follows prev, without jitter: Floor when prev
// is zero or less.
func (p Policy) After(prev time.Duration) time.Duration {
	floor := max(p.Floor, 1)
	if prev <= 0 {
		return floor
	}
	factor := p.Factor
	if factor == 0 {
		factor = 2
	}
	next := time.Duration(math.MaxInt64)
	if f := float64(prev) * factor; f < math.MaxInt64 {
		next = time.Duration(f)
	}
	if next <= prev && prev < math.MaxInt64 {
		next = prev + 1
	}
	next = max(next, floor)
	if p.Cap > 0 {
		next = min(next, max(p.Cap, floor))
	}
	return next
}

// jitter spreads d as Jitter says.
func (p Policy) jitter(d time.Duration) time.Duration {
	spread := time.Duration(float64(d) * min(p.Jitter, 1))
	if spread <= 0 {
		return d
	}
	var r time.Duration
	if p.Rand != nil {
		r = time.Duration(p.Rand.Int64N(int64(spread)))
	} else {
		r = rand.N(spread)
	}
	lo := d - spread/2
	if r > math.MaxInt64-lo {
		return math.MaxInt64
	}
	return lo + r
}

// Backoff walks a Policy for one retry loop: each Wait waits the next
// delay, and Reset starts the schedule over (after a success, say). It is
// not safe for concurrent use.
type Backoff struct {
	p     Policy
	clock quartz.Clock
	tags  []string
	prev  time.Duration // the last delay handed out, before jitter; 0: none since Reset
	next  time.Duration // the delay Delay drew, not handed out yet; 0: none
}

// New returns a Backoff at the start of p's schedule. Its waits are
// timers of clock (nil: the real clock) tagged with tags, which a test's
// mock clock can trap.
func New(p Policy, clock quartz.Clock, tags ...string) *Backoff {
	if clock == nil {
		clock = quartz.NewReal()
	}
	return &Backoff{p: p, clock: clock, tags: tags}
}

// Delay is the delay the next Wait (or Next) hands out, jitter included,
// without handing it out: for a caller that logs it, or gives up rather
// than wait that long.
func (b *Backoff) Delay() time.Duration {
	if b.next == 0 {
		b.prev = b.p.After(b.prev)
		b.next = b.p.jitter(b.prev)
	}
	return b.next
}

// Next hands out the next delay without waiting it: for a caller that
// waits in its own select.
func (b *Backoff) Next() time.Duration {
	d := b.Delay()
	b.next = 0
	return d
}

// Reset starts the schedule over: the next delay is Floor.
func (b *Backoff) Reset() { b.prev, b.next = 0, 0 }

// Wait waits the next delay on the clock. It returns ctx.Err() if ctx
// ends first; the schedule has moved on either way.
func (b *Backoff) Wait(ctx context.Context) error {
	return Sleep(ctx, b.clock, b.Next(), b.tags...)
}

// Sleep waits d on clock (nil: the real clock), with a timer tagged with
// tags, and returns nil; or returns ctx.Err() as soon as ctx ends, at
// once if it has. A d of zero or less sets no timer.
func Sleep(ctx context.Context, clock quartz.Clock, d time.Duration, tags ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	if clock == nil {
		clock = quartz.NewReal()
	}
	t := clock.NewTimer(d, tags...)
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
}
