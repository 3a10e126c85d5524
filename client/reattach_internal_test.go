package client

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/envd-dev/envd/backoff"
)

// TestReattachSchedule: a run reattaches after 100, 200, then 300 ms.
func TestReattachSchedule(t *testing.T) {
	t.Parallel()
	b := backoff.New(reattachBackoff, nil)
	var got []time.Duration
	for range maxReattach {
		got = append(got, b.Next())
	}
	if want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond}; !slices.Equal(got, want) {
		t.Errorf("reattach delays %v, want %v", got, want)
	}
}

// doneWatch tells when its Done is first asked for: a wait on it began.
type doneWatch struct {
	context.Context
	once    sync.Once
	watched chan struct{}
}

func (c *doneWatch) Done() <-chan struct{} {
	c.once.Do(func() { close(c.watched) })
	return c.Context.Done()
}

// TestReattachWaitCancelled: the wait before a reattach ends with the
// run's context, and the run does not reattach (r.c is nil: an attempt
// would panic).
func TestReattachWaitCancelled(t *testing.T) {
	t.Parallel()
	base, cancel := context.WithCancel(context.Background())
	ctx := &doneWatch{Context: base, watched: make(chan struct{})}
	r := &Execution{ctx: ctx, op: "execute"}
	r.res.ID = "exec-1"
	r.retry = backoff.New(backoff.Policy{Floor: time.Hour}, nil) // a wait only the context ends
	done := make(chan bool, 1)
	go func() { done <- r.reattach(connect.NewError(connect.CodeUnavailable, errors.New("connection reset"))) }()
	select {
	case <-ctx.watched: // waiting
	case <-time.After(30 * time.Second):
		t.Fatal("the reattach never waited on its context")
	}
	cancel()
	select {
	case ok := <-done:
		if ok {
			t.Error("reattached after its context ended")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the reattach's wait ignores its context")
	}
}
