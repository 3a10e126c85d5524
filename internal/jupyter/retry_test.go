package jupyter_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/testutil"
)

// TestRESTRetry: a listing the server answers 500 is tried again on the
// client's clock, 50 ms first, doubling up to 1 s, until the next wait
// would go past 30 s from the first failure; it then returns the
// server's error, as it does at once when its context ends.
func TestRESTRetry(t *testing.T) {
	t.Parallel()
	ctx := testutil.Context(t, execTimeout)
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, "AttributeError: last_activity", http.StatusInternalServerError)
	}))
	defer srv.Close()
	clk := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
	trap := clk.Trap().NewTimer("jupyter", "retry")
	defer trap.Close()
	c, err := jupyter.NewClient(srv.URL, "tok", jupyter.ClientOptions{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	listed := make(chan error, 1)
	go func() {
		_, err := c.Kernels(ctx)
		listed <- err
	}()
	var waited time.Duration
	waits := 0
	want := 50 * time.Millisecond
	for waited+want <= 30*time.Second {
		call := trap.MustWait(ctx)
		if call.Duration != want {
			t.Fatalf("wait after %v: %v, want %v", waited, call.Duration, want)
		}
		call.MustRelease(ctx)
		clk.Advance(want).MustWait(ctx)
		waited += want
		waits++
		want = min(2*want, time.Second)
	}
	var herr *jupyter.HTTPError
	if err := testutil.RequireReceive(t, listed); !errors.As(err, &herr) || herr.Status != http.StatusInternalServerError {
		t.Fatalf("Kernels: %v, want the server's 500", err)
	}
	if n := calls.Load(); n != int64(waits+1) {
		t.Errorf("%d requests, want %d (%v of waits)", n, waits+1, waited)
	}

	// Cancelled while waiting: the server's error, at once.
	lctx, cancel := context.WithCancel(ctx)
	go func() {
		_, err := c.Kernels(lctx)
		listed <- err
	}()
	trap.MustWait(ctx).MustRelease(ctx)
	cancel()
	if err := testutil.RequireReceive(t, listed); !errors.As(err, &herr) || herr.Status != http.StatusInternalServerError {
		t.Fatalf("Kernels cancelled: %v, want the server's 500", err)
	}
}
