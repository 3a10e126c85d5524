// Package codeconnect is envd's native code-execution service,
// envd.interpreter.v1, over an interpreter.Engine: the engine's second
// adapter beside codehttp, which adds execution ids, reattaching by seq,
// explicit interrupts and typed end reasons. It uses only the engine's
// exported API, and is the only place where engine errors become Connect
// codes (toConnectErr).
package codeconnect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/quartz"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/envd-dev/envd/gen/envd/interpreter/v1"
	"github.com/envd-dev/envd/gen/envd/interpreter/v1/interpreterv1connect"
	"github.com/envd-dev/envd/internal/errkind"
	"github.com/envd-dev/envd/internal/interpreter"
	"github.com/envd-dev/envd/internal/rpcerr"
	"github.com/envd-dev/envd/internal/server"
	"github.com/envd-dev/envd/internal/streamloop"
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
// The events of an execution on the wire are the engine's, with the
// engine's seqs: seq 0 is always started (interpreter.EventStarted), with
// the execution id and, when the kernel accepted the code before anything
// else happened (the usual case), its execution count; else count 0, and
// an execution count that still comes is sent as a second started. So the
// seqs are contiguous, the same for every reader, and started is sent once
// the engine stored it: a queued execution's stream only has keepalives
// until its turn comes. Keepalives are not events of the execution and
// carry seq 0.
type Service struct {
	eng       *interpreter.Engine // nil: code execution is off
	log       *slog.Logger
	readyWait time.Duration
	clock     quartz.Clock
}

var _ interpreterv1connect.InterpreterServiceHandler = (*Service)(nil)

// Options configures New. Zero values are the defaults.
type Options struct {
	// Logger. Zero: slog.Default().
	Logger *slog.Logger
	// ReadyWait bounds how long a call waits for Jupyter, or for a
	// language's first kernel, before answering unavailable. Zero:
	// interpreter.ReadyWait, as the HTTP API.
	ReadyWait time.Duration
	// Clock drives the keepalives. Zero: the real clock.
	Clock quartz.Clock
}

// New returns the service over eng; a nil eng answers unavailable to every
// call (envd runs with -no-jupyter).
func New(eng *interpreter.Engine, opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ReadyWait <= 0 {
		opts.ReadyWait = interpreter.ReadyWait
	}
	if opts.Clock == nil {
		opts.Clock = quartz.NewReal()
	}
	return &Service{eng: eng, log: opts.Logger, readyWait: opts.ReadyWait, clock: opts.Clock}
}

// Handler returns the service's route pattern and handler.
func (s *Service) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return interpreterv1connect.NewInterpreterServiceHandler(s, opts...)
}

// engine returns the engine, or every call's answer when code execution is
// off.
func (s *Service) engine() (*interpreter.Engine, error) {
	if s.eng == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New(interpreter.DisabledMessage))
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
	// Two kinds get a message that says what to do.
	switch {
	case errors.Is(err, interpreter.ErrContextAndLanguage):
		err = errkind.New(interpreter.ErrContextAndLanguage, nil, "give at most one of context_id and language: a context has its language")
	case errors.Is(err, interpreter.ErrNotReady):
		err = fmt.Errorf("%w (waited up to %s; retry later)", err, s.readyWait)
	}
	if _, known := kinds.Code(err); !known {
		s.log.Warn("code request failed", "error", err)
	}
	return kinds.Error(err)
}

var kinds = rpcerr.Kinds{
	{Err: interpreter.ErrContextNotFound, Code: connect.CodeNotFound},
	{Err: interpreter.ErrExecutionNotFound, Code: connect.CodeNotFound},
	{Err: interpreter.ErrContextAndLanguage, Code: connect.CodeInvalidArgument},
	{Err: interpreter.ErrUnsupportedLanguage, Code: connect.CodeInvalidArgument},
	{Err: interpreter.ErrBadCwd, Code: connect.CodeInvalidArgument},
	{Err: interpreter.ErrBadEnv, Code: connect.CodeInvalidArgument},
	{Err: interpreter.ErrBadQuery, Code: connect.CodeInvalidArgument},
	{Err: interpreter.ErrBusy, Code: connect.CodeUnavailable},
	{Err: interpreter.ErrKernelUnavailable, Code: connect.CodeUnavailable},
	{Err: interpreter.ErrNotSupported, Code: connect.CodeUnimplemented},
	{Err: interpreter.ErrOutOfRange, Code: connect.CodeOutOfRange},
	{Err: interpreter.ErrNotReady, Code: connect.CodeUnavailable},
	{Err: interpreter.ErrClosed, Code: connect.CodeUnavailable},
}

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
	x, rd, err := eng.Execute(wctx, interpreter.ExecuteRequest{
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
	x, err := eng.Execution(id)
	if err != nil {
		return s.toConnectErr(ctx, err)
	}
	from := req.Msg.GetFromSeq()
	rd, err := x.FollowFrom(from)
	if err != nil {
		return s.toConnectErr(ctx, fmt.Errorf("from_seq %d: %w", from, err))
	}
	return s.follow(ctx, x, rd, from, server.KeepaliveInterval(req.Header()), func(ev *pb.ExecutionEvent) error {
		return stream.Send(&pb.AttachExecutionResponse{Event: ev})
	})
}

// follow sends x's events from wire seq from until the end event, with
// keepalives while the execution is quiet (streamloop runs the loop). It
// is the only caller of send for its stream, and closes rd.
func (s *Service) follow(ctx context.Context, x *interpreter.Execution, rd *interpreter.Reader, from uint64, keepalive time.Duration, send func(*pb.ExecutionEvent) error) error {
	defer rd.Close()
	next := from // the seq of the next event to send
	// While the execution waits behind another one, say so: at once,
	// then with a keepalive when the one it waits for changed.
	behind := ""
	queued := func() error {
		b := x.WaitsFor()
		if next > 0 || b == "" || b == behind {
			return nil
		}
		behind = b
		return send(&pb.ExecutionEvent{Event: &pb.ExecutionEvent_Queued{Queued: &pb.Queued{
			ExecutionId: x.ID, ContextId: x.ContextID, BehindExecutionId: b,
		}}})
	}
	if err := queued(); err != nil {
		return err
	}
	return streamloop.Loop{
		Clock:     s.clock,
		Keepalive: keepalive,
		Ready:     rd.Wait,
		Pump: func() (bool, error) {
			evs, err := rd.Read()
			if err != nil && !errors.Is(err, io.EOF) {
				return false, connect.NewError(connect.CodeInternal, fmt.Errorf("execution %s: read events: %w", x.ID, err))
			}
			for _, ev := range evs {
				if ev.Kind == interpreter.EventLost {
					continue // the gap shows in the seqs
				}
				if next == 0 && ev.Seq > 0 {
					// started is no longer retained: it is state, too.
					if err := send(started(x.Started(), 0)); err != nil {
						return false, err
					}
					next = 1
				}
				if ev.Seq < next {
					continue // already seen by the client
				}
				if ev.Seq > next {
					return false, connect.NewError(connect.CodeDataLoss, fmt.Errorf(
						"execution %s: %d events (seq %d to %d) are no longer retained: more output came than envd keeps, "+
							"and it was not read in time; the rest of the execution can still be followed from seq %d",
						x.ID, ev.Seq-next, next, ev.Seq-1, ev.Seq))
				}
				if ev.Kind == interpreter.EventEnd {
					server.LastSend(ctx) // the end and the stream's end in one write
				}
				if err := send(toProto(x, ev)); err != nil {
					return false, err
				}
				next++
				if ev.Kind == interpreter.EventEnd {
					return true, streamloop.Done
				}
			}
			if len(evs) == 0 && errors.Is(err, io.EOF) {
				// Every stored event was read and the end was not among
				// those sent: nothing follows from_seq.
				return false, streamloop.Done
			}
			return len(evs) > 0, nil
		},
		SendKeepalive: func() error {
			if err := queued(); err != nil {
				return err
			}
			return send(&pb.ExecutionEvent{Event: &pb.ExecutionEvent_Keepalive{Keepalive: &pb.Keepalive{}}})
		},
	}.Run(ctx)
}

func started(st *interpreter.Started, seq uint64) *pb.ExecutionEvent {
	return &pb.ExecutionEvent{Seq: seq, Event: &pb.ExecutionEvent_Started{Started: &pb.Started{
		ExecutionId: st.ExecutionID, ContextId: st.ContextID, ExecutionCount: int64(st.ExecutionCount),
	}}}
}

// toProto converts one stored event.
func toProto(x *interpreter.Execution, ev interpreter.Event) *pb.ExecutionEvent {
	out := &pb.ExecutionEvent{Seq: ev.Seq}
	switch ev.Kind {
	case interpreter.EventStarted:
		return started(ev.Started, ev.Seq)
	case interpreter.EventExecutionCount:
		return started(&interpreter.Started{ExecutionID: x.ID, ContextID: x.ContextID, ExecutionCount: ev.ExecutionCount}, ev.Seq)
	case interpreter.EventStdout:
		out.Event = &pb.ExecutionEvent_Stdout{Stdout: output(ev)}
	case interpreter.EventStderr:
		out.Event = &pb.ExecutionEvent_Stderr{Stderr: output(ev)}
	case interpreter.EventResult:
		r := &pb.Result{IsMainResult: ev.Result.IsMain, Data: make(map[string][]byte, len(ev.Result.Data))}
		for mime, v := range ev.Result.Data {
			r.Data[mime] = v
		}
		r.Text, _ = ev.Result.Text()
		out.Event = &pb.ExecutionEvent_Result{Result: r}
	case interpreter.EventError:
		out.Event = &pb.ExecutionEvent_Error{Error: &pb.Error{Name: ev.Error.Name, Value: ev.Error.Value, Traceback: ev.Error.Traceback}}
	case interpreter.EventNotice:
		out.Event = &pb.ExecutionEvent_Notice{Notice: &pb.Notice{
			Kind: noticeKind(ev.Notice.Kind), Text: ev.Notice.Text, At: timestamppb.New(ev.Notice.At),
		}}
	case interpreter.EventEnd:
		out.Event = &pb.ExecutionEvent_End{End: &pb.End{Reason: endReason(ev.End.Reason), Message: ev.End.Message}}
	}
	return out
}

func output(ev interpreter.Event) *pb.Output {
	o := &pb.Output{Text: ev.Text}
	if t, err := time.Parse(time.RFC3339Nano, ev.Timestamp); err == nil {
		o.Timestamp = timestamppb.New(t)
	}
	return o
}

func noticeKind(k interpreter.NoticeKind) pb.NoticeKind {
	switch k {
	case interpreter.NoticeKernelRestarted:
		return pb.NoticeKind_NOTICE_KIND_KERNEL_RESTARTED
	case interpreter.NoticeKernelReplaced:
		return pb.NoticeKind_NOTICE_KIND_KERNEL_REPLACED
	case interpreter.NoticePackagesChanged:
		return pb.NoticeKind_NOTICE_KIND_PACKAGES_CHANGED
	}
	return pb.NoticeKind_NOTICE_KIND_UNSPECIFIED
}

func endReason(r interpreter.EndReason) pb.EndReason {
	switch r {
	case interpreter.EndOK:
		return pb.EndReason_END_REASON_OK
	case interpreter.EndError:
		return pb.EndReason_END_REASON_ERROR
	case interpreter.EndInterrupted:
		return pb.EndReason_END_REASON_INTERRUPTED
	case interpreter.EndTimedOut:
		return pb.EndReason_END_REASON_TIMED_OUT
	case interpreter.EndKernelDied:
		return pb.EndReason_END_REASON_KERNEL_DIED
	case interpreter.EndContextRestarted:
		return pb.EndReason_END_REASON_CONTEXT_RESTARTED
	case interpreter.EndServerRestarted:
		return pb.EndReason_END_REASON_SERVER_RESTARTED
	}
	return pb.EndReason_END_REASON_UNSPECIFIED
}

func contextProto(c interpreter.ContextInfo) *pb.Context {
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
	c, err := eng.RestartContext(ctx, id)
	if err != nil {
		return nil, s.toConnectErr(ctx, err)
	}
	return connect.NewResponse(&pb.RestartContextResponse{Context: contextProto(c)}), nil
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

// ListLanguages lists the languages the installed kernelspecs run, as
// installed now, with their default contexts.
func (s *Service) ListLanguages(ctx context.Context, req *connect.Request[pb.ListLanguagesRequest]) (*connect.Response[pb.ListLanguagesResponse], error) {
	eng, err := s.engine()
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, s.readyWait)
	defer cancel()
	langs, err := eng.Languages(wctx)
	if err != nil {
		return nil, s.toConnectErr(ctx, err)
	}
	out := &pb.ListLanguagesResponse{Languages: make([]*pb.Language, 0, len(langs))}
	for _, l := range langs {
		out.Languages = append(out.Languages, &pb.Language{
			Language:              l.Language,
			KernelName:            l.KernelName,
			DisplayName:           l.DisplayName,
			Aliases:               l.Aliases,
			DefaultContextId:      l.DefaultContextID,
			DefaultContextRunning: l.DefaultContextRunning,
		})
	}
	return connect.NewResponse(out), nil
}
