package interpreter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/envd-dev/envd/gen/envd/interpreter/v1"
	"github.com/envd-dev/envd/gen/envd/interpreter/v1/interpreterv1connect"
	"github.com/envd-dev/envd/internal/server"
)

// Service is envd's native code-execution service (envd.interpreter.v1)
// over an Engine: the second adapter of the engine, beside HTTP, and the
// only place where engine errors become Connect codes (toConnectErr).
//
// Like the HTTP API, it runs code as the kernels' account (the engine's
// RunAs), whoever the request's user is, and waits for Jupyter (or a
// language's first kernel) at most ServiceOptions.ReadyWait, and never
// past the request's own deadline, before answering unavailable.
//
// Unlike /execute, a client that goes away does not interrupt its code
// unless it asked so (interrupt_on_disconnect): it may reattach with
// AttachExecution.
//
// The events of an execution on the wire: seq 0 is always started, with
// the execution id. When the kernel's execution count is the engine's
// first event (the usual case), started carries it and stands in its
// place, and every other event keeps the engine's seq. Otherwise (the
// execution ended before its code reached the kernel) started is made up,
// with execution count 0, and the engine's events follow from seq 1; an
// execution count that still comes is sent as a second started. Either
// way the seqs are contiguous, the same for every reader, and started is
// sent once the engine stored its first event: a queued execution's stream
// only has keepalives until its turn comes. Keepalives are not events of
// the execution and carry seq 0.
type Service struct {
	eng       *Engine // nil: code execution is off
	log       *slog.Logger
	readyWait time.Duration
}

var _ interpreterv1connect.InterpreterServiceHandler = (*Service)(nil)

// ServiceOptions configures NewService. Zero values are the defaults.
type ServiceOptions struct {
	// Logger. Zero: slog.Default().
	Logger *slog.Logger
	// ReadyWait bounds how long a call waits for Jupyter, or for a
	// language's first kernel, before answering unavailable. Zero: 50 s,
	// as the HTTP API.
	ReadyWait time.Duration
}

// NewService returns the service over eng; a nil eng answers unavailable
// to every call (envd runs with -no-jupyter).
func NewService(eng *Engine, opts ServiceOptions) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ReadyWait <= 0 {
		opts.ReadyWait = defaultReadyWait
	}
	return &Service{eng: eng, log: opts.Logger, readyWait: opts.ReadyWait}
}

// Handler returns the service's route pattern and handler.
func (s *Service) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return interpreterv1connect.NewInterpreterServiceHandler(s, opts...)
}

// engine returns the engine, or every call's answer when code execution is
// off.
func (s *Service) engine() (*Engine, error) {
	if s.eng == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New(disabledMsg))
	}
	return s.eng, nil
}

// toConnectErr maps engine errors to Connect codes, in this one place. ctx
// is the request's: when it ended, that is the answer, whatever the engine
// said about it.
func (s *Service) toConnectErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return connect.NewError(connect.CodeOf(ctxErr), ctxErr)
	}
	var code connect.Code
	msg := err.Error()
	switch {
	case errors.Is(err, ErrContextNotFound):
		code = connect.CodeNotFound
		if id, ok := strings.CutPrefix(msg, ErrContextNotFound.Error()+": "); ok {
			msg = fmt.Sprintf("context %q not found", id)
		}
	case errors.Is(err, ErrContextAndLanguage):
		code, msg = connect.CodeInvalidArgument, "give at most one of context_id and language: a context has its language"
	case errors.Is(err, ErrUnsupportedLanguage), errors.Is(err, ErrBadCwd), errors.Is(err, ErrBadEnv):
		code = connect.CodeInvalidArgument
	case errors.Is(err, ErrNotReady):
		// What the engine waits for says more than the wait's end.
		if h := s.eng.Health(); h != nil {
			msg = h.Error()
		} else {
			msg = ErrNotReady.Error() + ": the context's kernel is still starting"
		}
		code, msg = connect.CodeUnavailable, fmt.Sprintf("%s (waited up to %s; retry later)", msg, s.readyWait)
	case errors.Is(err, ErrClosed):
		code = connect.CodeUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		code = connect.CodeDeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = connect.CodeCanceled
	default:
		s.log.Warn("code request failed", "error", err)
		code = connect.CodeInternal
	}
	return connect.NewError(code, &wireError{msg: msg, err: err})
}

// wireError is err with another message.
type wireError struct {
	msg string
	err error
}

func (e *wireError) Error() string { return e.msg }
func (e *wireError) Unwrap() error { return e.err }

func invalid(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
}

// Execute validates the request, queues the code and streams its events
// until its end. When the stream ends first, the code runs on, unless the
// request asked for an interrupt.
func (s *Service) Execute(ctx context.Context, req *connect.Request[pb.ExecuteRequest], stream *connect.ServerStream[pb.ExecuteResponse]) error {
	eng, err := s.engine()
	if err != nil {
		return err
	}
	m := req.Msg
	if m.GetCode() == "" {
		return invalid("code is empty: give the code to run")
	}
	if m.GetContextId() != "" && m.GetLanguage() != "" {
		return invalid("give at most one of context_id and language: a context has its language")
	}
	for name := range m.GetEnvVars() {
		if name == "" {
			return invalid("env_vars: a variable has an empty name")
		}
	}
	var timeout time.Duration
	if t := m.GetTimeout(); t != nil {
		if err := t.CheckValid(); err != nil {
			return invalid("timeout: %v", err)
		}
		if timeout = t.AsDuration(); timeout < 0 {
			return invalid("timeout %s is negative: give a positive duration, or none", timeout)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, s.readyWait)
	x, rd, err := eng.Execute(wctx, ExecuteRequest{
		Code:      m.GetCode(),
		ContextID: m.GetContextId(),
		Language:  m.GetLanguage(),
		Env:       m.GetEnvVars(),
		Timeout:   timeout,
	})
	cancel()
	if err != nil {
		return s.toConnectErr(ctx, err)
	}
	err = s.follow(ctx, x, rd, 0, server.KeepaliveInterval(req.Header()), func(ev *pb.ExecutionEvent) error {
		return stream.Send(&pb.ExecuteResponse{Event: ev})
	})
	if err != nil && m.GetInterruptOnDisconnect() {
		x.Interrupt()
	}
	return err
}

// AttachExecution follows an execution by id: the events from from_seq
// still retained, then live ones, to the end.
func (s *Service) AttachExecution(ctx context.Context, req *connect.Request[pb.AttachExecutionRequest], stream *connect.ServerStream[pb.AttachExecutionResponse]) error {
	eng, err := s.engine()
	if err != nil {
		return err
	}
	id := req.Msg.GetExecutionId()
	if id == "" {
		return invalid("execution_id is empty: give the id of the started event")
	}
	x, ok := eng.Execution(id)
	if !ok {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("execution %q not found: it never existed, or it ended too long ago (envd keeps the last %d finished executions for %s)", id, maxFinished, eng.opts.KeepFinished))
	}
	from := req.Msg.GetFromSeq()
	rd := x.Follow()
	if err := checkFrom(x, from); err != nil {
		rd.Close()
		return err
	}
	return s.follow(ctx, x, rd, from, server.KeepaliveInterval(req.Header()), func(ev *pb.ExecutionEvent) error {
		return stream.Send(&pb.AttachExecutionResponse{Event: ev})
	})
}

// checkFrom refuses a from_seq no reader can have reached.
func checkFrom(x *Execution, from uint64) error {
	if from == 0 {
		return nil
	}
	ended := false // and its end event stored: read before counting
	select {
	case <-x.Done():
		ended = true
	default:
	}
	first := EventKind(x.firstKind.Load())
	if first == 0 {
		return connect.NewError(connect.CodeOutOfRange, fmt.Errorf("from_seq %d: execution %s has sent no event yet: attach from 0", from, x.ID))
	}
	n := x.records.Load() + shift(first) // events on the wire so far, started included
	switch {
	case ended && from >= n:
		return connect.NewError(connect.CodeOutOfRange, fmt.Errorf("from_seq %d: execution %s ended with event %d: nothing follows it", from, x.ID, n-1))
	case from > n:
		return connect.NewError(connect.CodeOutOfRange, fmt.Errorf("from_seq %d: execution %s has sent events up to %d so far", from, x.ID, n-1))
	}
	return nil
}

// shift is what the engine's seqs are offset by on the wire, given the
// kind of the engine's first event (see Service).
func shift(first EventKind) uint64 {
	if first == EventExecutionCount {
		return 0
	}
	return 1
}

// follow sends x's events from wire seq from until the end event, with
// keepalives while the execution is quiet. It is the only caller of send
// for its stream, and closes rd.
func (s *Service) follow(ctx context.Context, x *Execution, rd *Reader, from uint64, keepalive time.Duration, send func(*pb.ExecutionEvent) error) error {
	defer rd.Close()
	ticker := time.NewTicker(keepalive)
	defer ticker.Stop()
	sh := uint64(0)
	known := false // sh is known: the engine stored its first event
	next := from   // the wire seq of the next event to send
	for {
		evs, err := rd.Read()
		if err != nil && !errors.Is(err, io.EOF) {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("execution %s: read events: %w", x.ID, err))
		}
		if !known {
			if first := EventKind(x.firstKind.Load()); first != 0 {
				known, sh = true, shift(first)
				if next == 0 {
					count := int64(0)
					if sh == 0 {
						count = x.count.Load()
					}
					if err := send(started(x, 0, count)); err != nil {
						return err
					}
					next = 1
				}
			}
		}
		for _, ev := range evs {
			if ev.Kind == EventLost {
				continue // the gap shows in the seqs
			}
			seq := ev.Seq + sh
			if seq < next {
				continue // started, or already seen by the client
			}
			if seq > next {
				return connect.NewError(connect.CodeDataLoss, fmt.Errorf(
					"execution %s: %d events (seq %d to %d) are no longer retained: more output came than envd keeps, "+
						"and it was not read in time; the rest of the execution can still be followed from seq %d",
					x.ID, seq-next, next, seq-1, seq))
			}
			if err := send(toProto(x, ev, seq)); err != nil {
				return err
			}
			next++
			if ev.Kind == EventEnd {
				return nil
			}
		}
		if len(evs) > 0 {
			ticker.Reset(keepalive)
			continue
		}
		if errors.Is(err, io.EOF) {
			// Every stored event was read and the end was not among those
			// sent: nothing follows from_seq.
			return nil
		}
		select {
		case <-rd.Wait():
		case <-ticker.C:
			if err := send(&pb.ExecutionEvent{Event: &pb.ExecutionEvent_Keepalive{Keepalive: &pb.Keepalive{}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func started(x *Execution, seq uint64, count int64) *pb.ExecutionEvent {
	return &pb.ExecutionEvent{Seq: seq, Event: &pb.ExecutionEvent_Started{Started: &pb.Started{
		ExecutionId: x.ID, ContextId: x.ContextID, ExecutionCount: count,
	}}}
}

// toProto converts one stored event, with its wire seq.
func toProto(x *Execution, ev Event, seq uint64) *pb.ExecutionEvent {
	out := &pb.ExecutionEvent{Seq: seq}
	switch ev.Kind {
	case EventExecutionCount:
		return started(x, seq, int64(ev.ExecutionCount))
	case EventStdout:
		out.Event = &pb.ExecutionEvent_Stdout{Stdout: output(ev)}
	case EventStderr:
		out.Event = &pb.ExecutionEvent_Stderr{Stderr: output(ev)}
	case EventResult:
		r := &pb.Result{IsMainResult: ev.Result.IsMain, Data: make(map[string][]byte, len(ev.Result.Data))}
		for mime, v := range ev.Result.Data {
			r.Data[mime] = v
		}
		if v, ok := ev.Result.Data["text/plain"]; ok {
			r.Text = plainText(v)
		}
		out.Event = &pb.ExecutionEvent_Result{Result: r}
	case EventError:
		out.Event = &pb.ExecutionEvent_Error{Error: &pb.Error{Name: ev.Error.Name, Value: ev.Error.Value, Traceback: ev.Error.Traceback}}
	case EventEnd:
		out.Event = &pb.ExecutionEvent_End{End: &pb.End{Reason: endReason(ev.End.Reason), Message: ev.End.Message}}
	}
	return out
}

func output(ev Event) *pb.Output {
	o := &pb.Output{Text: ev.Text}
	if t, err := time.Parse(time.RFC3339Nano, ev.Timestamp); err == nil {
		o.Timestamp = timestamppb.New(t)
	}
	return o
}

// plainText is a text/plain value as the HTTP API shows it (one outer pair
// of quotes removed), decoded. Jupyter may give it as a list of lines.
func plainText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(unquoteText(raw), &s) == nil {
		return s
	}
	var lines []string
	if json.Unmarshal(raw, &lines) == nil {
		return strings.Join(lines, "")
	}
	return string(raw)
}

func endReason(r EndReason) pb.EndReason {
	switch r {
	case EndOK:
		return pb.EndReason_END_REASON_OK
	case EndError:
		return pb.EndReason_END_REASON_ERROR
	case EndInterrupted:
		return pb.EndReason_END_REASON_INTERRUPTED
	case EndTimedOut:
		return pb.EndReason_END_REASON_TIMED_OUT
	case EndKernelDied:
		return pb.EndReason_END_REASON_KERNEL_DIED
	case EndContextRestarted:
		return pb.EndReason_END_REASON_CONTEXT_RESTARTED
	case EndServerRestarted:
		return pb.EndReason_END_REASON_SERVER_RESTARTED
	}
	return pb.EndReason_END_REASON_UNSPECIFIED
}

func contextProto(c ContextInfo) *pb.Context {
	return &pb.Context{Id: c.ID, Language: c.Language, Cwd: c.Cwd}
}

// Interrupt interrupts the code running on a context; nothing running is
// not an error (the code may have just ended).
func (s *Service) Interrupt(ctx context.Context, req *connect.Request[pb.InterruptRequest]) (*connect.Response[pb.InterruptResponse], error) {
	eng, err := s.engine()
	if err != nil {
		return nil, err
	}
	id := req.Msg.GetContextId()
	if id == "" {
		return nil, invalid("context_id is empty: give the context whose code to interrupt")
	}
	if _, err := eng.Interrupt(id); err != nil {
		return nil, s.toConnectErr(ctx, err)
	}
	return connect.NewResponse(&pb.InterruptResponse{}), nil
}

// CreateContext starts a kernel of the language in cwd.
func (s *Service) CreateContext(ctx context.Context, req *connect.Request[pb.CreateContextRequest]) (*connect.Response[pb.CreateContextResponse], error) {
	eng, err := s.engine()
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, s.readyWait)
	defer cancel()
	c, err := eng.CreateContext(wctx, req.Msg.GetLanguage(), req.Msg.GetCwd())
	if err != nil {
		return nil, s.toConnectErr(ctx, err)
	}
	return connect.NewResponse(&pb.CreateContextResponse{Context: contextProto(c.Info())}), nil
}

// ListContexts lists the contexts in creation order.
func (s *Service) ListContexts(ctx context.Context, req *connect.Request[pb.ListContextsRequest]) (*connect.Response[pb.ListContextsResponse], error) {
	eng, err := s.engine()
	if err != nil {
		return nil, err
	}
	out := &pb.ListContextsResponse{}
	for _, c := range eng.Contexts() {
		out.Contexts = append(out.Contexts, contextProto(c))
	}
	return connect.NewResponse(out), nil
}

// RestartContext gives a context a fresh kernel in the same cwd.
func (s *Service) RestartContext(ctx context.Context, req *connect.Request[pb.RestartContextRequest]) (*connect.Response[pb.RestartContextResponse], error) {
	eng, err := s.engine()
	if err != nil {
		return nil, err
	}
	id := req.Msg.GetContextId()
	if id == "" {
		return nil, invalid("context_id is empty: give the context to restart")
	}
	c, err := eng.Context(id)
	if err != nil {
		return nil, s.toConnectErr(ctx, err)
	}
	if err := c.restart(ctx); err != nil {
		return nil, s.toConnectErr(ctx, err)
	}
	return connect.NewResponse(&pb.RestartContextResponse{Context: contextProto(c.Info())}), nil
}

// RemoveContext stops a context's kernel and forgets the context.
func (s *Service) RemoveContext(ctx context.Context, req *connect.Request[pb.RemoveContextRequest]) (*connect.Response[pb.RemoveContextResponse], error) {
	eng, err := s.engine()
	if err != nil {
		return nil, err
	}
	id := req.Msg.GetContextId()
	if id == "" {
		return nil, invalid("context_id is empty: give the context to remove")
	}
	if err := eng.RemoveContext(ctx, id); err != nil {
		return nil, s.toConnectErr(ctx, err)
	}
	return connect.NewResponse(&pb.RemoveContextResponse{}), nil
}
