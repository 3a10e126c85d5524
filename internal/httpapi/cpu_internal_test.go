package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/coder/quartz"
)

// TestCPUFirstSample: with no earlier sample, cpu waits cpuFirstSample on
// the API's clock between its two reads of /proc/stat, and gives up when
// its context ends.
func TestCPUFirstSample(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clk := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
	trap := clk.Trap().NewTimer("httpapi", "cpu")
	closeTrap := sync.OnceFunc(trap.Close)
	defer closeTrap()
	a := New(Options{Logger: slog.New(slog.DiscardHandler), Clock: clk})

	type sample struct {
		count int
		err   error
	}
	done := make(chan sample, 1)
	go func() {
		n, _, err := a.cpu(ctx)
		done <- sample{n, err}
	}()
	call := trap.MustWait(ctx)
	if call.Duration != cpuFirstSample {
		t.Errorf("waits %v, want %v", call.Duration, cpuFirstSample)
	}
	call.MustRelease(ctx)
	clk.Advance(cpuFirstSample).MustWait(ctx)
	select {
	case s := <-done:
		if s.err != nil || s.count < 1 {
			t.Errorf("cpu: %d CPUs, %v", s.count, s.err)
		}
	case <-ctx.Done():
		t.Fatal("cpu did not return once its wait passed")
	}

	// A fresh API (no sample yet), its request gone: an error, at once.
	closeTrap()
	b := New(Options{Logger: slog.New(slog.DiscardHandler), Clock: clk})
	gone, stop := context.WithCancel(ctx)
	stop()
	if _, _, err := b.cpu(gone); !errors.Is(err, context.Canceled) {
		t.Errorf("cpu for a request gone: %v, want context.Canceled", err)
	}
}
