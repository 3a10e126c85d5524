package filesystem_test

import (
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/quartz"

	pb "github.com/envd-dev/envd/gen/filesystem"
	"github.com/envd-dev/envd/internal/filesystem"
)

type quietLogger struct{}

func (quietLogger) Log(...any)          {}
func (quietLogger) Logf(string, ...any) {}

// TestWatchDirKeepaliveClock: a quiet WatchDir stream carries a keepalive
// each Keepalive-Ping-Interval of the clock, events restart the interval,
// and the client's leaving ends the stream; driven by a mock clock.
func TestWatchDirKeepaliveClock(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), waitLong)
	defer cancel()
	clk := quartz.NewMock(t).WithLogger(quietLogger{})
	e := newEnv(t, filesystem.Options{Clock: clk})
	dir := workdir(t)
	tickers := clk.Trap().NewTicker("streamloop", "keepalive")
	defer tickers.Close()
	w := watch(t, e.root, &pb.WatchDirRequest{Path: dir}, http.Header{"Keepalive-Ping-Interval": {"1"}}, 0)
	if call := tickers.MustWait(ctx); call.Duration != time.Second {
		t.Fatalf("keepalive every %v, want 1s", call.Duration)
	} else {
		call.MustRelease(ctx)
	}
	tickers.Close()
	keeps := func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.keeps
	}
	for n := 1; n <= 2; n++ {
		clk.Advance(time.Second).MustWait(ctx)
		for keeps() < n {
			select {
			case <-ctx.Done():
				t.Fatalf("%d keepalives after %d s of the clock", keeps(), n)
			case <-time.After(10 * time.Millisecond): // poll the collector; the clock decides
			}
		}
	}

	resets := clk.Trap().TickerReset("streamloop", "keepalive")
	defer resets.Close()
	clk.Advance(500 * time.Millisecond).MustWait(ctx)
	if err := os.WriteFile(dir+"/f", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.waitFor(t, "create f")
	resets.MustWait(ctx).MustRelease(ctx)
	resets.Close()
	if d, ok := clk.Peek(); !ok || d != time.Second {
		t.Errorf("next keepalive in %v (%v), want a full second after the event", d, ok)
	}

	w.cancel()
	<-w.done
	if connect.CodeOf(w.err) != connect.CodeCanceled {
		t.Errorf("stream ended with %v, want canceled", w.err)
	}
	if got := keeps(); got != 2 {
		t.Errorf("%d keepalives in 2.5 s of the clock at 1 s intervals, want 2", got)
	}
}
