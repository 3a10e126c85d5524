package jupyter_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/testutil"
)

// stuckOnUSR2 runs the real Jupyter Server, whose main thread (its event
// loop with it) blocks for good on SIGUSR2: a server stuck without exiting.
var stuckOnUSR2 = []string{"/usr/bin/python3", "-c", `
import signal, sys, time
signal.signal(signal.SIGUSR2, lambda *_: time.sleep(3600))
from jupyter_server.serverapp import main
sys.exit(main())
`}

// waitGeneration waits until s is ready with a generation of at least gen.
func waitGeneration(t *testing.T, ctx context.Context, s *jupyter.Supervisor, gen uint64) jupyter.ServerStatus {
	t.Helper()
	st := s.Status()
	for st.Generation < gen || st.State != jupyter.ServerReady {
		select {
		case <-st.Changed:
		case <-ctx.Done():
			t.Fatalf("no ready generation %d: %+v", gen, st)
		}
		st = s.Status()
	}
	return st
}

// TestStuckServerRestarted: a server that stops answering (but runs on)
// is taken for stuck after HangAfter: its Python stacks are logged, it is
// killed with its kernels, and a new server takes its place.
func TestStuckServerRestarted(t *testing.T) {
	t.Parallel()
	var logs testutil.SyncBuffer
	s := startSupervisor(t, jupyter.Options{
		Command: stuckOnUSR2,
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
		// Above what a loaded machine's server can take to answer: its
		// first kernel start (an import) blocks it for a second or more.
		HangAfter:     10 * time.Second,
		ProbeInterval: 100 * time.Millisecond,
	})
	ctx := testutil.Context(t, 2*kernelTimeout)
	c, err := s.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := startKernel(t, c, "python3", jupyter.KernelOptions{})
	kernelPID := pidOf(t, k)
	before := s.Status()

	if err := syscall.Kill(before.PID, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	after := waitGeneration(t, ctx, s, before.Generation+1)
	if after.PID == before.PID {
		t.Errorf("same pid after the restart: %+v", after)
	}
	waitGone(t, 10*time.Second, before.PID, kernelPID)
	out := logs.String()
	for _, want := range []string{
		"jupyter server is stuck",
		"stopped answering: no answer to",
		"most recent call first", // the stack dump
		"in <lambda>",            // where the main thread is stuck
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
	newServerWorks(t, ctx, s)
}

// TestPausedServerNotStuck: a server that cannot answer while the
// workload is frozen on purpose (Paused) is left alone.
func TestPausedServerNotStuck(t *testing.T) {
	t.Parallel()
	var paused atomic.Bool
	const hangAfter = 4 * time.Second
	s := startSupervisor(t, jupyter.Options{
		HangAfter:     hangAfter,
		ProbeInterval: 50 * time.Millisecond,
		Paused:        paused.Load,
	})
	before := s.Status()
	paused.Store(true)
	if err := syscall.Kill(before.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * hangAfter) // many a probe's worth
	if err := syscall.Kill(before.PID, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	paused.Store(false)
	ctx := testutil.Context(t, kernelTimeout)
	c, err := s.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Not KernelSpecs: the server's first listing imports ipykernel on its
	// event loop, seconds on a loaded machine, which HangAfter would count.
	if _, err := c.Kernels(ctx); err != nil {
		t.Fatalf("the thawed server: %v", err)
	}
	if st := s.Status(); st.Generation != before.Generation || st.PID != before.PID {
		t.Errorf("the paused server was replaced: %+v, was %+v", st, before)
	}
}

// TestLogKernelOutput: what a kernel writes to its own stderr (a traceback
// as it fails to start) reaches envd's log when asked for: the last lines
// (LogRecentOutput), or from the server's word of the kernel's start
// (LogOutputSince), however much output came after.
func TestLogKernelOutput(t *testing.T) {
	t.Parallel()
	var logs testutil.SyncBuffer
	s := startSupervisor(t, jupyter.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	c, err := s.Client(testutil.Context(t, kernelTimeout))
	if err != nil {
		t.Fatal(err)
	}
	k, _ := startKernel(t, c, "python3", jupyter.KernelOptions{})
	id := k.ID()
	// The records of the last call, from its first.
	last := func() string {
		out := logs.String()
		return out[max(strings.LastIndex(out, "recent output follows"), 0):]
	}

	mustOK(t, execute(t, k, `import sys; print("envd-test-kernel-says", file=sys.__stderr__, flush=True)`))
	// The output reaches the server's tail a moment after it is written.
	found := testutil.PollFor(10*time.Second, func() bool {
		s.LogRecentOutput("the test asks")
		return strings.Contains(last(), "envd-test-kernel-says")
	})
	if out := last(); !found || !strings.Contains(out, `why="the test asks"`) {
		t.Errorf("LogRecentOutput: the log lacks the kernel's stderr:\n%s", out)
	}

	mustOK(t, execute(t, k, `for i in range(300): print("envd-test-filler", i, file=sys.__stderr__)
sys.__stderr__.flush()`))
	found = testutil.PollFor(10*time.Second, func() bool {
		s.LogOutputSince(id, "the test asks again")
		return strings.Contains(last(), "envd-test-filler 299")
	})
	out := last()
	if !found || !strings.Contains(out, "Kernel started: "+id) || !strings.Contains(out, "envd-test-kernel-says") || !strings.Contains(out, `from=`+id) {
		t.Errorf("LogOutputSince: the log lacks the kernel's start, its stderr or the last filler line:\n%s", out)
	}
	if n := strings.Count(out, "jupyter server output"); n > 100 {
		t.Errorf("LogOutputSince: %d lines logged, want at most 100", n)
	}
}
