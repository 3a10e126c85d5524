package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/envd-dev/envd/backoff"
	ipb "github.com/envd-dev/envd/gen/envd/interpreter/v1"
)

// CodeContext is a kernel with its state: variables and imports survive
// from one execution to the next.
type CodeContext struct {
	ID       string
	Language string // python, javascript, typescript, r, bash, or another of Languages
	Dir      string // working directory
}

func codeContext(c *ipb.Context) *CodeContext {
	return &CodeContext{ID: c.GetId(), Language: c.GetLanguage(), Dir: c.GetCwd()}
}

// ContextOptions configures CreateContext.
type ContextOptions struct {
	Language string // zero: python
	Dir      string // zero: the user's home; it must exist
}

// CreateContext starts a new context: a fresh kernel.
func (c *Client) CreateContext(ctx context.Context, o ContextOptions) (*CodeContext, error) {
	c.init()
	resp, err := c.code.CreateContext(ctx, request(c, &ipb.CreateContextRequest{Language: o.Language, Cwd: o.Dir}, ""))
	if err != nil {
		return nil, rpcError("create context", err)
	}
	return codeContext(resp.Msg.GetContext()), nil
}

// ListContexts lists the contexts.
func (c *Client) ListContexts(ctx context.Context) ([]CodeContext, error) {
	c.init()
	resp, err := c.code.ListContexts(ctx, request(c, &ipb.ListContextsRequest{}, ""))
	if err != nil {
		return nil, rpcError("list contexts", err)
	}
	out := make([]CodeContext, 0, len(resp.Msg.GetContexts()))
	for _, x := range resp.Msg.GetContexts() {
		out = append(out, *codeContext(x))
	}
	return out, nil
}

// Language is a language the sandbox can run.
type Language struct {
	// Name is what contexts report: python, javascript, typescript, r,
	// bash, else the kernelspec's language field or name.
	Name string
	// KernelName is the Jupyter kernelspec that runs it; DisplayName its
	// display name.
	KernelName, DisplayName string
	// Aliases are other names that select it (js, py, the kernelspec's name...).
	Aliases []string
	// DefaultContextID is its default context ("" until it has one), and
	// DefaultContextRunning whether that context has a kernel now.
	DefaultContextID      string
	DefaultContextRunning bool
}

// Languages lists the languages the sandbox can run, one per installed
// Jupyter kernelspec, as installed now.
func (c *Client) Languages(ctx context.Context) ([]Language, error) {
	c.init()
	resp, err := c.code.ListLanguages(ctx, request(c, &ipb.ListLanguagesRequest{}, ""))
	if err != nil {
		return nil, rpcError("list languages", err)
	}
	out := make([]Language, 0, len(resp.Msg.GetLanguages()))
	for _, l := range resp.Msg.GetLanguages() {
		out = append(out, Language{
			Name:                  l.GetLanguage(),
			KernelName:            l.GetKernelName(),
			DisplayName:           l.GetDisplayName(),
			Aliases:               l.GetAliases(),
			DefaultContextID:      l.GetDefaultContextId(),
			DefaultContextRunning: l.GetDefaultContextRunning(),
		})
	}
	return out, nil
}

// RestartContext gives a context a fresh kernel: its state is lost.
func (c *Client) RestartContext(ctx context.Context, id string) (*CodeContext, error) {
	c.init()
	resp, err := c.code.RestartContext(ctx, request(c, &ipb.RestartContextRequest{ContextId: id}, ""))
	if err != nil {
		return nil, rpcError("restart context "+id, err)
	}
	return codeContext(resp.Msg.GetContext()), nil
}

// RemoveContext stops a context's kernel and forgets it.
func (c *Client) RemoveContext(ctx context.Context, id string) error {
	c.init()
	_, err := c.code.RemoveContext(ctx, request(c, &ipb.RemoveContextRequest{ContextId: id}, ""))
	return rpcError("remove context "+id, err)
}

// Interrupt stops the code running on a context, as Ctrl-C would.
func (c *Client) Interrupt(ctx context.Context, contextID string) error {
	c.init()
	_, err := c.code.Interrupt(ctx, request(c, &ipb.InterruptRequest{ContextId: contextID}, ""))
	return rpcError("interrupt context "+contextID, err)
}

// ExecOptions configures Execute. The callbacks run on the goroutine that
// calls Wait, in the order the events came.
type ExecOptions struct {
	// ContextID runs the code on that context. Zero: the default context
	// of Language (python when that is zero too).
	ContextID string
	Language  string
	// Env is set for this execution only.
	Env map[string]string
	// Timeout, if positive, interrupts the code once it has run that long
	// (EndTimedOut).
	Timeout time.Duration
	// InterruptOnDisconnect interrupts the code if this client goes away
	// before the end. Zero: the code runs on, and Attach follows it.
	InterruptOnDisconnect bool

	OnStdout func(Output)
	OnStderr func(Output)
	OnResult func(Result)
	OnError  func(CodeError)
	// OnNotice is called for what happened to the context since its last
	// execution (its state was lost, packages it imported changed); it
	// comes before the code's own output.
	OnNotice func(Notice)
	// OnQueued is called, before Execute returns, while the code waits
	// for another execution on its context to end (executions of a
	// context run one at a time): behind is that execution's id. It may
	// be called again, for the next one, when the wait is long.
	OnQueued func(behind string)
}

// NoticeKind says what a Notice is about. Its values are the wire's
// (envd.interpreter.v1.NoticeKind).
type NoticeKind int

const (
	NoticeUnknown         NoticeKind = iota
	NoticeKernelRestarted            // the kernel died between executions and was restarted: state lost
	NoticeKernelReplaced             // the context got a new kernel (Jupyter restarted): state lost
	NoticePackagesChanged            // packages the kernel had imported changed; restart the context to use them
)

func (k NoticeKind) String() string {
	switch k {
	case NoticeKernelRestarted:
		return "kernel restarted"
	case NoticeKernelReplaced:
		return "kernel replaced"
	case NoticePackagesChanged:
		return "packages changed"
	}
	return "unknown"
}

// Notice is something that happened to a context between executions,
// told to the next one.
type Notice struct {
	Kind NoticeKind
	Text string // a sentence for a person
	Time time.Time
}

// Output is text the code wrote to stdout or stderr.
type Output struct {
	Text string
	Time time.Time
}

// Result is a value the code displayed, in every format the kernel gave.
type Result struct {
	// Main marks the value of the last expression of the code.
	Main bool
	// Text is the text/plain form.
	Text string
	// Data maps each MIME type (text/html, image/png, ...) to its value, as
	// the kernel gave it (JSON).
	Data map[string]json.RawMessage
}

// CodeError is an exception the code raised.
type CodeError struct {
	Name, Value, Traceback string
}

func (e *CodeError) Error() string { return e.Name + ": " + e.Value }

// EndReason is why an execution ended. Its values are the wire's
// (envd.interpreter.v1.EndReason).
type EndReason int

const (
	EndUnknown          EndReason = iota
	EndOK                         // the code ran to completion
	EndError                      // the code raised an error
	EndInterrupted                // someone interrupted it, or its client went away
	EndTimedOut                   // it ran out of its timeout
	EndKernelDied                 // the kernel died under it (state lost)
	EndContextRestarted           // its context was restarted or removed
	EndServerRestarted            // the Jupyter server went away
)

func (r EndReason) String() string {
	switch r {
	case EndOK:
		return "ok"
	case EndError:
		return "error"
	case EndInterrupted:
		return "interrupted"
	case EndTimedOut:
		return "timed out"
	case EndKernelDied:
		return "kernel died"
	case EndContextRestarted:
		return "context restarted"
	case EndServerRestarted:
		return "server restarted"
	}
	return "unknown"
}

// ExecEvent is one thing an execution produced. Exactly one of Stdout,
// Stderr, Result and Error is set.
type ExecEvent struct {
	Seq    uint64
	Stdout *Output
	Stderr *Output
	Result *Result
	Error  *CodeError
	Notice *Notice
}

// ExecResult is the outcome of an execution, as Wait returns it.
type ExecResult struct {
	ID        string
	ContextID string
	// Count is the kernel's execution count (In [n]).
	Count          int64
	Stdout, Stderr string
	Results        []Result
	Notices        []Notice   // what happened to the context before this execution
	Error          *CodeError // the exception, when Reason is EndError
	Reason         EndReason
	// Message says more when Reason is neither EndOK nor EndError.
	Message string
}

// Execute runs code and returns once the kernel has taken it. Follow what
// it produces with Events or Wait.
//
// If the connection drops, the handle reattaches to the execution by its
// id and carries on from the first event it missed.
func (c *Client) Execute(ctx context.Context, code string, o ExecOptions) (*Execution, error) {
	c.init()
	req := &ipb.ExecuteRequest{
		Code: code, ContextId: o.ContextID, Language: o.Language, EnvVars: o.Env,
		InterruptOnDisconnect: o.InterruptOnDisconnect,
	}
	if o.Timeout > 0 {
		req.Timeout = durationpb.New(o.Timeout)
	}
	sctx, cancel := streamContext(ctx, 0)
	stream, err := c.code.Execute(sctx, request(c, req, ""))
	if err != nil {
		cancel()
		return nil, rpcError("execute", err)
	}
	r := &Execution{c: c, ctx: ctx, opts: o, op: "execute"}
	r.cancel = cancel
	r.setStream(stream, (*ipb.ExecuteResponse).GetEvent)
	if err := r.awaitStarted(); err != nil {
		return nil, err
	}
	return r, nil
}

// Attach follows an execution started earlier, by any client, from the
// event numbered fromSeq (0: all the events envd still holds). envd's answer,
// an unknown execution included (ErrNotFound), comes with the first event:
// from Events or Wait.
func (c *Client) Attach(ctx context.Context, executionID string, fromSeq uint64, o ExecOptions) (*Execution, error) {
	c.init()
	r := &Execution{c: c, ctx: ctx, opts: o, op: "attach to execution " + executionID, nextSeq: fromSeq}
	r.res.ID = executionID
	if err := r.attach(); err != nil {
		return nil, err
	}
	return r, nil
}

// Execution is a handle on running code. Events and Wait follow it; call
// one of them from one goroutine.
type Execution struct {
	c    *Client
	ctx  context.Context
	opts ExecOptions
	op   string

	recv      func() (*ipb.ExecutionEvent, error)
	close     func() error
	closeOnce *sync.Once

	cancelMu sync.Mutex
	cancel   context.CancelFunc // guarded by cancelMu: ends the current stream
	closed   bool               // guarded by cancelMu: Close was called

	nextSeq   uint64 // the seq of the next event wanted
	reattachs int
	retry     *backoff.Backoff // spaces the reattaches; nil before the first
	res       ExecResult
	stdout    strings.Builder
	stderr    strings.Builder
	pending   []ExecEvent // events that came before started
	started   bool
	ended     bool
	err       error
}

// maxReattach bounds how often a run reattaches after a dropped stream.
const maxReattach = 3

// reattachBackoff spaces a run's reattaches: 100 ms before the first,
// 100 ms more before each next (the cap is reached by the last).
var reattachBackoff = backoff.Policy{Floor: 100 * time.Millisecond, Cap: maxReattach * 100 * time.Millisecond}

// ID is the execution's id, for Attach.
func (r *Execution) ID() string { return r.res.ID }

// ContextID is the context the code runs on.
func (r *Execution) ContextID() string { return r.res.ContextID }

// Count is the kernel's execution count of the code (In [n]), as
// ExecResult.Count will say: known once Execute has returned (after
// Attach, 0 until the execution's start event has come). Call it from the
// goroutine that follows the execution, or from the callbacks.
func (r *Execution) Count() int64 { return r.res.Count }

func (r *Execution) setStream(s interface {
	serverStream[ipb.ExecuteResponse]
	Close() error
}, event func(*ipb.ExecuteResponse) *ipb.ExecutionEvent) {
	r.recv = func() (*ipb.ExecutionEvent, error) {
		if !s.Receive() {
			return nil, s.Err()
		}
		return event(s.Msg()), nil
	}
	r.close = s.Close
	r.closeOnce = &sync.Once{}
}

// attach opens an AttachExecution stream from r.nextSeq.
func (r *Execution) attach() error {
	sctx, cancel := streamContext(r.ctx, 0)
	s, err := r.c.code.AttachExecution(sctx, request(r.c, &ipb.AttachExecutionRequest{ExecutionId: r.res.ID, FromSeq: r.nextSeq}, ""))
	if err != nil {
		cancel()
		return rpcError(r.op, err)
	}
	r.cancelMu.Lock()
	closed := r.closed
	r.cancel = cancel
	r.cancelMu.Unlock()
	if closed {
		cancel()
	}
	r.recv = func() (*ipb.ExecutionEvent, error) {
		if !s.Receive() {
			return nil, s.Err()
		}
		return s.Msg().GetEvent(), nil
	}
	r.close = s.Close
	r.closeOnce = &sync.Once{}
	return nil
}

func (r *Execution) release() {
	r.closeOnce.Do(func() {
		r.cancelMu.Lock()
		r.cancel()
		r.cancelMu.Unlock()
		r.close()
	})
}

// awaitStarted reads events up to started.
func (r *Execution) awaitStarted() error {
	for !r.started {
		ev, ok := r.next()
		if !ok {
			if r.err != nil {
				return r.err
			}
			return &Error{Op: r.op, Code: connect.CodeInternal, Message: "the execution ended before it started"}
		}
		if ev.Stdout != nil || ev.Stderr != nil || ev.Result != nil || ev.Error != nil || ev.Notice != nil {
			// Output before started (an attach mid-way): keep it.
			r.pending = append(r.pending, ev)
		}
	}
	return nil
}

// next returns the next event that carries something; false at the end
// (r.ended) or on failure (r.err).
func (r *Execution) next() (ExecEvent, bool) {
	if len(r.pending) > 0 && r.started {
		ev := r.pending[0]
		r.pending = r.pending[1:]
		return ev, true
	}
	for !r.ended && r.err == nil {
		ev, err := r.recv()
		if ev == nil {
			r.release()
			if err == nil {
				err = errors.New("the stream ended before the execution did")
			}
			if r.reattach(err) {
				continue
			}
			r.err = streamError(r.ctx, r.op, err)
			return ExecEvent{}, false
		}
		// Keepalives and queued are not events of the execution: no seq.
		numbered := ev.GetKeepalive() == nil && ev.GetQueued() == nil
		if ev.GetSeq() < r.nextSeq && numbered {
			continue // already seen, before a reattach
		}
		if numbered {
			r.nextSeq = ev.GetSeq() + 1
		}
		out := ExecEvent{Seq: ev.GetSeq()}
		switch e := ev.GetEvent().(type) {
		case *ipb.ExecutionEvent_Started:
			r.res.ID = e.Started.GetExecutionId()
			r.res.ContextID = e.Started.GetContextId()
			r.res.Count = e.Started.GetExecutionCount()
			r.started = true
			if r.op == "execute" {
				r.op = "execute " + r.res.ID
			}
			return ExecEvent{}, true
		case *ipb.ExecutionEvent_Stdout:
			o := output(e.Stdout)
			out.Stdout = &o
		case *ipb.ExecutionEvent_Stderr:
			o := output(e.Stderr)
			out.Stderr = &o
		case *ipb.ExecutionEvent_Result:
			res := Result{Main: e.Result.GetIsMainResult(), Text: e.Result.GetText(), Data: map[string]json.RawMessage{}}
			for k, v := range e.Result.GetData() {
				res.Data[k] = json.RawMessage(v)
			}
			out.Result = &res
		case *ipb.ExecutionEvent_Error:
			out.Error = &CodeError{Name: e.Error.GetName(), Value: e.Error.GetValue(), Traceback: e.Error.GetTraceback()}
		case *ipb.ExecutionEvent_Notice:
			out.Notice = &Notice{Kind: NoticeKind(e.Notice.GetKind()), Text: e.Notice.GetText(), Time: e.Notice.GetAt().AsTime()}
		case *ipb.ExecutionEvent_Queued:
			if r.res.ID == "" {
				// Known before started: a broken stream can reattach.
				r.res.ID, r.res.ContextID = e.Queued.GetExecutionId(), e.Queued.GetContextId()
			}
			if r.opts.OnQueued != nil {
				r.opts.OnQueued(e.Queued.GetBehindExecutionId())
			}
			continue
		case *ipb.ExecutionEvent_End:
			r.res.Reason = EndReason(e.End.GetReason())
			r.res.Message = e.End.GetMessage()
			r.ended = true
			r.release()
			return ExecEvent{}, false
		default:
			continue // keepalive
		}
		return out, true
	}
	return ExecEvent{}, false
}

// reattach follows the execution again after its stream broke, from the
// first event not seen. It reports whether it did.
func (r *Execution) reattach(err error) bool {
	r.cancelMu.Lock()
	closed := r.closed
	r.cancelMu.Unlock()
	if r.res.ID == "" || r.reattachs >= maxReattach || r.ctx.Err() != nil || closed {
		return false
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeUnknown, connect.CodeInternal:
	case connect.CodeCanceled:
		// A reset connection has come back as canceled under load
		// (TestClientCode's drop proxy, once in a stress run). Neither the
		// caller's context nor Close cancelled it (both are checked
		// above), so it is a broken connection like any other.
	default:
		return false
	}
	r.reattachs++
	if r.retry == nil {
		r.retry = backoff.New(reattachBackoff, nil)
	}
	if r.retry.Wait(r.ctx) != nil {
		return false
	}
	return r.attach() == nil
}

func output(o *ipb.Output) Output {
	out := Output{Text: o.GetText()}
	if t := o.GetTimestamp(); t != nil {
		out.Time = t.AsTime()
	}
	return out
}

// Events iterates over what the execution produces until it ends; then
// Wait returns the outcome at once. A failure is yielded last.
func (r *Execution) Events() iter.Seq2[ExecEvent, error] {
	return func(yield func(ExecEvent, error) bool) {
		for {
			ev, ok := r.next()
			if !ok {
				if r.err != nil {
					yield(ExecEvent{}, r.err)
				}
				return
			}
			if ev.Stdout == nil && ev.Stderr == nil && ev.Result == nil && ev.Error == nil && ev.Notice == nil {
				continue
			}
			r.record(ev)
			if !yield(ev, nil) {
				return
			}
		}
	}
}

// record adds ev to the outcome and calls its callback.
func (r *Execution) record(ev ExecEvent) {
	switch {
	case ev.Stdout != nil:
		r.stdout.WriteString(ev.Stdout.Text)
		if r.opts.OnStdout != nil {
			r.opts.OnStdout(*ev.Stdout)
		}
	case ev.Stderr != nil:
		r.stderr.WriteString(ev.Stderr.Text)
		if r.opts.OnStderr != nil {
			r.opts.OnStderr(*ev.Stderr)
		}
	case ev.Result != nil:
		r.res.Results = append(r.res.Results, *ev.Result)
		if r.opts.OnResult != nil {
			r.opts.OnResult(*ev.Result)
		}
	case ev.Error != nil:
		r.res.Error = ev.Error
		if r.opts.OnError != nil {
			r.opts.OnError(*ev.Error)
		}
	case ev.Notice != nil:
		r.res.Notices = append(r.res.Notices, *ev.Notice)
		if r.opts.OnNotice != nil {
			r.opts.OnNotice(*ev.Notice)
		}
	}
}

// Wait follows the execution to its end, calling the callbacks of
// ExecOptions, and returns its outcome. An exception in the code is not an
// error: see ExecResult.Reason and Error.
func (r *Execution) Wait() (*ExecResult, error) {
	for {
		ev, ok := r.next()
		if !ok {
			break
		}
		r.record(ev)
	}
	if r.err != nil {
		return nil, r.err
	}
	res := r.res
	res.Stdout = r.stdout.String()
	res.Stderr = r.stderr.String()
	return &res, nil
}

// Close stops following the execution; the code runs on (unless
// InterruptOnDisconnect was set).
func (r *Execution) Close() error {
	r.cancelMu.Lock()
	defer r.cancelMu.Unlock()
	r.closed = true
	r.cancel()
	return nil
}

// String describes the outcome in one line.
func (e *ExecResult) String() string {
	switch e.Reason {
	case EndOK:
		return "ok"
	case EndError:
		if e.Error != nil {
			return "error: " + e.Error.Error()
		}
	}
	if e.Message != "" {
		return fmt.Sprintf("%s: %s", e.Reason, e.Message)
	}
	return e.Reason.String()
}
