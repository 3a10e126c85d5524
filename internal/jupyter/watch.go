package jupyter

import (
	"fmt"
	"time"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/internal/jupyter/jwire"
)

// Tags of the clock calls tests trap.
const (
	tagSilence      = "silence"       // NewTimer/Reset: an execution's quiet period
	tagProbeTimeout = "probe-timeout" // NewTimer/Stop: waiting for a control probe's answer
	tagReplyGrace   = "reply-grace"   // NewTimer: idle without reply
	tagReaderGrace  = "reader-grace"  // NewTimer: a full queue waiting for its reader
	tagFlush        = "flush"         // NewTimer: waiting for the flush request's idle, then settling
)

// flushSettle is how long an execution stays open after its flush's idle
// (KernelOptions.FlushAfterIdle).
const flushSettle = 50 * time.Millisecond

// watch ends the execution when the kernel finished it without replying
// or stopped answering (see KernelOptions.ProbeAfter), and ends a finished
// one after its flush (KernelOptions.FlushAfterIdle). It runs from Execute
// until the execution ends; silence was created by Execute.
//
// ipykernel 6.17 finishes a request without execute_reply or idle when the
// code closed sys.stdout: the flush after the code raises, and the shell
// handler dies there. The kernel still answers later requests, so a shell
// kernel_info_request, which kernels handle strictly after the requests
// before it (ipykernel, IRkernel and Deno alike), proves that ours is over.
func (e *Execution) watch(silence *quartz.Timer) {
	k := e.k
	defer k.watchers.Done()
	var (
		shell, control, flush        *replyWaiter
		shellSent                    bool
		ids                          []string
		deadline, replyGrace, flushT *quartz.Timer
		deadlineC, graceC, flushTC   <-chan time.Time
		probedAt                     time.Time
	)
	stopDeadline := func() {
		if deadline != nil {
			deadline.Stop("jupyter", tagProbeTimeout)
			deadline, deadlineC = nil, nil
		}
	}
	defer func() {
		silence.Stop()
		stopDeadline()
		if replyGrace != nil {
			replyGrace.Stop()
		}
		if flushT != nil {
			flushT.Stop()
		}
		for _, id := range ids {
			k.remove(id)
		}
	}()
	probeShell := func() {
		if shellSent {
			return
		}
		w := newReplyWaiter(false)
		if id := k.probeShell(e.ID, w); id != "" {
			shell, shellSent = w, true
			ids = append(ids, id)
		}
	}
	for {
		var shellC, controlC, flushC <-chan error
		if shell != nil {
			shellC = shell.result
		}
		if flush != nil {
			flushC = flush.result
		}
		if control != nil {
			controlC = control.result
		}
		select {
		case <-e.done:
			return
		case <-e.activity:
			e.mu.Lock()
			idleNoReply := e.idle && e.reply == nil
			flushing := e.flushing
			e.mu.Unlock()
			if flushing && flushT == nil {
				flushT = k.clock.NewTimer(e.flush, "jupyter", tagFlush)
				flushTC = flushT.C
				w := newReplyWaiter(true)
				w.wantIdle = true
				id := k.probeShell(e.ID, w)
				if id == "" { // no connection to flush over: what came is all
					e.end(nil)
					return
				}
				flush = w
				ids = append(ids, id)
			}
			if idleNoReply && replyGrace == nil {
				replyGrace = k.clock.NewTimer(k.opts.ReplyGrace, "jupyter", tagReplyGrace)
				graceC = replyGrace.C
				probeShell()
			}
		case <-silence.C:
			now := k.clock.Now()
			if quiet := now.Sub(e.lastActivity()); quiet < k.opts.ProbeAfter {
				silence.Reset(k.opts.ProbeAfter-quiet, "jupyter", tagSilence)
				continue
			}
			probeShell()
			if control == nil {
				w := newReplyWaiter(false)
				if id := k.probe(ChannelControl, w); id != "" {
					control, probedAt = w, now
					ids = append(ids, id)
					if deadline == nil {
						deadline = k.clock.NewTimer(k.opts.ProbeTimeout, "jupyter", tagProbeTimeout)
						deadlineC = deadline.C
					}
				}
			}
			silence.Reset(k.opts.ProbeAfter, "jupyter", tagSilence)
		case err := <-shellC:
			shell = nil
			if err == nil && e.Reply() == nil {
				k.log.Warn("kernel finished a request without replying", "msg_id", e.ID)
				e.end(fmt.Errorf("%w: it answered a later request first", ErrNoReply))
				return
			}
		case err := <-controlC:
			control = nil
			if err == nil {
				if e.Reply() == nil {
					k.controlWhileBusy.Store(true)
				}
				stopDeadline()
			}
		case <-deadlineC:
			deadline, deadlineC = nil, nil
			// Only a kernel known to answer control while busy is judged;
			// and any message since the probe shows it alive.
			if k.controlWhileBusy.Load() && e.lastActivity().Before(probedAt) {
				k.log.Warn("kernel stopped answering", "msg_id", e.ID, "timeout", k.opts.ProbeTimeout)
				e.end(fmt.Errorf("%w: no answer on its control channel for %s", ErrKernelUnresponsive, k.opts.ProbeTimeout))
				return
			}
		case <-flushC:
			// Most late outputs came before the flush's idle; not all on
			// a loaded machine (Deno sends some from another task): a
			// short settle catches more.
			flush = nil
			flushT.Stop()
			flushT = k.clock.NewTimer(flushSettle, "jupyter", tagFlush)
			flushTC = flushT.C
		case <-flushTC:
			if flush != nil {
				k.log.Debug("no answer to the flush after idle; ending the execution", "msg_id", e.ID, "timeout", e.flush)
			}
			e.end(nil)
			return
		case <-graceC:
			graceC = nil
			if e.Reply() == nil {
				k.log.Warn("kernel went idle without replying", "msg_id", e.ID, "grace", k.opts.ReplyGrace)
				e.end(fmt.Errorf("%w: it went idle and sent no reply within %s", ErrNoReply, k.opts.ReplyGrace))
				return
			}
		}
	}
}

func (e *Execution) lastActivity() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lastMsg
}

// probeShell sends the shell probe for the execution execID: on the path
// the execution went, as only requests on one connection are answered in
// order. A probe through the WebSocket after a direct execution could come
// back (kernel, server, WebSocket) before the execution's reply (kernel,
// envd's own socket), and prove nothing. If the execution went direct and
// the direct path is down, there is no probe (""): the path's breaking
// ends the execution (directBroken).
func (k *Kernel) probeShell(execID string, w *replyWaiter) string {
	k.mu.Lock()
	direct := k.directIDs[execID]
	k.mu.Unlock()
	if !direct {
		return k.probe(ChannelShell, w)
	}
	msg, err := jwire.NewMessage(ChannelShell, "kernel_info_request", k.session, struct{}{})
	if err != nil || !k.dp.send(msg, w) {
		return ""
	}
	return msg.Header.MsgID
}

// probe sends a kernel_info_request on channel over the current
// connection, without reconnecting or nudging (a request that needs either
// has failed already), for w to wait on. It returns the request's id, or
// "" if there is no usable connection.
func (k *Kernel) probe(channel string, w *replyWaiter) string {
	msg, err := jwire.NewMessage(channel, "kernel_info_request", k.session, struct{}{})
	if err != nil {
		return ""
	}
	id := msg.Header.MsgID
	k.mu.Lock()
	conn := k.conn
	if conn == nil || k.needNudge || k.goneErr != nil {
		k.mu.Unlock()
		return ""
	}
	k.pending[id] = w
	k.mu.Unlock()
	if err := k.write(conn, msg); err != nil {
		k.remove(id)
		return ""
	}
	return id
}
