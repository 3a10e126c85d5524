package jupyter_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/jupyter/startup"
	"github.com/envd-dev/envd/internal/testutil"
)

// Probe settings of these tests: a deadline shorter than the quiet period,
// so that each Advance reaches exactly one of them.
const (
	probeAfter   = 10 * time.Second
	probeTimeout = 5 * time.Second
	replyGrace   = 3 * time.Second
)

func watchedKernel(t *testing.T) (*jupyter.Kernel, *quartz.Mock) {
	t.Helper()
	clk := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
	k, _ := startKernel(t, shared.client, "python3", jupyter.KernelOptions{
		Clock: clk, ProbeAfter: probeAfter, ProbeTimeout: probeTimeout, ReplyGrace: replyGrace,
	})
	return k, clk
}

// TestClosedStdoutDoesNotHang: in ipykernel 6.17, sys.stdout.close()
// joins the thread that watches fd 1, which blocks in a read until
// something writes there: the code never returns, like any code that
// blocks, so no probe can end it (an interrupt can). envd's IPython
// startup files make closing the kernel's streams do nothing (before: the
// execution never ended).
func TestClosedStdoutDoesNotHang(t *testing.T) {
	t.Parallel()
	l, err := startup.Install(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := startSupervisor(t, jupyter.Options{Env: l.Env()})
	c, err := s.Client(testutil.Context(t, kernelTimeout))
	if err != nil {
		t.Fatal(err)
	}
	k, _ := startKernel(t, c, "python3", jupyter.KernelOptions{})
	if got := mustOK(t, execute(t, k, "import sys; print('before'); sys.stdout.close(); sys.stderr.close()")).stdout; got != "before\n" {
		t.Errorf("stdout %q", got)
	}
	if r := mustOK(t, execute(t, k, "import sys; print('after'); print('err', file=sys.stderr)")); r.stdout != "after\n" || r.stderr != "err\n" {
		t.Errorf("after closing: stdout %q stderr %q", r.stdout, r.stderr)
	}
}

// TestIdleWithoutReplyEndsExecution: a kernel that goes idle without
// sending the execute_reply (here its send is patched to drop it; ipykernel
// does it when it swallows an interrupt) but still answers: the shell
// probe sent on idle proves the request over, and the execution ends with
// ErrNoReply (before: it never ended).
func TestIdleWithoutReplyEndsExecution(t *testing.T) {
	t.Parallel()
	k, _ := watchedKernel(t)
	ctx := testutil.Context(t, execTimeout)
	e, err := k.Execute(ctx, `
k = get_ipython().kernel
send = k.session.send
def drop_reply(stream, msg_or_type, *args, **kwargs):
    if msg_or_type == 'execute_reply':
        k.session.send = send
        return None
    return send(stream, msg_or_type, *args, **kwargs)
k.session.send = drop_reply`, jupyter.ExecuteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Wait(ctx); !errors.Is(err, jupyter.ErrNoReply) || !strings.Contains(err.Error(), "answered a later request") {
		t.Fatalf("execution ended with %v, want ErrNoReply", err)
	}
	mustOK(t, execute(t, k, "1"))
}

// TestIdleWithoutReplyBusyShell: a kernel that publishes idle for the
// request but neither replies nor answers the shell probe (here the idle
// is forged, then the code sleeps) ends the execution after ReplyGrace.
func TestIdleWithoutReplyBusyShell(t *testing.T) {
	t.Parallel()
	k, clk := watchedKernel(t)
	ctx := testutil.Context(t, execTimeout)
	grace := clk.Trap().NewTimer("jupyter", "reply-grace")
	defer grace.Close()
	e := runUntil(t, ctx, k, "execute_input", `
import time
k = get_ipython().kernel
k.session.send(k.iopub_socket, 'status', {'execution_state': 'idle'}, parent=k.get_parent('shell'), ident=k._topic('status'))
time.sleep(600)`)
	grace.MustWait(ctx).MustRelease(ctx)
	clk.Advance(replyGrace).MustWait(ctx)
	if err := e.Wait(ctx); !errors.Is(err, jupyter.ErrNoReply) || !strings.Contains(err.Error(), "went idle") {
		t.Fatalf("execution ended with %v, want ErrNoReply after idle", err)
	}
	if err := k.Interrupt(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLongRunningCodeThenStoppedKernel: code that runs long is left alone
// while the kernel answers its probes; a kernel that stops answering (here
// SIGSTOPped) ends the execution with ErrKernelUnresponsive.
func TestLongRunningCodeThenStoppedKernel(t *testing.T) {
	t.Parallel()
	k, clk := watchedKernel(t)
	pid := pidOf(t, k)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // runs before the kernel's deletion
	ctx := testutil.Context(t, 2*execTimeout)

	flag := filepath.Join(t.TempDir(), "go")
	answered := clk.Trap().TimerStop("jupyter", "probe-timeout")
	e := runUntil(t, ctx, k, "execute_input", "import os, time\nwhile not os.path.exists("+pyQuote(flag)+"):\n    time.sleep(0.01)\nprint('done')")
	// Twelve quiet periods, two minutes of clock: each time the kernel
	// answers on control, which stops the probe's deadline.
	for range 12 {
		clk.Advance(probeAfter).MustWait(ctx)
		answered.MustWait(ctx).MustRelease(ctx)
	}
	answered.Close()
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := mustOK(t, collect(t, ctx, e)); r.stdout != "done\n" {
		t.Errorf("long-running code printed %q", r.stdout)
	}

	// Stopped from outside once running: stopped from inside, it might
	// not have sent its execute_input yet.
	probed := clk.Trap().NewTimer("jupyter", "probe-timeout")
	defer probed.Close()
	e = runUntil(t, ctx, k, "execute_input", "while True: pass")
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	clk.Advance(probeAfter).MustWait(ctx)
	probed.MustWait(ctx).MustRelease(ctx)
	clk.Advance(probeTimeout).MustWait(ctx)
	if err := e.Wait(ctx); !errors.Is(err, jupyter.ErrKernelUnresponsive) {
		t.Fatalf("execution ended with %v, want ErrKernelUnresponsive", err)
	}
}

func pyQuote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}
