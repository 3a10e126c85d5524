package jupyter_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/testutil"
)

// TestSupervisorRestartBackoff: a server that keeps failing is restarted
// after MinBackoff, doubling up to MaxBackoff, on the supervisor's clock;
// a run that lasted 30 s starts the schedule over; Stop ends the wait.
func TestSupervisorRestartBackoff(t *testing.T) {
	t.Parallel()
	ctx := testutil.Context(t, execTimeout)
	clk := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
	trap := clk.Trap().NewTimer("jupyter", "restart")
	defer trap.Close()
	// The "server" runs while hold exists, and fails (exit 3) when it
	// does not; the supervisor's flags follow hold in its argv.
	hold := filepath.Join(t.TempDir(), "hold")
	s := jupyter.New(jupyter.Options{
		Command:    []string{"/bin/sh", "-c", `while [ -e "$0" ]; do sleep 0.01; done; exit 3`, hold},
		MinBackoff: 100 * time.Millisecond,
		MaxBackoff: 400 * time.Millisecond,
		Clock:      clk,
		Logger:     slog.New(slog.DiscardHandler),
	})
	defer s.Stop(context.Background())
	if err := s.Start(ctx); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("start error = %v", err)
	}
	restartAfter := func(want time.Duration) {
		t.Helper()
		call := trap.MustWait(ctx)
		if call.Duration != want {
			t.Fatalf("restart after %v, want %v", call.Duration, want)
		}
		call.MustRelease(ctx)
	}
	ms := time.Millisecond
	for _, d := range []time.Duration{100 * ms, 200 * ms, 400 * ms} {
		restartAfter(d)
		clk.Advance(d).MustWait(ctx)
	}
	restartAfter(400 * ms)

	// A run of stableRun: the next restart is after MinBackoff again.
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	clk.Advance(400 * ms).MustWait(ctx)
	testutil.Poll(t, "the server to run again", func() bool {
		st := s.Status()
		return st.State == jupyter.ServerStarting && st.PID != 0
	})
	clk.Advance(30 * time.Second).MustWait(ctx)
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	restartAfter(100 * ms)

	// Stop ends the wait: the clock is not moved.
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(ctx) }()
	if err := testutil.RequireReceive(t, stopped); err != nil {
		t.Fatalf("stop: %v", err)
	}
}
