// Package shellconnect is the Connect service envd.shell.v1 over a
// shell.Manager: the only place where the wire meets the shell sessions,
// and where domain errors become Connect codes (toConnectErr). It uses only
// the package shell's exported API.
package shellconnect

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/envd-dev/envd/gen/envd/shell/v1"
	"github.com/envd-dev/envd/gen/envd/shell/v1/shellv1connect"
	"github.com/envd-dev/envd/internal/auth"
	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/errkind"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/process"
	"github.com/envd-dev/envd/internal/rpcerr"
	"github.com/envd-dev/envd/internal/server"
	"github.com/envd-dev/envd/internal/shell"
	"github.com/envd-dev/envd/internal/streamloop"
)

// Service is envd.shell.v1.ShellService.
type Service struct {
	m        *shell.Manager
	defaults *defaults.Defaults
	log      *slog.Logger
}

var _ shellv1connect.ShellServiceHandler = (*Service)(nil)

// New adapts m to the wire; d gives the default working directory. A nil
// log is slog.Default().
func New(m *shell.Manager, d *defaults.Defaults, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	return &Service{m: m, defaults: d, log: log}
}

// Handler returns the service's route pattern and handler.
func (s *Service) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return shellv1connect.NewShellServiceHandler(s, opts...)
}

// toConnectErr maps errors to Connect codes, in this one place (kinds): a
// domain error (the adapter's own refusals included) by its kind, with its
// message as is; a context's end as such; anything else is internal, and
// logged.
func (s *Service) toConnectErr(err error) error {
	if err == nil {
		return nil
	}
	if _, known := kinds.Code(err); !known {
		s.log.Warn("shell request failed", "error", err)
	}
	return kinds.Error(err)
}

var kinds = rpcerr.Kinds{
	{Err: shell.ErrNotFound, Code: connect.CodeNotFound},
	{Err: shell.ErrInvalid, Code: connect.CodeInvalidArgument},
	{Err: shell.ErrEnded, Code: connect.CodeFailedPrecondition},
	{Err: shell.ErrUnauthorized, Code: connect.CodeUnauthenticated},
	{Err: shell.ErrPermission, Code: connect.CodePermissionDenied},
	{Err: shell.ErrExhausted, Code: connect.CodeResourceExhausted},
	{Err: shell.ErrUnavailable, Code: connect.CodeUnavailable},
}

// invalid is a request the adapter refuses before the domain sees it.
func invalid(format string, args ...any) error {
	return errkind.Errorf(shell.ErrInvalid, format, args...)
}

// errNoUser refuses a request that names no user where one is needed.
var errNoUser = &shell.Error{Kind: shell.ErrUnauthorized, Msg: "no user specified"}

// requester is the user a request acts as, who finds only the sessions the
// Manager lets it find. In strict mode a request must name one.
func (s *Service) requester(ctx context.Context) (*identity.User, error) {
	u := auth.UserFrom(ctx)
	if u == nil && s.m.StrictUsers() {
		return nil, s.toConnectErr(errNoUser)
	}
	return u, nil
}

// session finds the session a request names, as its requester sees it.
func (s *Service) session(ctx context.Context, id string) (*shell.Session, error) {
	as, err := s.requester(ctx)
	if err != nil {
		return nil, err
	}
	if id == "" {
		return nil, s.toConnectErr(invalid("session_id is missing: give the id Create returned"))
	}
	sess, err := s.m.Get(id, as)
	return sess, s.toConnectErr(err)
}

// Create starts a session.
func (s *Service) Create(ctx context.Context, req *connect.Request[pb.CreateRequest]) (*connect.Response[pb.CreateResponse], error) {
	as := auth.UserFrom(ctx)
	u := as
	if name := req.Msg.GetUser(); name != "" {
		var err error
		if u, err = identity.Lookup(name); err != nil {
			if errors.Is(err, identity.ErrUnknownUser) {
				return nil, s.toConnectErr(invalid("user '%s' does not exist", name))
			}
			return nil, s.toConnectErr(err)
		}
	}
	if u == nil {
		return nil, s.toConnectErr(errNoUser)
	}
	dir, err := u.Resolve(req.Msg.GetCwd(), s.defaults.Workdir())
	if err != nil {
		return nil, s.toConnectErr(invalid("%w", err))
	}
	o := shell.CreateOptions{User: u, As: as, Dir: dir, Env: req.Msg.GetEnv(), Tag: req.Msg.GetTag()}
	if cwd := req.Msg.GetCwd(); cwd != "" {
		o.Cwd = &cwd
	}
	if t := req.Msg.Pty; t != nil {
		if t.GetCols() > 0xffff || t.GetRows() > 0xffff {
			return nil, s.toConnectErr(invalid("terminal size %dx%d is too large", t.GetCols(), t.GetRows()))
		}
		o.PTY = &process.Size{Cols: uint16(t.GetCols()), Rows: uint16(t.GetRows())}
	}
	sess, err := s.m.Create(o)
	if err != nil {
		return nil, s.toConnectErr(err)
	}
	return connect.NewResponse(&pb.CreateResponse{Session: sessionProto(sess.Info())}), nil
}

// Run runs a command and streams its events.
func (s *Service) Run(ctx context.Context, req *connect.Request[pb.RunRequest], stream *connect.ServerStream[pb.RunResponse]) error {
	sess, err := s.session(ctx, req.Msg.GetSessionId())
	if err != nil {
		return err
	}
	o := shell.RunOptions{Command: req.Msg.GetCommand(), Stdin: req.Msg.GetStdin(), Input: req.Msg.GetInput()}
	if t := req.Msg.Timeout; t != nil {
		if err := t.CheckValid(); err != nil {
			return s.toConnectErr(invalid("timeout: %v", err))
		}
		o.Timeout = t.AsDuration()
	}
	_, rd, err := sess.Run(o)
	if err != nil {
		return s.toConnectErr(err)
	}
	return s.stream(ctx, rd, server.KeepaliveInterval(req.Header()), func(e *pb.Event) error {
		return stream.Send(&pb.RunResponse{Event: e})
	})
}

// Connect streams a command's events from its start.
func (s *Service) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	sess, err := s.session(ctx, req.Msg.GetSessionId())
	if err != nil {
		return err
	}
	rd, err := sess.Connect(req.Msg.GetCommandId())
	if err != nil {
		return s.toConnectErr(err)
	}
	return s.stream(ctx, rd, server.KeepaliveInterval(req.Header()), func(e *pb.Event) error {
		return stream.Send(&pb.ConnectResponse{Event: e})
	})
}

// stream sends rd's events, keepalives while the command is quiet, and
// ends after the command's end. It owns send and closes rd.
func (s *Service) stream(ctx context.Context, rd *shell.Reader, keepalive time.Duration, send func(*pb.Event) error) error {
	defer rd.Close()
	var scratch []byte // coalesce's buffer: Send has marshalled a message when it returns
	return streamloop.Loop{
		Clock:     s.m.Clock(),
		Keepalive: keepalive,
		Ready:     rd.Ready,
		Pump: func() (bool, error) {
			evs, done := rd.Next()
			evs, scratch = coalesce(evs, scratch)
			for i, e := range evs {
				if done && i == len(evs)-1 {
					server.LastSend(ctx)
				}
				if err := send(eventProto(e)); err != nil {
					return false, err
				}
			}
			if done {
				return false, streamloop.Done
			}
			return len(evs) > 0, nil
		},
		SendKeepalive: func() error {
			return send(&pb.Event{Event: &pb.Event_Keepalive{Keepalive: &pb.Keepalive{}}})
		},
	}.Run(ctx)
}

// coalesce joins each run of output events of one stream into one event,
// so that a reader a few records behind sends one message rather than one
// per record. The joined bytes go into scratch, grown as needed and
// returned for the next call.
func coalesce(evs []shell.Event, scratch []byte) ([]shell.Event, []byte) {
	same := func(i, j int) bool {
		return evs[i].Kind == shell.EventOutput && evs[j].Kind == shell.EventOutput && evs[i].Stream == evs[j].Stream
	}
	need := 0
	for i := range evs {
		if i > 0 && same(i-1, i) || i+1 < len(evs) && same(i, i+1) {
			need += len(evs[i].Data)
		}
	}
	if need == 0 {
		return evs, scratch
	}
	if cap(scratch) < need {
		scratch = make([]byte, 0, need)
	}
	buf := scratch[:0]
	out := make([]shell.Event, 0, len(evs))
	for i := 0; i < len(evs); {
		j := i + 1
		for j < len(evs) && same(i, j) {
			j++
		}
		if j == i+1 {
			out = append(out, evs[i])
			i = j
			continue
		}
		from := len(buf)
		for _, e := range evs[i:j] {
			buf = append(buf, e.Data...)
		}
		e := evs[i]
		e.Data = buf[from:len(buf):len(buf)]
		out = append(out, e)
		i = j
	}
	return out, scratch
}

var endReasons = map[shell.EndReason]pb.EndReason{
	shell.EndExited:       pb.EndReason_END_REASON_EXITED,
	shell.EndSignaled:     pb.EndReason_END_REASON_SIGNALED,
	shell.EndTimedOut:     pb.EndReason_END_REASON_TIMED_OUT,
	shell.EndInterrupted:  pb.EndReason_END_REASON_INTERRUPTED,
	shell.EndSessionEnded: pb.EndReason_END_REASON_SESSION_ENDED,
}

// eventProto is e on the wire.
func eventProto(e shell.Event) *pb.Event {
	switch e.Kind {
	case shell.EventQueued:
		return &pb.Event{Event: &pb.Event_Queued{Queued: &pb.Queued{CommandId: e.CommandID, Ahead: uint32(e.Ahead)}}}
	case shell.EventStarted:
		return &pb.Event{Event: &pb.Event_Started{Started: &pb.Started{CommandId: e.CommandID, Seq: e.Seq, Time: timestamppb.New(e.Time)}}}
	case shell.EventOutput:
		o := &pb.Output{}
		switch e.Stream {
		case process.Stdout:
			o.Data = &pb.Output_Stdout{Stdout: e.Data}
		case process.Stderr:
			o.Data = &pb.Output_Stderr{Stderr: e.Data}
		default:
			o.Data = &pb.Output_Pty{Pty: e.Data}
		}
		return &pb.Event{Event: &pb.Event_Output{Output: o}}
	}
	end := &pb.End{
		CommandId: e.CommandID,
		Reason:    endReasons[e.End.Reason],
		ExitCode:  int32(e.End.ExitCode),
		Signal:    uint32(max(e.End.Signal, 0)),
		Message:   e.End.Message,
		LostBytes: uint64(max(e.Lost, 0)),
		Duration:  durationpb.New(e.End.Duration),
	}
	return &pb.Event{Event: &pb.Event_End{End: end}}
}

// SendInput writes to the stdin of the command running now.
func (s *Service) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	sess, err := s.session(ctx, req.Msg.GetSessionId())
	if err != nil {
		return nil, err
	}
	if err := sess.SendInput(ctx, req.Msg.GetCommandId(), req.Msg.GetData()); err != nil {
		return nil, s.toConnectErr(err)
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

// CloseInput closes the stdin of the command running now.
func (s *Service) CloseInput(ctx context.Context, req *connect.Request[pb.CloseInputRequest]) (*connect.Response[pb.CloseInputResponse], error) {
	sess, err := s.session(ctx, req.Msg.GetSessionId())
	if err != nil {
		return nil, err
	}
	if err := sess.CloseInput(ctx, req.Msg.GetCommandId()); err != nil {
		return nil, s.toConnectErr(err)
	}
	return connect.NewResponse(&pb.CloseInputResponse{}), nil
}

// Interrupt interrupts the command running now, or the one named.
func (s *Service) Interrupt(ctx context.Context, req *connect.Request[pb.InterruptRequest]) (*connect.Response[pb.InterruptResponse], error) {
	sess, err := s.session(ctx, req.Msg.GetSessionId())
	if err != nil {
		return nil, err
	}
	ok, err := sess.Interrupt(req.Msg.GetCommandId())
	if err != nil {
		return nil, s.toConnectErr(err)
	}
	return connect.NewResponse(&pb.InterruptResponse{Interrupted: ok}), nil
}

// State reports a session's shell.
func (s *Service) State(ctx context.Context, req *connect.Request[pb.StateRequest]) (*connect.Response[pb.StateResponse], error) {
	sess, err := s.session(ctx, req.Msg.GetSessionId())
	if err != nil {
		return nil, err
	}
	st, err := sess.State()
	if err != nil {
		return nil, s.toConnectErr(err)
	}
	out := &pb.StateResponse{Session: sessionProto(st.Info), Cwd: st.Cwd, Env: st.Env, Queued: uint32(st.Queued), LastExitCode: int32(st.LastExitCode)}
	if c := st.Running; c != nil {
		out.Running = &pb.Command{CommandId: c.ID, Seq: c.Seq, Command: c.Text, Started: timestamppb.New(c.Started)}
	}
	return connect.NewResponse(out), nil
}

// List lists the sessions the caller may see.
func (s *Service) List(ctx context.Context, req *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	as, err := s.requester(ctx)
	if err != nil {
		return nil, err
	}
	out := &pb.ListResponse{}
	for _, sess := range s.m.List(as) {
		out.Sessions = append(out.Sessions, sessionProto(sess.Info()))
	}
	return connect.NewResponse(out), nil
}

// Close ends a session.
func (s *Service) Close(ctx context.Context, req *connect.Request[pb.CloseRequest]) (*connect.Response[pb.CloseResponse], error) {
	as, err := s.requester(ctx)
	if err != nil {
		return nil, err
	}
	if req.Msg.GetSessionId() == "" {
		return nil, s.toConnectErr(invalid("session_id is missing: give the id Create returned"))
	}
	if err := s.m.Close(req.Msg.GetSessionId(), as); err != nil {
		return nil, s.toConnectErr(err)
	}
	return connect.NewResponse(&pb.CloseResponse{}), nil
}

func sessionProto(i shell.Info) *pb.Session {
	return &pb.Session{Id: i.ID, Tag: i.Tag, User: i.User, Pid: i.Pid, Pty: i.PTY, Created: timestamppb.New(i.Created), Commands: i.Commands, Busy: i.Busy}
}
