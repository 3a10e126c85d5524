package interpreter

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/backoff"
	"github.com/envd-dev/envd/internal/interpreter/fifo"
	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/jupyter/startup"
	"github.com/envd-dev/envd/internal/outbuf"
)

// maxTextChunk is the largest stdout/stderr text stored as one event: a
// 100 MB print arrives from the kernel as one message, and is stored (and
// streamed) in pieces so that readers keep up without the log evicting it.
const maxTextChunk = 256 << 10

// Execution is one run of code in a context. It runs on a goroutine of the
// engine, not of the request that started it: it goes on when its client
// goes away (call Interrupt to stop it), and its events stay readable by
// id for a while after it ended (see Engine.Execution).
type Execution struct {
	ID        string
	ContextID string
	Language  string

	eng     *Engine
	c       *Context
	code    string
	setEnv  string // silent code setting the per-execution env; "" if none
	timeout time.Duration

	log  *outbuf.Log
	done chan struct{}

	records atomic.Uint64 // events written

	// Set before event 0 is stored, so that a Reader that saw it sees it.
	started atomic.Pointer[Started]

	mu          sync.Mutex
	interrupted bool               // guarded by mu
	timedOut    bool               // guarded by mu
	restartDue  bool               // guarded by mu
	resendDue   bool               // guarded by mu; the interrupted kernel stayed silent: interrupt again
	idleDue     bool               // guarded by mu; the interrupted kernel went idle and its reply had time to come
	abortDue    bool               // guarded by mu; an aborted request waited long enough for its idle
	pokes       uint64             // guarded by mu; attention requests so far
	attn        context.CancelFunc // guarded by mu; wakes the runner
	timer       *quartz.Timer      // guarded by mu
	end         *End               // guarded by mu; set when it ended
}

func newExecution(e *Engine, c *Context, req ExecuteRequest, setEnv string) *Execution {
	x := &Execution{
		ID:        newID(),
		ContextID: c.ID,
		Language:  c.Language,
		eng:       e,
		c:         c,
		code:      req.Code,
		setEnv:    setEnv,
		timeout:   req.Timeout,
		log:       outbuf.New(e.opts.LogBytes, outbuf.WithWholeRecords(), outbuf.WithReaderGrace(e.opts.ReaderGrace), outbuf.WithClock(e.opts.Clock)),
		done:      make(chan struct{}),
	}
	if req.Timeout > 0 {
		x.timer = e.clock.AfterFunc(req.Timeout, func() {
			x.mu.Lock()
			defer x.mu.Unlock()
			if x.end == nil {
				x.timedOut = true
				x.pokeLocked()
			}
		}, "execution", "timeout")
	}
	return x
}

// Started returns the execution's first event (see EventStarted), or nil
// before it was stored.
func (x *Execution) Started() *Started { return x.started.Load() }

// WaitsFor returns the id of the execution x waits behind: the one that
// has x's context now, while x is queued. "" once x has the context (or
// between two executions, as the context passes from one to the next).
func (x *Execution) WaitsFor() string {
	if x.started.Load() != nil {
		return ""
	}
	x.mu.Lock()
	ended := x.end != nil
	x.mu.Unlock()
	if ended {
		return ""
	}
	if cur := x.c.Current(); cur != nil && cur != x {
		return cur.ID
	}
	return ""
}

// FollowFrom returns a Reader of the execution's events, like Follow,
// after checking that seq is one a reader can have reached: 0, or at most
// one past the last event stored (which must not be the end). Else the
// error is ErrOutOfRange.
func (x *Execution) FollowFrom(seq uint64) (*Reader, error) {
	rd := x.Follow()
	if seq == 0 {
		return rd, nil
	}
	ended := false // and its end event stored: checked before counting
	select {
	case <-x.done:
		ended = true
	default:
	}
	n := x.records.Load()
	var err error
	switch {
	case n == 0:
		err = newErr(ErrOutOfRange, nil, "execution %s has sent no event yet: attach from 0", x.ID)
	case ended && seq >= n:
		err = newErr(ErrOutOfRange, nil, "execution %s ended with event %d: nothing follows it", x.ID, n-1)
	case seq > n:
		err = newErr(ErrOutOfRange, nil, "execution %s has sent events up to %d so far", x.ID, n-1)
	}
	if err != nil {
		rd.Close()
		return nil, err
	}
	return rd, nil
}

// drained waits until no Reader follows the execution any more (each was
// closed, or left behind as too slow), or ctx ends; it reports which.
func (x *Execution) drained(ctx context.Context) bool {
	return x.log.Unfollowed(ctx)
}

// Done is closed once the execution ended and its end event is stored.
func (x *Execution) Done() <-chan struct{} { return x.done }

// End returns how the execution ended, or nil while it runs.
func (x *Execution) End() *End {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.end
}

// Interrupt stops the execution: a queued one never runs; a running one is
// interrupted in its kernel, and if it does not stop within
// Options.InterruptGrace its kernel is restarted (state lost, reported
// with a ContextRestarting error). It ends with EndInterrupted. No-op once
// ended.
func (x *Execution) Interrupt() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.end != nil || x.interrupted {
		return
	}
	x.interrupted = true
	x.pokeLocked()
}

func (x *Execution) pokeLocked() {
	x.pokes++
	if x.attn != nil {
		x.attn()
	}
}

// attention returns a context that is cancelled at the next Interrupt,
// timeout or due restart, or at once if one happened since *seen.
func (x *Execution) attention(seen *uint64) context.Context {
	ctx, cancel := context.WithCancel(x.eng.ctx)
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.attn != nil {
		x.attn() // release the previous one
	}
	x.attn = cancel
	if x.pokes != *seen {
		*seen = x.pokes
		cancel()
	}
	return ctx
}

// flags returns what was asked of the runner, and clears resendDue.
func (x *Execution) flags() (interrupted, timedOut, restartDue, resendDue bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	resendDue, x.resendDue = x.resendDue, false
	return x.interrupted, x.timedOut, x.restartDue, resendDue
}

// later sets *flag (under mu) and wakes the runner after d, unless the
// execution ended by then.
func (x *Execution) later(d time.Duration, flag *bool, tag string) {
	x.eng.clock.AfterFunc(d, func() {
		x.mu.Lock()
		defer x.mu.Unlock()
		if x.end == nil {
			*flag = true
			x.pokeLocked()
		}
	}, "execution", tag)
}

// stopReason is how an execution stopped on request ends.
func (x *Execution) stopReason() (EndReason, *ErrorValue) {
	if x.eng.ctx.Err() != nil {
		return EndInterrupted, &ErrorValue{Name: errNameUnexpected, Value: x.eng.stoppedText("the execution was stopped")}
	}
	x.mu.Lock()
	timedOut := x.timedOut
	x.mu.Unlock()
	if timedOut {
		return EndTimedOut, &ErrorValue{Name: errNameTimeout,
			Value: fmt.Sprintf("Execution timed out after %s and was stopped", x.timeout)}
	}
	return EndInterrupted, nil
}

// runner is the state of one run, owned by the execution's goroutine.
type runner struct {
	x       *Execution
	ks      *kernelState
	errored bool // an error event was written
	// replyErr is the error of an execute_reply whose iopub error had not
	// come yet: written at the end unless that error comes (the shell
	// channel is not ordered with iopub: the reply can overtake the
	// outputs the code printed before it failed).
	replyErr   *ErrorValue
	stopping   bool // interrupted or timed out: the kernel was interrupted
	interrupts int  // interrupts sent
	heard      bool // since the interrupt the kernel answered (error, reply or idle)
	idle       bool // since the interrupt the kernel went idle
	replied    bool // the execute_reply came
	restarted  bool // we restarted the kernel because it did not stop
	aborted    bool // the kernel replied abort(ed)
	// oomBefore is the kernels' OOM-kill count when the code was sent
	// (Options.OOMKills).
	oomBefore uint64
	// kernelRestarts is the kernel's restart count when the code was sent.
	kernelRestarts int
	// exitAsked: the execute_reply asked the kernel to exit (IPython's
	// exit() or quit(): the ask_exit payload); it stops once it replied.
	exitAsked bool
}

// oomKilled says that the OOM killer killed a kernel since the code was
// sent: then, most likely, this one.
func (r *runner) oomKilled() bool {
	return r.x.eng.opts.OOMKills != nil && r.x.eng.oomKills() > r.oomBefore
}

// exit is how the kernel's process ended if it was restarted since the
// code was sent and the server said how (else nil: an earlier death's
// does not tell about this one).
func (r *runner) exit() *jupyter.ExitStatus {
	st := r.ks.kernel.Status()
	if st.Restarts == r.kernelRestarts {
		return nil
	}
	return st.Exit
}

// abortSettle is how long an aborted request waits for its idle.
const abortSettle = 2 * time.Second

// replySettle is how long an interrupted request that went idle waits for
// its execute_reply before it counts as interrupted without one (ipykernel
// loses the reply when the interrupt lands outside user code).
const replySettle = time.Second

// run is the execution's goroutine.
func (x *Execution) run(ticket fifo.Ticket) {
	defer x.eng.wg.Done()
	r := &runner{x: x}
	var seen uint64
	actx := x.attention(&seen)

	// Wait for the context.
	select {
	case <-ticket:
	case <-actx.Done():
		x.c.queue.Cancel(ticket)
		r.stopBeforeRun("stopped before it started")
		close(x.done)
		x.eng.executionFinished(x)
		return
	}
	x.c.setCurrent(x)
	restoreEnv := false
	var envRestarts int
	defer func() {
		if restoreEnv {
			r.restoreEnv(envRestarts)
		}
		x.c.setCurrent(nil)
		x.c.queue.Release()
		close(x.done)
		x.eng.executionFinished(x)
	}()

	ks, err := x.c.kernel(actx)
	if err != nil {
		if actx.Err() != nil {
			r.stopBeforeRun("stopped while its context was getting ready")
			return
		}
		r.failBeforeRun(err)
		return
	}
	r.ks = ks
	for _, n := range x.c.takeNotices() {
		x.write(Event{Kind: EventNotice, Notice: &n})
	}
	if x.setEnv != "" {
		envRestarts = ks.kernel.Status().Restarts
		restoreEnv = true
		if err := x.c.silent(actx, ks, x.setEnv); err != nil {
			if actx.Err() != nil {
				r.stopBeforeRun("stopped while its env vars were being set")
				return
			}
			r.failBeforeRun(fmt.Errorf("set env vars: %w", err))
			return
		}
	}
	x.mu.Lock()
	stopped := x.interrupted || x.timedOut
	x.mu.Unlock()
	if stopped || x.eng.ctx.Err() != nil {
		r.stopBeforeRun("stopped before it started")
		return
	}
	restartsBefore := x.c.restartCount()
	r.oomBefore = x.eng.oomKills()
	r.kernelRestarts = ks.kernel.Status().Restarts
	je, err := ks.kernel.Execute(actx, x.code, jupyter.ExecuteOptions{})
	if err != nil {
		if actx.Err() != nil {
			r.stopBeforeRun("stopped before it started")
			return
		}
		r.kernelFailed(err, restartsBefore)
		return
	}

	for {
		if actx.Err() != nil {
			if x.eng.ctx.Err() != nil {
				r.finish(x.stopReason())
				return
			}
			if r.abortDue() || (r.idleDue() && !r.replied) {
				r.finishRun()
				return
			}
			r.attend()
			actx = x.attention(&seen)
		}
		m, err := je.Next(actx)
		if err != nil {
			if errors.Is(err, io.EOF) {
				r.explainDenoFailure(actx)
				r.finishRun()
				return
			}
			if actx.Err() != nil {
				continue // attention: handled at the top
			}
			if r.stopping && !r.exitAsked && errors.Is(err, jupyter.ErrKernelRestarted) {
				if !r.restarted {
					// Some kernels (Deno) die of the interrupt; Jupyter
					// restarts them.
					r.emitError(&ErrorValue{Name: errNameRestarting, Value: "The kernel died when interrupted and was " +
						"restarted: the context's state (variables, imports) is lost. The context is usable again."})
				}
				r.finish(x.stopReason())
				return
			}
			if r.stopping && r.idle && !r.replied && r.ks.usable() && !gone(err) && !errors.Is(err, jupyter.ErrConnectionLost) {
				// Interrupted, idle, and ended without a reply (by the
				// kernel client): the kernel is fine, the code stopped.
				r.finish(x.stopReason())
				return
			}
			r.kernelFailed(err, restartsBefore)
			return
		}
		if r.handle(actx, m) {
			return
		}
	}
}

// removedWhileRunning is the error of code whose context was removed under
// it.
const removedWhileRunning = "The context was removed while the code was running"

// finishRun ends an execution the kernel completed.
func (r *runner) finishRun() {
	r.flushReplyErr()
	switch {
	case r.exitAsked:
		r.kernelExited(nil)
	case r.stopping:
		r.finish(r.x.stopReason())
	case r.errored && r.x.c.isRemoved():
		// The kernel's shutdown ended the code (an interrupt, an aborted
		// reply) before its channels went: the removal did, as when they
		// go first (kernelFailed).
		r.finish(EndContextRestarted, &ErrorValue{Name: errNameUnexpected, Value: removedWhileRunning})
	case r.errored:
		r.finish(EndError, nil)
	default:
		r.finish(EndOK, nil)
	}
}

func (r *runner) abortDue() bool {
	r.x.mu.Lock()
	defer r.x.mu.Unlock()
	return r.x.abortDue
}

func (r *runner) idleDue() bool {
	r.x.mu.Lock()
	defer r.x.mu.Unlock()
	return r.x.idleDue
}

// interrupt sends the kernel an interrupt, and asks to be woken to send it
// again if the kernel stays silent.
func (r *runner) interrupt() {
	x := r.x
	r.interrupts++
	ctx, cancel := context.WithTimeout(x.eng.ctx, 10*time.Second)
	err := r.ks.kernel.Interrupt(ctx)
	cancel()
	if err != nil {
		x.eng.log.Warn("cannot interrupt kernel", "context_id", x.ContextID, "error", err)
	}
	x.later(x.eng.opts.InterruptResend, &x.resendDue, "resend")
}

// attend handles Interrupt, the timeout, a silent interrupted kernel and a
// due restart.
func (r *runner) attend() {
	x := r.x
	interrupted, timedOut, restartDue, resendDue := x.flags()
	if (interrupted || timedOut) && !r.stopping {
		r.stopping = true
		r.interrupt()
		x.later(x.eng.opts.InterruptGrace, &x.restartDue, "grace")
	} else if resendDue && r.stopping && !r.heard && !restartDue && !r.restarted {
		// ipykernel ignores a SIGINT that lands outside user code: the
		// kernel said nothing since, so the code still runs.
		x.eng.log.Info("interrupted kernel is silent; interrupting again",
			"context_id", x.ContextID, "language", x.Language, "interrupts", r.interrupts)
		r.interrupt()
	}
	// A kernel that answered (abort) did stop: no restart.
	if restartDue && !r.restarted && !r.aborted {
		r.restarted = true
		x.eng.log.Warn("code did not stop when interrupted; restarting its kernel as a last resort",
			"context_id", x.ContextID, "language", x.Language, "grace", x.eng.opts.InterruptGrace, "interrupts", r.interrupts)
		r.emitError(&ErrorValue{Name: errNameRestarting, Value: fmt.Sprintf(
			"The code did not stop within %s of being interrupted (%d interrupts sent), so its kernel was restarted "+
				"as a last resort: the context's state (variables, imports) is lost. The context is usable again.",
			x.eng.opts.InterruptGrace, r.interrupts)})
		r.ks.lossReported = true
		ctx, cancel := context.WithTimeout(x.eng.ctx, time.Minute)
		err := r.ks.kernel.Restart(ctx)
		cancel()
		if err != nil {
			x.eng.log.Warn("cannot restart kernel", "context_id", x.ContextID, "error", err)
			x.c.drop(r.ks) // the next run starts a new kernel
		}
		// The kernel's pending execution now ends with ErrKernelRestarted
		// (or ErrClosed if it was dropped).
	}
}

// handle turns one kernel message into events; true when the execution is
// over.
func (r *runner) handle(ctx context.Context, m *jupyter.Message) bool {
	x := r.x
	switch m.Type() {
	case "status":
		var st jupyter.StatusContent
		if r.stopping && m.DecodeContent(&st) == nil && st.ExecutionState == "idle" {
			r.heard, r.idle = true, true
			if !r.replied {
				// Interrupted and idle: the reply may still come (the
				// channels are not ordered), or never.
				x.later(replySettle, &x.idleDue, "idle")
			}
		}
	case "execute_input":
		var in jupyter.ExecuteInputContent
		if m.DecodeContent(&in) == nil {
			x.write(Event{Kind: EventExecutionCount, ExecutionCount: in.ExecutionCount})
		}
	case "stream":
		var s jupyter.StreamContent
		if m.DecodeContent(&s) != nil {
			return false
		}
		kind := EventStdout
		switch s.Name {
		case "stdout":
		case "stderr":
			kind = EventStderr
		default:
			return false
		}
		ts := FormatTimestamp(m.Header.Date)
		m.Content = nil // of a big print, only the text is kept
		for _, chunk := range splitText(s.Text, maxTextChunk) {
			x.write(Event{Kind: kind, Text: chunk, Timestamp: ts})
		}
	case "display_data", "execute_result":
		var d jupyter.DisplayDataContent
		if m.DecodeContent(&d) != nil {
			return false
		}
		if d.Data == nil {
			d.Data = map[string]json.RawMessage{}
		}
		x.write(Event{Kind: EventResult, Result: &Result{IsMain: m.Type() == "execute_result", Data: d.Data}})
	case "error":
		r.heard = true
		var ec jupyter.ErrorContent
		if !r.errored && m.DecodeContent(&ec) == nil {
			r.emitError(&ErrorValue{Name: ec.EName, Value: ec.EValue, Traceback: strings.Join(ec.Traceback, "")})
		}
	case "execute_reply":
		r.heard, r.replied = true, true
		var rep jupyter.ExecuteReplyContent
		if m.DecodeContent(&rep) != nil {
			return false
		}
		if askedExit(m) {
			r.exitAsked = true
		}
		switch rep.Status {
		case "error":
			if !r.errored {
				r.replyErr = &ErrorValue{Name: rep.EName, Value: rep.EValue, Traceback: strings.Join(rep.Traceback, "")}
			}
		case "abort", "aborted":
			// Terminal, but give the kernel a moment to publish its idle:
			// IRkernel aborts whatever it receives before that, so the
			// next run would be aborted too. An aborted request may never
			// see its idle at all, hence the bound.
			if !r.aborted {
				r.aborted = true
				r.emitError(&ErrorValue{Name: errNameAborted, Value: errValueAborted})
				x.later(abortSettle, &x.abortDue, "abort")
			}
		}
	case "input_request":
		// IRkernel's readline() asks even with allow_stdin off, and would
		// wait forever: answer with an empty line.
		ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = r.ks.kernel.InputReply(ictx, m, "")
		cancel()
	}
	return false
}

// flushReplyErr writes the execute_reply's error when the kernel published
// none of its own on iopub (see replyErr).
func (r *runner) flushReplyErr() {
	if r.replyErr != nil && !r.errored {
		r.emitError(r.replyErr)
	}
	r.replyErr = nil
}

func (r *runner) emitError(ev *ErrorValue) {
	r.errored = true
	r.x.write(Event{Kind: EventError, Error: ev})
}

// kernelFailed ends the execution after the kernel or its connection went
// away mid-run.
func (r *runner) kernelFailed(err error, restartsBefore int) {
	x := r.x
	switch {
	case x.eng.ctx.Err() != nil:
		r.finish(x.stopReason())
	case x.c.isRemoved():
		// However its kernel went (deleted, its channels closed or cut),
		// the context was removed under the code.
		r.finish(EndContextRestarted, &ErrorValue{Name: errNameUnexpected, Value: removedWhileRunning})
	case r.exitAsked && (errors.Is(err, jupyter.ErrKernelRestarted) || errors.Is(err, jupyter.ErrKernelDied) ||
		errors.Is(err, jupyter.ErrKernelNotFound)):
		// It stopped before its idle came.
		r.kernelExited(err)
	case errors.Is(err, jupyter.ErrKernelRestarted):
		r.ks.lossReported = true
		if x.c.restartCount() != restartsBefore {
			r.finish(EndContextRestarted, &ErrorValue{Name: errNameRestarting, Value: "Context was restarted"})
			return
		}
		r.finish(EndKernelDied, &ErrorValue{Name: errNameRestarting, Value: runDeath(r.exit(), r.oomKilled(),
			"was restarted") + " with fresh state: variables and imports are lost. The context is usable again."})
	case errors.Is(err, jupyter.ErrKernelDied), errors.Is(err, jupyter.ErrKernelNotFound):
		x.c.drop(r.ks)
		r.finish(EndKernelDied, &ErrorValue{Name: errNameRestarting, Value: runDeath(r.exit(), r.oomKilled(),
			"could not be restarted") + "; the next run in this context starts a new kernel with fresh state."})
	case errors.Is(err, jupyter.ErrServerRestarted), errors.Is(err, jupyter.ErrConnectionLost) && r.serverDied():
		r.serverRestarted()
	case errors.Is(err, jupyter.ErrConnectionLost):
		r.finish(EndError, &ErrorValue{Name: errNameWebSocket, Value: "The connection to the kernel was lost, " +
			"so the outcome is unknown; rerun the code to get the results"})
	case errors.Is(err, jupyter.ErrNoReply):
		r.finish(EndError, &ErrorValue{Name: errNameUnexpected, Value: "The kernel finished running the code " +
			"without replying, so its outcome is unknown (" + err.Error() + "); the context's state is kept"})
	case errors.Is(err, jupyter.ErrKernelUnresponsive):
		r.finish(EndError, &ErrorValue{Name: errNameUnexpected, Value: "The kernel stopped answering while " +
			"running the code (" + err.Error() + "); interrupt or restart the context to use it again"})
	case errors.Is(err, jupyter.ErrClosed), errors.Is(err, jupyter.ErrStopped):
		r.finish(EndError, &ErrorValue{Name: errNameUnexpected, Value: "The kernel connection was closed while the code was running"})
	default:
		r.finish(EndError, &ErrorValue{Name: errNameUnexpected, Value: err.Error()})
	}
}

// serverRestarted ends an execution whose Jupyter server went away.
func (r *runner) serverRestarted() {
	r.ks.lossReported = true
	r.finish(EndServerRestarted, &ErrorValue{Name: errNameRestarting, Value: "The Jupyter server stopped " +
		"unexpectedly and is being restarted; every kernel's state is lost. The next run in this context " +
		"starts a new kernel."})
}

// askedExit tells whether an execute_reply asks the kernel to exit: the
// payload IPython's exit() and quit() add ({"source": "ask_exit",
// "keepkernel": false}; exit(keep_kernel=True) keeps it).
func askedExit(m *jupyter.Message) bool {
	var rep struct {
		Payload []struct {
			Source     string `json:"source"`
			KeepKernel *bool  `json:"keepkernel"`
		} `json:"payload"`
	}
	if m.DecodeContent(&rep) != nil {
		return false
	}
	for _, p := range rep.Payload {
		if p.Source == "ask_exit" && (p.KeepKernel == nil || !*p.KeepKernel) {
			return true
		}
	}
	return false
}

// exitWait bounds the wait for an IPython kernel the code asked to exit
// to be seen restarted: ipykernel stops 0.1 s after its reply, and the
// server notices within its KernelRestarter.time_to_dead (envd's: 0.5 s;
// 3 s by default).
const exitWait = 10 * time.Second

// kernelExited ends an execution whose code asked its kernel to exit
// (exitAsked), whatever else it did. ipykernel stops once it replied, and
// Jupyter restarts it; IRkernel's quit() only asks the frontend to end
// the kernel (as jupyter console does), which envd does by restarting it.
// err is what ended the execution early, if anything; otherwise it waits
// for that restart, so that the next execution does not go to the dying
// kernel (which would run it with the old state, or lose it, and die
// under it) and is not told again of the death this one reports.
func (r *runner) kernelExited(err error) {
	x, ks := r.x, r.ks
	if err == nil {
		wait := exitWait
		if x.c.code != Python {
			wait = 0
		}
		err = r.awaitExit(wait)
	}
	switch {
	case x.eng.ctx.Err() != nil:
		r.finish(x.stopReason())
	case x.c.isRemoved():
		r.finish(EndContextRestarted, &ErrorValue{Name: errNameUnexpected, Value: removedWhileRunning})
	case errors.Is(err, jupyter.ErrServerRestarted):
		r.serverRestarted()
	case errors.Is(err, jupyter.ErrKernelRestarted):
		ks.lossReported = true
		r.finish(EndKernelDied, &ErrorValue{Name: errNameExited, Value: exitedText + "this context's kernel was " +
			"restarted, and its variables, imports and definitions are gone. The context is usable again."})
	default: // gone for good
		ks.lossReported = true
		x.c.drop(ks)
		r.finish(EndKernelDied, &ErrorValue{Name: errNameExited, Value: exitedText + "its variables, imports and " +
			"definitions are gone, and the next run in this context starts a new kernel."})
	}
}

// awaitExit waits until the kernel the code asked to exit is seen
// restarted (ErrKernelRestarted) or gone (ErrKernelDied, or the server's
// error). One that is still there after wait is restarted.
func (r *runner) awaitExit(wait time.Duration) error {
	x, ks := r.x, r.ks
	t := x.eng.clock.NewTimer(wait, "execution", "exit")
	defer t.Stop()
	for {
		st := ks.kernel.Status()
		switch {
		case ks.client.Err() != nil:
			return ks.client.Err()
		case st.Err != nil:
			return jupyter.ErrKernelDied
		case st.Restarts != r.kernelRestarts:
			return jupyter.ErrKernelRestarted
		}
		select {
		case <-st.Changed:
			continue
		case <-x.eng.ctx.Done():
			return x.eng.ctx.Err()
		case <-t.C:
		}
		if wait > 0 {
			x.eng.log.Warn("kernel asked to exit is still running; restarting it",
				"context_id", x.ContextID, "language", x.Language, "wait", wait)
		} else {
			x.eng.log.Info("kernel asked to exit; restarting it", "context_id", x.ContextID, "language", x.Language)
		}
		ctx, cancel := context.WithTimeout(x.eng.ctx, time.Minute)
		err := ks.kernel.Restart(ctx)
		cancel()
		if err != nil {
			x.eng.log.Warn("cannot restart kernel", "context_id", x.ContextID, "error", err)
			return jupyter.ErrKernelDied
		}
		return jupyter.ErrKernelRestarted
	}
}

// serverDied tells, after a lost connection, whether the Jupyter server is
// gone (the supervisor notices within moments): it asks the client every
// serverDiedPoll for up to serverDiedWait, or until the engine shuts down.
func (r *runner) serverDied() bool {
	eng := r.x.eng
	deadline := eng.clock.Now().Add(serverDiedWait)
	for {
		if r.ks.client.Err() != nil {
			return true
		}
		if eng.clock.Now().After(deadline) {
			return false
		}
		if backoff.Sleep(eng.ctx, eng.clock, serverDiedPoll, "execution", "server-died") != nil {
			return r.ks.client.Err() != nil
		}
	}
}

// How serverDied waits for the supervisor's verdict.
const (
	serverDiedWait = time.Second
	serverDiedPoll = 20 * time.Millisecond
)

// stopBeforeRun ends an execution stopped before its code was sent.
func (r *runner) stopBeforeRun(what string) {
	reason, ev := r.x.stopReason()
	if ev != nil {
		r.emitError(ev)
		what = ev.Value
	}
	r.x.writeEnd(&End{Reason: reason, Message: what})
}

// failBeforeRun ends an execution whose context could not be made ready.
func (r *runner) failBeforeRun(err error) {
	switch {
	case errors.Is(err, errRemoved):
		r.finish(EndContextRestarted, &ErrorValue{Name: errNameUnexpected, Value: "The context was removed before the code could run"})
	case errors.Is(err, ErrClosed):
		r.finish(EndInterrupted, &ErrorValue{Name: errNameUnexpected, Value: r.x.eng.stoppedText("the code did not run")})
	case errors.Is(err, ErrNotReady):
		r.finish(EndError, &ErrorValue{Name: errNameSetup, Value: "The Jupyter server is not available: " + err.Error()})
	default:
		r.finish(EndError, &ErrorValue{Name: errNameSetup, Value: err.Error()})
	}
}

// finish writes the closing events. ev (if any) is written even when the
// code already raised: it says why the execution ended abnormally.
func (r *runner) finish(reason EndReason, ev *ErrorValue) {
	r.flushReplyErr()
	if r.ks != nil {
		// The OOM kills counted until now are this run's to tell (or
		// not its kernel's); one counted after its end is the next's.
		// Taken before the end leaves: a client may act on the end at once.
		r.ks.oomSeen = r.x.eng.oomKills()
	}
	msg := ""
	if ev != nil {
		r.emitError(ev)
		msg = ev.Value
	}
	switch reason {
	case EndTimedOut:
		r.x.eng.log.Info("execution timed out", "context_id", r.x.ContextID, "language", r.x.Language,
			"execution_id", r.x.ID, "timeout", r.x.timeout)
	case EndInterrupted:
		r.x.eng.log.Info("execution interrupted", "context_id", r.x.ContextID, "language", r.x.Language,
			"execution_id", r.x.ID)
	}
	r.x.writeEnd(&End{Reason: reason, Message: msg})
}

// restoreEnv undoes the per-execution env vars, unless the kernel was
// restarted since they were set (a fresh kernel has none of them).
func (r *runner) restoreEnv(restartsAtSet int) {
	x, ks := r.x, r.ks
	if ks == nil || !ks.usable() || ks.kernel.Status().Restarts != restartsAtSet {
		return
	}
	code, err := startup.RestoreEnvCode(x.c.code)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(x.eng.ctx, 30*time.Second)
	defer cancel()
	if err := x.c.silent(ctx, ks, code); err != nil && x.eng.ctx.Err() == nil {
		x.eng.log.Warn("cannot restore env vars after an execution", "context_id", x.ContextID, "error", err)
	}
}

// write stores one event, first waiting (briefly) for readers that keep
// up. Event 0 is always EventStarted: the kernel's execution count, when it
// comes first, or made up before whatever comes first.
func (x *Execution) write(ev Event) {
	if x.records.Load() == 0 { // only the runner writes
		st := &Started{ExecutionID: x.ID, ContextID: x.ContextID}
		if ev.Kind == EventExecutionCount {
			st.ExecutionCount, st.Counted = ev.ExecutionCount, true
		}
		x.started.Store(st)
		x.store(Event{Kind: EventStarted, Started: st})
		if st.Counted {
			return
		}
	}
	x.store(ev)
}

func (x *Execution) store(ev Event) {
	ev.Seq = x.records.Load()
	rec := encodeEvent(ev)
	x.log.WritePaced(x.eng.ctx, uint8(ev.Kind), rec)
	x.records.Add(1)
}

// writeEnd stores the end event and closes the log.
func (x *Execution) writeEnd(end *End) {
	x.mu.Lock()
	x.end = end
	if x.timer != nil {
		x.timer.Stop()
	}
	if x.attn != nil {
		x.attn()
		x.attn = nil
	}
	x.mu.Unlock()
	x.write(Event{Kind: EventEnd, End: end})
	x.log.Close()
}

// splitText cuts s into pieces of at most max bytes, at a newline when
// one falls in the second half of a piece, never inside a UTF-8 sequence.
func splitText(s string, max int) []string {
	if len(s) <= max {
		return []string{s}
	}
	var out []string
	for len(s) > max {
		cut := strings.LastIndexByte(s[max/2:max], '\n')
		if cut >= 0 {
			cut += max/2 + 1
		} else {
			cut = max
			for cut > 0 && !utf8.RuneStart(s[cut]) {
				cut--
			}
			if cut == 0 {
				cut = max
			}
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

// newID returns a random UUIDv4 string.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on Linux
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
