package interpreter_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/internal/interpreter"
	"github.com/envd-dev/envd/internal/testutil"
)

type quietLogger struct{}

func (quietLogger) Log(...any)          {}
func (quietLogger) Logf(string, ...any) {}

// TestFlowLateReaderAfterQuiet: after a second of quiet, a reader that
// comes 5 ms late into a 128 KiB burst of kernel output through a 64 KiB
// event log loses nothing (it once lost 64 KiB when the grace counted
// from its last read rather than from when the runner first waited for
// it).
func TestFlowLateReaderAfterQuiet(t *testing.T) {
	t.Parallel()
	const (
		logBytes = 64 << 10
		pieces   = 16
		piece    = 8 << 10 // each print flushed: one stream message
		grace    = time.Second
	)
	ctx := testutil.Context(t, execTimeout)
	clk := quartz.NewMock(t).WithLogger(quietLogger{})
	eng := interpreter.New(interpreter.Options{
		Supervisor:  shared.sup,
		Logger:      testLogger(),
		LogBytes:    logBytes,
		ReaderGrace: grace,
		Clock:       clk,
		DefaultCwd:  func() string { return "/tmp" },
	})
	defer eng.Close()
	c, err := eng.CreateContext(testutil.Context(t, kernelTimeout), "python", "/tmp")
	if err != nil {
		t.Fatalf("CreateContext: %v", err)
	}
	defer func() { _ = eng.RemoveContext(testutil.Context(t, time.Minute), c.ID) }()

	gate := filepath.Join(t.TempDir(), "go")
	code := fmt.Sprintf(`import os, time
while not os.path.exists(%q):
    time.sleep(0.005)
for i in range(%d):
    print("x" * %d, flush=True)
`, gate, pieces, piece-1)
	x, rd, err := eng.Execute(ctx, interpreter.ExecuteRequest{Code: code, ContextID: c.ID})
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	defer rd.Close()
	var stdout strings.Builder
	var lost int64
	ended := false
	read := func() {
		evs, err := rd.Read()
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("Read: %v", err)
		}
		for _, ev := range evs {
			switch ev.Kind {
			case interpreter.EventStdout:
				stdout.WriteString(ev.Text)
			case interpreter.EventLost:
				lost += ev.Lost
			case interpreter.EventEnd:
				ended = true
			}
		}
	}
	read()                                 // whatever came before the burst
	clk.Advance(time.Second).MustWait(ctx) // a quiet second

	trap := clk.Trap().NewTimer("outbuf", "pace")
	defer trap.Close()
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	calls := make(chan *quartz.Call, 1)
	waitCtx, cancel := context.WithCancel(ctx)
	go func() {
		defer close(calls)
		if call, err := trap.Wait(waitCtx); err == nil {
			calls <- call
		}
	}()
	select {
	case call := <-calls:
		cancel()
		if call == nil {
			t.Fatal("the execution never waited for its reader")
		}
		call.MustRelease(ctx)
		trap.Close()
		clk.Advance(5 * time.Millisecond).MustWait(ctx) // the reader is 5 ms late
	case <-x.Done():
		cancel()
		<-calls
		t.Error("the execution ended without waiting for its reader")
	}
	for !ended {
		read()
		if !ended {
			select {
			case <-rd.Wait():
			case <-ctx.Done():
				t.Fatalf("no end after %d bytes of stdout", stdout.Len())
			}
		}
	}
	if lost != 0 || stdout.Len() != pieces*piece {
		t.Fatalf("the late reader got %d bytes of stdout and lost %d bytes of events, want %d and 0", stdout.Len(), lost, pieces*piece)
	}
	if end := x.End(); end == nil || end.Reason != interpreter.EndOK {
		t.Errorf("end = %+v, want ok", end)
	}
}
