package process_test

import (
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/internal/outbuf"
	"github.com/envd-dev/envd/internal/process"
	"github.com/envd-dev/envd/internal/testutil"
)

type quietLogger struct{}

func (quietLogger) Log(...any)          {}
func (quietLogger) Logf(string, ...any) {}

// paceContext bounds a test's waits on the mock clock: it only turns a hang
// into a failure.
func paceContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitLong)
	t.Cleanup(cancel)
	return ctx
}

// TestFlowLateReaderAfterQuiet: after a second of quiet, a follower that
// comes 5 ms late into a 128 KiB burst through a 64 KiB log loses nothing
// (the paced log's late follower, for process output).
func TestFlowLateReaderAfterQuiet(t *testing.T) {
	t.Parallel()
	const logSize, burst = 64 << 10, 128 << 10
	ctx := paceContext(t)
	clk := quartz.NewMock(t).WithLogger(quietLogger{})
	m := newManager(t, process.Options{LogSize: logSize, ReaderGrace: time.Second, Clock: clk})
	p := startDomain(t, m, "sh", "-c", "echo ready; read x; head -c "+strconv.Itoa(burst)+" /dev/zero")
	r := p.Follow()
	defer r.Close()
	var got int64
	for got < int64(len("ready\n")) {
		recs, err := r.Read()
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs {
			got += int64(len(rec.Data))
		}
		if len(recs) == 0 {
			select {
			case <-r.Wait():
			case <-ctx.Done():
				t.Fatal("no ready line")
			}
		}
	}
	clk.Advance(time.Second).MustWait(ctx) // a quiet second

	trap := clk.Trap().NewTimer("outbuf", "pace")
	defer trap.Close()
	if err := p.WriteStdin(ctx, []byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if call := testutil.FirstWait(ctx, t, trap, p.Done()); call != nil { // the drain waits for the reader
		if call.Duration != time.Second {
			t.Errorf("the drain waits %v for the reader, want the grace, 1s", call.Duration)
		}
		call.MustRelease(ctx)
		trap.Close()
		clk.Advance(5 * time.Millisecond).MustWait(ctx) // the reader is 5 ms late
	} else {
		t.Error("the program ended without waiting for its reader")
	}
	got, lost := readToEnd(ctx, t, r)
	if got != burst || lost != 0 {
		t.Fatalf("the late reader got %d bytes and lost %d, want %d and 0", got, lost, burst)
	}
}

// readToEnd reads r until io.EOF, counting the bytes it gets and loses.
func readToEnd(ctx context.Context, t *testing.T, r *process.Reader) (got, lost int64) {
	t.Helper()
	for {
		recs, err := r.Read()
		if errors.Is(err, io.EOF) {
			return got, lost
		}
		if le, ok := errors.AsType[*outbuf.LostError](err); ok {
			lost += le.Lost()
			continue
		}
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		for _, rec := range recs {
			got += int64(len(rec.Data))
		}
		if len(recs) == 0 {
			select {
			case <-r.Wait():
			case <-ctx.Done():
				t.Fatalf("output not over after %d bytes: %v", got, ctx.Err())
			}
		}
	}
}

// TestFlowStalledReaderLeftBehind: a follower that reads nothing holds the
// program exactly ReaderGrace, once; then the program runs on, and the
// follower's next Read says how many bytes it lost.
func TestFlowStalledReaderLeftBehind(t *testing.T) {
	t.Parallel()
	const logSize, total = 64 << 10, 1 << 20
	const grace = 2 * time.Second
	ctx := paceContext(t)
	clk := quartz.NewMock(t).WithLogger(quietLogger{})
	m := newManager(t, process.Options{LogSize: logSize, ReaderGrace: grace, Clock: clk})
	trap := clk.Trap().NewTimer("outbuf", "pace")
	defer trap.Close()
	p := startDomain(t, m, "sh", "-c", "read x; head -c "+strconv.Itoa(total)+" /dev/zero")
	stuck := p.Follow()
	defer stuck.Close()
	if err := p.WriteStdin(ctx, []byte("go\n")); err != nil {
		t.Fatal(err)
	}
	call := testutil.FirstWait(ctx, t, trap, p.Done())
	if call == nil {
		t.Fatal("the program ended without waiting for its reader")
	}
	if call.Duration != grace {
		t.Errorf("the drain waits %v, want the grace %v", call.Duration, grace)
	}
	call.MustRelease(ctx)
	trap.Close()
	clk.Advance(grace - time.Nanosecond).MustWait(ctx)
	select {
	case <-p.Done():
		t.Fatal("the program ended before the grace was over")
	default:
	}
	clk.Advance(time.Nanosecond).MustWait(ctx)
	waitDone(t, p, waitShort) // no more waiting: the clock stays still
	_, err := stuck.Read()
	lost, ok := errors.AsType[*outbuf.LostError](err)
	if !ok {
		t.Fatalf("stuck reader: Read = %v, want a *outbuf.LostError", err)
	}
	rest, more := readToEnd(ctx, t, stuck)
	if lost.From != 0 || more != 0 || lost.Lost()+rest != total || rest > logSize {
		t.Errorf("lost %d bytes from %d, then read %d: want all %d from 0, at most %d retained", lost.Lost(), lost.From, rest, total, logSize)
	}
}

// TestKilledOutputNotLost: output a killed program wrote before it died is
// still in its pipe when its group is gone; the drains read it on past
// killGrace, so a follower gets every byte or is told of each one it lost.
// (A read deadline of "now" once dropped what the pipe still held, silently.)
func TestKilledOutputNotLost(t *testing.T) {
	t.Parallel()
	const logSize, total = 64 << 10, 600000
	ctx := paceContext(t)
	// The clock never moves: the drain waits for the stalled follower until
	// the kill stops pacing.
	clk := quartz.NewMock(t).WithLogger(quietLogger{})
	m := newManager(t, process.Options{LogSize: logSize, ReaderGrace: time.Hour, Clock: clk})
	// Followed from the first byte: a follower taken after the start may
	// come when the head of the output is already gone (and rightly not
	// be told, since it follows from the oldest byte retained).
	p, stuck := startFollowed(t, m, "sh", "-c", "head -c "+strconv.Itoa(total)+" /dev/zero; exec sleep 1000")
	defer stuck.Close()
	comm := "/proc/" + strconv.Itoa(int(p.Pid())) + "/comm"
	testutil.Poll(t, "the program to have written its output", func() bool {
		b, err := os.ReadFile(comm)
		return err == nil && strings.TrimSpace(string(b)) == "sleep"
	})
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitDone(t, p, waitShort) // the follower has read nothing yet
	got, lost := readToEnd(ctx, t, stuck)
	if got+lost != total {
		t.Fatalf("the follower got %d bytes and was told of %d lost: %d of %d vanished", got, lost, total-got-lost, total)
	}
}

// startFollowed starts cmd as startDomain does, with a follower from its
// first byte (Manager.StartFollowed).
func startFollowed(t *testing.T, m *process.Manager, cmd string, args ...string) (*process.Process, *process.Reader) {
	t.Helper()
	p, rd, err := m.StartFollowed(domainOptions(t, cmd, args))
	if err != nil {
		t.Fatalf("Start %s: %v", cmd, err)
	}
	return p, rd
}

// TestStartFollowedFromFirstByte: the reader StartFollowed returns exists
// before the program runs, so a program that writes many logs' worth at
// once is paced to it from its first byte: it gets all of it, however late
// it starts reading. (The service's Start stream reads this way; it used
// to take its reader after the start, and could silently miss the head of
// a fast program's output.)
func TestStartFollowedFromFirstByte(t *testing.T) {
	t.Parallel()
	const logSize, total = 64 << 10, 600000
	ctx := paceContext(t)
	clk := quartz.NewMock(t).WithLogger(quietLogger{}) // still: the drain waits for the reader
	m := newManager(t, process.Options{LogSize: logSize, ReaderGrace: time.Hour, Clock: clk})
	p, rd := startFollowed(t, m, "head", "-c", strconv.Itoa(total), "/dev/zero")
	defer rd.Close()
	// head is done writing (the pipe holds a megabyte) before a byte is read.
	testutil.Poll(t, "the program to have written its output", func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(int(p.Pid())) + "/stat")
		return err != nil || strings.Contains(string(b), ") Z ") // exited
	})
	if got, lost := readToEnd(ctx, t, rd); got != total || lost != 0 {
		t.Fatalf("the follower got %d bytes and lost %d, want all %d", got, lost, total)
	}
}
