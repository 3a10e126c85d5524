package processtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/gen/process/processconnect"
)

// Event is what StartResponse and ConnectResponse have in common.
type Event interface{ GetEvent() *pb.ProcessEvent }

// Watcher reads one Start or Connect stream in its own goroutine and
// records what arrives. Tests wait on it from their own goroutine.
type Watcher struct {
	cancel context.CancelFunc

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change
	// All fields below are guarded by mu.
	events         int // every event, keepalives included
	pid            uint32
	started        bool
	starts         int  // start events: exactly one, the first event
	startFirst     bool // the first event was the start
	keepalives     int
	stdout         bytes.Buffer
	stderr         bytes.Buffer
	pty            bytes.Buffer
	dataBytes      int64
	end            *pb.ProcessEvent_EndEvent
	eventsAfterEnd int
	done           bool
	err            error // the stream's error once done
}

// WatchOptions tunes a Watcher.
type WatchOptions struct {
	// Count keeps only byte counts of data, for huge streams.
	Count bool
	// Context is the call's parent context (say, with a deadline). Zero:
	// context.Background().
	Context context.Context
}

// Start calls Start and watches its stream.
func Start(t testing.TB, c processconnect.ProcessClient, req *pb.StartRequest, o WatchOptions) *Watcher {
	t.Helper()
	return watch(t, o, func(ctx context.Context) (stream[*pb.StartResponse], error) {
		return c.Start(ctx, connect.NewRequest(req))
	})
}

// Connect calls Connect and watches its stream.
func Connect(t testing.TB, c processconnect.ProcessClient, sel *pb.ProcessSelector, o WatchOptions) *Watcher {
	t.Helper()
	w, err := TryConnect(t, c, sel, o)
	if err != nil {
		t.Fatalf("call: %v", err)
	}
	return w
}

// TryConnect is Connect returning the call's error (say, a deadline that
// ran out before the stream began) instead of failing the test.
func TryConnect(t testing.TB, c processconnect.ProcessClient, sel *pb.ProcessSelector, o WatchOptions) (*Watcher, error) {
	t.Helper()
	return tryWatch(t, o, func(ctx context.Context) (stream[*pb.ConnectResponse], error) {
		return c.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: sel}))
	})
}

type stream[T Event] interface {
	Receive() bool
	Msg() T
	Err() error
	Close() error
}

// watch reads the stream in a goroutine. Close cancels the call's context;
// the test's end does too, and waits for the reader.
func watch[T Event](t testing.TB, o WatchOptions, call func(context.Context) (stream[T], error)) *Watcher {
	t.Helper()
	w, err := tryWatch(t, o, call)
	if err != nil {
		t.Fatalf("call: %v", err)
	}
	return w
}

func tryWatch[T Event](t testing.TB, o WatchOptions, call func(context.Context) (stream[T], error)) (*Watcher, error) {
	t.Helper()
	parent := o.Context
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithCancel(parent)
	s, err := call(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	w := &Watcher{cancel: cancel, changed: make(chan struct{})}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for s.Receive() {
			w.record(s.Msg().GetEvent(), o)
		}
		err := s.Err()
		s.Close()
		w.mu.Lock()
		w.done = true
		w.err = err
		w.notifyLocked()
		w.mu.Unlock()
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-finished:
		case <-time.After(WaitShort):
			t.Errorf("stream reader still running %v after close", WaitShort)
		}
	})
	return w, nil
}

func (w *Watcher) notifyLocked() {
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *Watcher) record(e *pb.ProcessEvent, o WatchOptions) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.notifyLocked()
	w.events++
	if w.events == 1 {
		w.startFirst = e.GetStart() != nil
	}
	if w.end != nil {
		w.eventsAfterEnd++
	}
	switch v := e.GetEvent().(type) {
	case *pb.ProcessEvent_Start:
		w.starts++
		if !w.started {
			w.started = true
			w.pid = v.Start.GetPid()
		}
	case *pb.ProcessEvent_Keepalive:
		w.keepalives++
	case *pb.ProcessEvent_Data:
		d := v.Data
		n := len(d.GetStdout()) + len(d.GetStderr()) + len(d.GetPty())
		w.dataBytes += int64(n)
		if o.Count {
			return
		}
		w.stdout.Write(d.GetStdout())
		w.stderr.Write(d.GetStderr())
		w.pty.Write(d.GetPty())
	case *pb.ProcessEvent_End:
		w.end = v.End
	}
}

// Snapshot is what a Watcher has seen so far.
type Snapshot struct {
	Events     int
	Pid        uint32
	Started    bool
	Keepalives int
	Stdout     string
	Stderr     string
	PTY        string
	DataBytes  int64
	End        *pb.ProcessEvent_EndEvent
	// Starts counts start events; StartFirst tells whether the first
	// event was one.
	Starts     int
	StartFirst bool
	// EventsAfterEnd counts events received after the end event; always 0
	// in a correct stream.
	EventsAfterEnd int
	Done           bool
	Err            error
}

// Snapshot returns a copy of what was seen so far.
func (w *Watcher) Snapshot() Snapshot {
	w.mu.Lock()
	defer w.mu.Unlock()
	return Snapshot{
		Events: w.events, Pid: w.pid, Started: w.started, Keepalives: w.keepalives,
		Stdout: w.stdout.String(), Stderr: w.stderr.String(), PTY: w.pty.String(),
		DataBytes: w.dataBytes, End: w.end, Starts: w.starts, StartFirst: w.startFirst,
		EventsAfterEnd: w.eventsAfterEnd, Done: w.done, Err: w.err,
	}
}

// WaitFor waits until cond holds on a snapshot, and returns that snapshot.
// It fails the test when timeout passes, or when the stream ends first.
func (w *Watcher) WaitFor(t testing.TB, timeout time.Duration, what string, cond func(Snapshot) bool) Snapshot {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		w.mu.Lock()
		ch := w.changed
		w.mu.Unlock()
		s := w.Snapshot()
		if cond(s) {
			return s
		}
		if s.Done {
			t.Fatalf("stream ended before %s: err=%v end=%v\n%s", what, s.Err, s.End, s)
		}
		select {
		case <-ch:
		case <-timer.C:
			t.Fatalf("no %s after %v:\n%s", what, timeout, s)
		}
	}
}

// Pid waits for the start event and returns its pid.
func (w *Watcher) Pid(t testing.TB) uint32 {
	t.Helper()
	return w.WaitFor(t, WaitShort, "start event", func(s Snapshot) bool { return s.Started }).Pid
}

// Output waits until stdout+stderr+pty output contains sub.
func (w *Watcher) Output(t testing.TB, timeout time.Duration, sub string) Snapshot {
	t.Helper()
	return w.WaitFor(t, timeout, fmt.Sprintf("output %q", sub), func(s Snapshot) bool {
		return strings.Contains(s.Stdout+s.Stderr+s.PTY, sub)
	})
}

// Done waits for the stream to end, however it ends.
func (w *Watcher) Done(t testing.TB, timeout time.Duration) Snapshot {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		w.mu.Lock()
		ch := w.changed
		done := w.done
		w.mu.Unlock()
		if done {
			return w.Snapshot()
		}
		select {
		case <-ch:
		case <-timer.C:
			t.Fatalf("stream not over after %v:\n%s", timeout, w.Snapshot())
		}
	}
}

// End waits for the stream to end cleanly with an end event, and checks
// the framing: one start event first, one end event last.
func (w *Watcher) End(t testing.TB, timeout time.Duration) Snapshot {
	t.Helper()
	s := w.Done(t, timeout)
	if s.Err != nil {
		t.Fatalf("stream failed: %v\n%s", s.Err, s)
	}
	if s.End == nil {
		t.Fatalf("stream ended without an end event\n%s", s)
	}
	if s.EventsAfterEnd != 0 {
		t.Fatalf("%d events after the end event\n%s", s.EventsAfterEnd, s)
	}
	if !s.StartFirst || s.Starts != 1 {
		t.Fatalf("start first: %v, start events: %d; want one, first\n%s", s.StartFirst, s.Starts, s)
	}
	return s
}

// Close drops the stream now, as a client that goes away.
func (w *Watcher) Close() { w.cancel() }

// Code is the Connect code of err, or a readable stand-in.
func Code(err error) string {
	if err == nil {
		return "ok"
	}
	if ce := new(connect.Error); errors.As(err, &ce) {
		return ce.Code().String()
	}
	return "not a connect error: " + err.Error()
}

func (s Snapshot) String() string {
	clip := func(x string) string {
		if len(x) > 2000 {
			return x[:1000] + "…" + x[len(x)-1000:]
		}
		return x
	}
	return fmt.Sprintf("  started=%v pid=%d events=%d keepalives=%d data=%dB done=%v err=%v\n  end=%v\n  stdout=%q\n  stderr=%q\n  pty=%q",
		s.Started, s.Pid, s.Events, s.Keepalives, s.DataBytes, s.Done, s.Err, s.End, clip(s.Stdout), clip(s.Stderr), clip(s.PTY))
}
