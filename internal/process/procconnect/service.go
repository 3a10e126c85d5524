// Package procconnect is the process.Process Connect service over a
// process.Manager: the only place where the wire (wire-compatible with
// E2B's envd) meets the domain, and where domain errors become Connect
// codes (toConnectErr). It uses only the package process's exported API.
//
// It is named procconnect, not processconnect, so that it never collides
// with the generated gen/process/processconnect it serves.
package procconnect

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/gen/process/processconnect"
	"github.com/envd-dev/envd/internal/auth"
	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/errkind"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/outbuf"
	"github.com/envd-dev/envd/internal/process"
	"github.com/envd-dev/envd/internal/rpcerr"
	"github.com/envd-dev/envd/internal/server"
	"github.com/envd-dev/envd/internal/streamloop"
)

// Service is the process.Process Connect service: the only place that knows
// both the wire and the domain.
type Service struct {
	m        *process.Manager
	defaults *defaults.Defaults
}

var _ processconnect.ProcessHandler = (*Service)(nil)

// NewService adapts m to the wire.
func NewService(m *process.Manager, d *defaults.Defaults) *Service {
	return &Service{m: m, defaults: d}
}

// Handler returns the service's route pattern and handler.
func (s *Service) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return processconnect.NewProcessHandler(s, opts...)
}

// toConnectErr maps errors to Connect codes, in this one place (kinds): a
// domain error (the adapter's own refusals included) by its kind, with its
// message as is; a reader that fell behind its process's output as data
// loss; a context's end as such; anything else is internal.
func toConnectErr(err error) error {
	return kinds.Error(err)
}

var kinds = rpcerr.Kinds{
	{Err: process.ErrNotFound, Code: connect.CodeNotFound},
	{Err: process.ErrInvalid, Code: connect.CodeInvalidArgument},
	{Err: process.ErrWrongState, Code: connect.CodeFailedPrecondition},
	{Err: process.ErrUnauthorized, Code: connect.CodeUnauthenticated},
	{Err: process.ErrPermission, Code: connect.CodePermissionDenied},
	{Err: process.ErrUnavailable, Code: connect.CodeUnavailable},
	{Err: process.ErrExhausted, Code: connect.CodeResourceExhausted},
	{Err: outbuf.ErrLost, Code: connect.CodeDataLoss},
}

// invalid is a request the adapter refuses before the domain sees it, as
// a domain error of kind process.ErrInvalid; a %w in format becomes its
// cause.
func invalid(format string, args ...any) error {
	return errkind.Errorf(process.ErrInvalid, format, args...)
}

// errNoUser refuses a request that names no user where one is needed.
var errNoUser = &process.Error{Kind: process.ErrUnauthorized, Msg: "no user specified"}

// requester is the user a request acts as, who finds only the processes
// the Manager lets it find (process.Selector.As). In strict mode a request
// must name one; in default mode none (nil) finds every process, as before.
func (s *Service) requester(ctx context.Context) (*identity.User, error) {
	u := auth.UserFrom(ctx)
	if u == nil && s.m.StrictUsers() {
		return nil, toConnectErr(errNoUser)
	}
	return u, nil
}

// selector is the process a request names, as its requester finds it.
func (s *Service) selector(ctx context.Context, sel *pb.ProcessSelector) (process.Selector, error) {
	u, err := s.requester(ctx)
	if err != nil {
		return process.Selector{}, err
	}
	switch v := sel.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		return process.Selector{Pid: v.Pid, As: u}, nil
	case *pb.ProcessSelector_Tag:
		return process.Selector{Tag: &v.Tag, As: u}, nil
	default:
		return process.Selector{}, toConnectErr(invalid("process selector is missing: give a pid or a tag"))
	}
}

// get finds the live process a request names.
func (s *Service) get(ctx context.Context, sel *pb.ProcessSelector) (*process.Process, error) {
	k, err := s.selector(ctx, sel)
	if err != nil {
		return nil, err
	}
	p, err := s.m.Get(k)
	return p, toConnectErr(err)
}

// Start spawns the process, then streams its events.
func (s *Service) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	u := auth.UserFrom(ctx)
	if u == nil {
		return toConnectErr(errNoUser)
	}
	msg := req.Msg
	cfg := msg.GetProcess()
	if cfg == nil {
		return toConnectErr(invalid("process is missing: give at least process.cmd"))
	}
	dir, err := u.Resolve(cfg.GetCwd(), s.defaults.Workdir())
	if err != nil {
		return toConnectErr(invalid("%w", err))
	}
	o := process.StartOptions{
		Config: process.Config{Cmd: cfg.GetCmd(), Args: cfg.GetArgs(), Envs: cfg.GetEnvs(), Cwd: cfg.Cwd},
		Tag:    msg.Tag,
		User:   u,
		Dir:    dir,
		Stdin:  msg.Stdin == nil || *msg.Stdin,
	}
	if msg.Pty != nil {
		sz := msg.Pty.GetSize()
		if sz.GetCols() > 0xffff || sz.GetRows() > 0xffff {
			return toConnectErr(invalid("terminal size %dx%d is too large", sz.GetCols(), sz.GetRows()))
		}
		o.PTY = &process.Size{Cols: uint16(sz.GetCols()), Rows: uint16(sz.GetRows())}
		o.Stdin = false
	}
	// Connect-Timeout-Ms is the process's lifetime, as upstream: the SDK's
	// timeoutMs relies on it. The process outlives this request otherwise.
	if dl, ok := ctx.Deadline(); ok {
		o.Timeout = max(time.Until(dl), time.Millisecond)
	}
	// The stream's reader is the process's from its first byte: one taken
	// after the start could miss the head of a fast program's output.
	p, rd, err := s.m.StartFollowed(o)
	if err != nil {
		return toConnectErr(err)
	}
	err = s.streamEvents(ctx, p, rd, server.KeepaliveInterval(req.Header()), func(e *pb.ProcessEvent) error {
		return stream.Send(&pb.StartResponse{Event: e})
	})
	if dl, ok := ctx.Deadline(); ok && err == nil && !time.Now().Before(dl) {
		// The lifetime is the request's deadline, and both run out at
		// once: whether the kill's end or the deadline reached the loop
		// first, the stream ends as one whose deadline passed (the SDKs'
		// TimeoutError).
		if ex, ok := p.Exit(); ok && ex.Reason == process.EndTimedOut {
			return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("process %d was killed: its lifetime, the request's deadline, ran out", p.Pid()))
		}
	}
	return err
}

// Connect attaches to a live or recently ended process: it replays the
// output still retained, then follows live output, then sends the end.
func (s *Service) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	k, err := s.selector(ctx, req.Msg.GetProcess())
	if err != nil {
		return err
	}
	p, err := s.m.Find(k)
	if err != nil {
		return toConnectErr(err)
	}
	return s.streamEvents(ctx, p, p.Follow(), server.KeepaliveInterval(req.Header()), func(e *pb.ProcessEvent) error {
		return stream.Send(&pb.ConnectResponse{Event: e})
	})
}

// streamEvents sends start, then every output record rd reads, keepalives
// while the process is quiet, and the end once its output is exhausted. It
// owns send (only this goroutine writes to the stream) and closes rd.
func (s *Service) streamEvents(ctx context.Context, p *process.Process, rd *process.Reader, keepalive time.Duration, send func(*pb.ProcessEvent) error) error {
	defer rd.Close()
	if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: p.Pid()}}}); err != nil {
		return err
	}
	eof := false       // every byte was sent; the log closes just before the exit is published
	var scratch []byte // coalesce's buffer, reused: Send has marshalled a message when it returns
	return streamloop.Loop{
		Clock:     s.m.Clock(),
		Keepalive: keepalive,
		Ready: func() <-chan struct{} {
			if eof {
				return p.Done()
			}
			return rd.Wait()
		},
		Pump: func() (bool, error) {
			if eof {
				return false, sendEnd(ctx, p, send)
			}
			recs, err := rd.Read()
			if lost, ok := errors.AsType[*outbuf.LostError](err); ok {
				return false, toConnectErr(fmt.Errorf("process %d: this reader fell behind: %w; its output goes on: reconnect to follow it", p.Pid(), lost))
			}
			if err != nil { // io.EOF
				eof = true
				return false, sendEnd(ctx, p, send)
			}
			recs, scratch = coalesce(recs, scratch)
			for _, r := range recs {
				if err := send(dataEvent(r)); err != nil {
					return false, err
				}
			}
			return len(recs) > 0, nil
		},
		SendKeepalive: func() error {
			return send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}})
		},
	}.Run(ctx)
}

// coalesce joins each run of records of one kind in recs into one record,
// so that a reader that fell a few records behind sends one message rather
// than one per record: a program printing in bulk is read in pipe-sized
// chunks, and each message costs a flush and a frame on both sides. The
// joined bytes are copied into scratch, which is grown as needed and
// returned for the next call; records not joined are returned as they are.
// The records returned are valid until the next call with the same scratch.
func coalesce(recs []outbuf.Record, scratch []byte) ([]outbuf.Record, []byte) {
	need := 0 // the bytes of the records in runs of two or more
	for i, r := range recs {
		if i > 0 && r.Kind == recs[i-1].Kind || i+1 < len(recs) && r.Kind == recs[i+1].Kind {
			need += len(r.Data)
		}
	}
	if need == 0 {
		return recs, scratch
	}
	if cap(scratch) < need {
		scratch = make([]byte, 0, need)
	}
	buf := scratch[:0]
	out := make([]outbuf.Record, 0, len(recs))
	for i := 0; i < len(recs); {
		j := i + 1
		for j < len(recs) && recs[j].Kind == recs[i].Kind {
			j++
		}
		if j == i+1 {
			out = append(out, recs[i])
			i = j
			continue
		}
		from := len(buf)
		for _, r := range recs[i:j] {
			buf = append(buf, r.Data...)
		}
		out = append(out, outbuf.Record{Off: recs[i].Off, Kind: recs[i].Kind, Data: buf[from:len(buf):len(buf)]})
		i = j
	}
	return out, scratch
}

// endReason is r on the wire.
func endReason(r process.EndReason) pb.ProcessEvent_EndReason {
	switch r {
	case process.EndExited:
		return pb.ProcessEvent_END_REASON_EXITED
	case process.EndSignaled:
		return pb.ProcessEvent_END_REASON_SIGNALED
	case process.EndTimedOut:
		return pb.ProcessEvent_END_REASON_TIMED_OUT
	case process.EndClientSignal:
		return pb.ProcessEvent_END_REASON_CLIENT_SIGNAL
	case process.EndShutdown:
		return pb.ProcessEvent_END_REASON_SHUTDOWN
	case process.EndOOMKilled:
		return pb.ProcessEvent_END_REASON_OOM_KILLED
	}
	return pb.ProcessEvent_END_REASON_UNSPECIFIED
}

// sendEnd sends the process's end once it is published, and returns
// streamloop.Done; before, it returns nil (the loop waits for p.Done). The
// end always has its reason and usage: an older Python SDK, which refuses
// fields it does not know, gets them stripped by internal/legacysdk.
func sendEnd(ctx context.Context, p *process.Process, send func(*pb.ProcessEvent) error) error {
	ex, ok := p.Exit()
	if !ok {
		return nil
	}
	server.LastSend(ctx)
	end := &pb.ProcessEvent_EndEvent{ExitCode: int32(ex.Code), Exited: ex.Exited, Status: ex.Status}
	if ex.Code != 0 || !ex.Exited {
		end.Error = &ex.Status
	}
	end.Reason = endReason(ex.Reason)
	if u := ex.Usage; u != nil {
		end.Usage = &pb.ProcessEvent_ResourceUsage{
			UserCpuUs:       uint64(u.UserCPU.Microseconds()),
			SystemCpuUs:     uint64(u.SystemCPU.Microseconds()),
			MaxRssBytes:     uint64(max(u.MaxRSS, 0)),
			MemoryPeakBytes: uint64(max(u.MemoryPeak, 0)),
		}
	}
	if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}}); err != nil {
		return err
	}
	return streamloop.Done
}

func dataEvent(r outbuf.Record) *pb.ProcessEvent {
	d := &pb.ProcessEvent_DataEvent{}
	switch r.Kind {
	case process.Stdout:
		d.Output = &pb.ProcessEvent_DataEvent_Stdout{Stdout: r.Data}
	case process.Stderr:
		d.Output = &pb.ProcessEvent_DataEvent_Stderr{Stderr: r.Data}
	default:
		d.Output = &pb.ProcessEvent_DataEvent_Pty{Pty: r.Data}
	}
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: d}}
}

// List returns the live processes the requester may find.
func (s *Service) List(ctx context.Context, req *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	u, err := s.requester(ctx)
	if err != nil {
		return nil, err
	}
	ps := s.m.ListAs(u)
	out := &pb.ListResponse{Processes: make([]*pb.ProcessInfo, 0, len(ps))}
	for _, p := range ps {
		c := p.Config()
		out.Processes = append(out.Processes, &pb.ProcessInfo{
			Config: &pb.ProcessConfig{Cmd: c.Cmd, Args: c.Args, Envs: c.Envs, Cwd: c.Cwd},
			Pid:    p.Pid(),
			Tag:    p.Tag(),
		})
	}
	return connect.NewResponse(out), nil
}

// SendInput writes one chunk to stdin or the terminal.
func (s *Service) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	p, err := s.get(ctx, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := writeInput(ctx, p, req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

func writeInput(ctx context.Context, p *process.Process, in *pb.ProcessInput) error {
	switch v := in.GetInput().(type) {
	case *pb.ProcessInput_Stdin:
		return toConnectErr(p.WriteStdin(ctx, v.Stdin))
	case *pb.ProcessInput_Pty:
		return toConnectErr(p.WritePTY(ctx, v.Pty))
	default:
		return toConnectErr(invalid("input is missing: give input.stdin or input.pty"))
	}
}

// StreamInput writes each data message of the stream to the process the
// first message picked.
func (s *Service) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	var p *process.Process
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			var err error
			if p, err = s.get(ctx, ev.Start.GetProcess()); err != nil {
				return nil, err
			}
		case *pb.StreamInputRequest_Data:
			if p == nil {
				return nil, toConnectErr(invalid("the first message must be start, naming the process"))
			}
			if err := writeInput(ctx, p, ev.Data.GetInput()); err != nil {
				return nil, err
			}
		case *pb.StreamInputRequest_Keepalive:
		default:
			return nil, toConnectErr(invalid("empty message: give start, data or keepalive"))
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

// SendSignal signals the process's pid.
func (s *Service) SendSignal(ctx context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	// The enum's values are Linux's signal numbers.
	v := req.Msg.GetSignal()
	if _, known := pb.Signal_name[int32(v)]; !known || v == pb.Signal_SIGNAL_UNSPECIFIED {
		return nil, toConnectErr(invalid("invalid signal: %s: send one of %s", v, signalList()))
	}
	sig := syscall.Signal(v)
	p, err := s.get(ctx, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.Signal(sig); err != nil {
		return nil, toConnectErr(err)
	}
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

// CloseStdin closes the stdin pipe.
func (s *Service) CloseStdin(ctx context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	p, err := s.get(ctx, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.CloseStdin(); err != nil {
		return nil, toConnectErr(err)
	}
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}

// Update resizes the terminal; without a pty it changes nothing.
func (s *Service) Update(ctx context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	p, err := s.get(ctx, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if pt := req.Msg.Pty; pt != nil {
		sz := pt.GetSize()
		if sz.GetCols() > 0xffff || sz.GetRows() > 0xffff {
			return nil, toConnectErr(invalid("terminal size %dx%d is too large", sz.GetCols(), sz.GetRows()))
		}
		if err := p.Resize(process.Size{Cols: uint16(sz.GetCols()), Rows: uint16(sz.GetRows())}); err != nil {
			return nil, toConnectErr(err)
		}
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}

// signalList names the signals SendSignal takes, by number.
func signalList() string {
	var names []string
	for n := int32(1); n < 64; n++ {
		if name, ok := pb.Signal_name[n]; ok {
			names = append(names, name)
		}
	}
	return strings.Join(names, ", ")
}
