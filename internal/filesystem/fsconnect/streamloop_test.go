package fsconnect_test

import (
	"context"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/quartz"

	pb "github.com/envd-dev/envd/gen/filesystem"
	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/testutil"
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
	dir := testutil.WorkDir(t)
	tickers := clk.Trap().NewTicker("streamloop", "keepalive")
	defer tickers.Close()

	sctx, leave := context.WithCancel(ctx)
	defer leave()
	req := connect.NewRequest(&pb.WatchDirRequest{Path: dir})
	req.Header().Set("Keepalive-Ping-Interval", "1")
	stream, err := e.root.WatchDir(sctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	next := func(what string) *pb.WatchDirResponse {
		t.Helper()
		if !stream.Receive() {
			t.Fatalf("stream ended waiting for %s: %v", what, stream.Err())
		}
		return stream.Msg()
	}
	if m := next("start"); m.GetStart() == nil {
		t.Fatalf("first message %v, want start", m)
	}
	if call := tickers.MustWait(ctx); call.Duration != time.Second {
		t.Fatalf("keepalive every %v, want 1s", call.Duration)
	} else {
		call.MustRelease(ctx)
	}
	tickers.Close()
	for range 2 {
		clk.Advance(time.Second).MustWait(ctx)
		if m := next("a keepalive"); m.GetKeepalive() == nil {
			t.Fatalf("got %v after a quiet second, want a keepalive", m)
		}
	}

	resets := clk.Trap().TickerReset("streamloop", "keepalive")
	defer resets.Close()
	clk.Advance(500 * time.Millisecond).MustWait(ctx)
	if err := os.WriteFile(dir+"/f", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if m := next("an event"); m.GetFilesystem().GetName() != "f" {
		t.Fatalf("got %v, want an event on f", m)
	}
	resets.MustWait(ctx).MustRelease(ctx)
	resets.Close()
	if d, ok := clk.Peek(); !ok || d != time.Second {
		t.Errorf("next keepalive in %v (%v), want a full second after the event", d, ok)
	}

	leave()
	for stream.Receive() {
		if m := stream.Msg(); m.GetKeepalive() != nil {
			t.Errorf("a keepalive before the clock moved: %v", m)
		}
	}
	if connect.CodeOf(stream.Err()) != connect.CodeCanceled {
		t.Errorf("stream ended with %v, want canceled", stream.Err())
	}
}
