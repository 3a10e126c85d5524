package jupyter

import (
	"context"
	"fmt"
	"syscall"
	"time"
)

// A server can stop answering without exiting: its main thread blocked
// in a call that never returns (its event loop with it). Its kernels then
// cannot be reached, and nothing but a restart gives code execution back.
// The supervisor probes a ready server's health and, after HangAfter
// without an answer (and at least minFailedProbes failed probes, so that
// one probe caught across a clock jump, a VM pause say, is not enough),
// takes it for stuck: it has the server write its threads' Python stacks
// (SIGQUIT, server_hooks.py), logs them with the server's last output,
// and kills it and its kernels; the supervision loop then starts a new
// one, as after a crash.

// minFailedProbes is how many probes in a row must fail, besides
// HangAfter passing, for a server to be taken for stuck.
const minFailedProbes = 3

// stackDumpWait is how long the supervisor waits for a stuck server's
// stack dump before killing it.
const stackDumpWait = time.Second

// hungTailLines is how many of a stuck server's last output lines are
// logged: its stack dump is a few lines a thread.
const hungTailLines = 80

// watchHealth probes the server through c every ProbeInterval until ctx
// ends, and returns an error saying so if the server stopped answering;
// nil once ctx ended.
func (s *Supervisor) watchHealth(ctx context.Context, c *Client) error {
	lastOK := time.Now()
	failed := 0
	t := time.NewTimer(s.opts.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if s.opts.Paused != nil && s.opts.Paused() {
			// A frozen workload's server cannot answer; that is no hang.
			lastOK, failed = time.Now(), 0
			t.Reset(s.opts.ProbeInterval)
			continue
		}
		// Each probe may take a third of HangAfter: a slow answer is an
		// answer.
		pctx, cancel := context.WithTimeout(ctx, max(s.opts.HangAfter/minFailedProbes, s.opts.ProbeInterval))
		err := c.health(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			lastOK, failed = time.Now(), 0
		} else {
			failed++
			if since := time.Since(lastOK); failed >= minFailedProbes && since >= s.opts.HangAfter {
				return fmt.Errorf("jupyter server stopped answering: no answer to %d health probes in %s: %w",
					failed, since.Round(time.Second), err)
			}
		}
		t.Reset(s.opts.ProbeInterval)
	}
}

// killStuck logs a stuck server's stacks and last output, and kills it
// and every process of its run.
func (s *Supervisor) killStuck(run *serverRun, why error) {
	s.log.Error("jupyter server is stuck; killing it and its kernels to start a new one", "pid", run.pid, "error", why)
	// Without the hooks (a server of an older envd, adopted in an
	// upgrade) SIGQUIT ends it: it is being killed anyway.
	_ = syscall.Kill(run.pid, syscall.SIGQUIT)
	t := time.NewTimer(stackDumpWait)
	select {
	case <-run.exited:
	case <-t.C:
	}
	t.Stop()
	s.stopRun(run, false)
	s.logTail(run, hungTailLines)
}
