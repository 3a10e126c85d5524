package streamloop_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/coder/quartz"
	"go.uber.org/goleak"

	"github.com/envd-dev/envd/internal/outbuf"
	"github.com/envd-dev/envd/internal/streamloop"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type quietLogger struct{}

func (quietLogger) Log(...any)          {}
func (quietLogger) Logf(string, ...any) {}

const bound = 30 * time.Second // turns a hang into a failure; measures nothing

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	t.Cleanup(cancel)
	return ctx
}

// stream is a server stream over a real outbuf log: what the loop sends
// goes to msgs ("data:<bytes>", "keepalive", "end").
type stream struct {
	log  *outbuf.Log
	rd   *outbuf.Reader
	msgs chan string
	// sendErr, when set, fails every send.
	sendErr error
}

func newStream(t *testing.T) *stream {
	l := outbuf.New(1 << 20)
	s := &stream{log: l, rd: l.Follow(outbuf.Oldest), msgs: make(chan string, 100)}
	t.Cleanup(s.rd.Close)
	return s
}

func (s *stream) send(m string) error {
	if s.sendErr != nil {
		return s.sendErr
	}
	s.msgs <- m
	return nil
}

func (s *stream) loop(clk quartz.Clock, keepalive time.Duration) streamloop.Loop {
	return streamloop.Loop{
		Clock:     clk,
		Keepalive: keepalive,
		Ready:     s.rd.Wait,
		Pump: func() (bool, error) {
			recs, err := s.rd.Read()
			if errors.Is(err, io.EOF) {
				if err := s.send("end"); err != nil {
					return false, err
				}
				return false, streamloop.Done
			}
			if err != nil {
				return false, err
			}
			for _, r := range recs {
				if err := s.send("data:" + string(r.Data)); err != nil {
					return false, err
				}
			}
			return len(recs) > 0, nil
		},
		SendKeepalive: func() error { return s.send("keepalive") },
	}
}

// run runs l on its own goroutine; the returned channel gets Run's result.
func run(ctx context.Context, l streamloop.Loop) <-chan error {
	res := make(chan error, 1)
	go func() { res <- l.Run(ctx) }()
	return res
}

func next(ctx context.Context, t *testing.T, s *stream) string {
	t.Helper()
	select {
	case m := <-s.msgs:
		return m
	case <-ctx.Done():
		t.Fatal("no message sent")
		return ""
	}
}

func result(ctx context.Context, t *testing.T, res <-chan error) error {
	t.Helper()
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		t.Fatal("the loop did not end")
		return nil
	}
}

// TestKeepalive: a quiet stream carries a keepalive every interval; data
// restarts the interval; the stream ends after its end is sent.
func TestKeepalive(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	clk := quartz.NewMock(t).WithLogger(quietLogger{})
	s := newStream(t)
	started := clk.Trap().NewTicker("streamloop", "keepalive")
	defer started.Close()
	res := run(ctx, s.loop(clk, time.Second))
	started.MustWait(ctx).MustRelease(ctx)
	started.Close()

	for range 2 {
		clk.Advance(time.Second).MustWait(ctx)
		if m := next(ctx, t, s); m != "keepalive" {
			t.Fatalf("sent %q after a quiet second, want a keepalive", m)
		}
	}
	clk.Advance(500 * time.Millisecond).MustWait(ctx)
	reset := clk.Trap().TickerReset("streamloop", "keepalive")
	defer reset.Close()
	s.log.Write(1, []byte("hello"))
	if m := next(ctx, t, s); m != "data:hello" {
		t.Fatalf("sent %q, want the data", m)
	}
	reset.MustWait(ctx).MustRelease(ctx)
	reset.Close()
	if d, ok := clk.Peek(); !ok || d != time.Second {
		t.Fatalf("next keepalive in %v (%v), want a full second after the data", d, ok)
	}
	clk.Advance(time.Second).MustWait(ctx)
	if m := next(ctx, t, s); m != "keepalive" {
		t.Fatalf("sent %q, want a keepalive", m)
	}
	s.log.Close()
	if m := next(ctx, t, s); m != "end" {
		t.Fatalf("sent %q, want the end", m)
	}
	if err := result(ctx, t, res); err != nil {
		t.Fatalf("Run = %v after the end, want nil", err)
	}
}

// TestNoKeepalive: with no interval, no ticker runs at all.
func TestNoKeepalive(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	clk := quartz.NewMock(t).WithLogger(quietLogger{})
	s := newStream(t)
	s.log.Write(1, []byte("a"))
	res := run(ctx, s.loop(clk, 0))
	if m := next(ctx, t, s); m != "data:a" {
		t.Fatalf("sent %q, want the data", m)
	}
	if _, ok := clk.Peek(); ok {
		t.Fatal("a timer or ticker runs without a keepalive interval")
	}
	s.log.Close()
	if m := next(ctx, t, s); m != "end" {
		t.Fatalf("sent %q, want the end", m)
	}
	if err := result(ctx, t, res); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
}

// TestEndReasons: every way a stream ends gives Run's result.
func TestEndReasons(t *testing.T) {
	t.Parallel()
	errSend := errors.New("send failed")
	tests := []struct {
		name string
		// act ends the stream once the loop runs.
		act  func(s *stream, cancel context.CancelFunc, clk *quartz.Mock)
		want func(err error) bool
	}{
		{"end sent", func(s *stream, _ context.CancelFunc, _ *quartz.Mock) { s.log.Close() },
			func(err error) bool { return err == nil }},
		{"context ends", func(_ *stream, cancel context.CancelFunc, _ *quartz.Mock) { cancel() },
			func(err error) bool { return errors.Is(err, context.Canceled) }},
		{"send fails", func(s *stream, _ context.CancelFunc, _ *quartz.Mock) {
			s.sendErr = errSend
			s.log.Write(1, []byte("x"))
		}, func(err error) bool { return errors.Is(err, errSend) }},
		{"keepalive fails", func(s *stream, _ context.CancelFunc, clk *quartz.Mock) {
			s.sendErr = errSend
			clk.Advance(time.Second)
		}, func(err error) bool { return errors.Is(err, errSend) }},
		{"source fails", func(s *stream, _ context.CancelFunc, _ *quartz.Mock) {
			s.log.Write(1, make([]byte, 2<<20)) // evicts what the reader had not read
		}, func(err error) bool { _, ok := errors.AsType[*outbuf.LostError](err); return ok }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			clk := quartz.NewMock(t).WithLogger(quietLogger{})
			s := newStream(t)
			s.log.Write(1, []byte("first"))
			started := clk.Trap().NewTicker("streamloop", "keepalive")
			defer started.Close()
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			res := run(rctx, s.loop(clk, time.Second))
			started.MustWait(ctx).MustRelease(ctx)
			started.Close()
			if m := next(ctx, t, s); m != "data:first" {
				t.Fatalf("sent %q, want the data", m)
			}
			// The loop sent the data; sendErr is read only by it, after
			// its next wake-up, which the act causes.
			tt.act(s, cancel, clk)
			if err := result(ctx, t, res); !tt.want(err) {
				t.Fatalf("Run = %v", err)
			}
		})
	}
}

// TestEndWinsOverCancel: when the request's context ends just as the
// source's end comes, the end is sent.
func TestEndWinsOverCancel(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := newStream(t)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l := s.loop(nil, time.Hour)
	calls := 0
	gate := make(chan struct{})
	waiting := make(chan struct{})
	ready := l.Ready
	l.Ready = func() <-chan struct{} {
		if calls++; calls == 1 {
			close(waiting)
			<-gate // both the end and the cancellation come now
		}
		return ready()
	}
	res := run(rctx, l)
	<-waiting
	cancel()
	s.log.Close()
	close(gate)
	if m := next(ctx, t, s); m != "end" {
		t.Fatalf("sent %q, want the end", m)
	}
	if err := result(ctx, t, res); err != nil {
		t.Fatalf("Run = %v, want nil: the end was sent", err)
	}
}
