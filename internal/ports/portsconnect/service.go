// Package portsconnect is the Connect service envd.ports.v1 over a
// ports.Monitor: the only place where the wire meets the domain, and where
// domain errors become Connect codes (toConnectErr).
package portsconnect

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"

	"connectrpc.com/connect"
	"github.com/coder/quartz"

	pb "github.com/envd-dev/envd/gen/envd/ports/v1"
	"github.com/envd-dev/envd/gen/envd/ports/v1/portsv1connect"
	"github.com/envd-dev/envd/internal/ports"
	"github.com/envd-dev/envd/internal/rpcerr"
	"github.com/envd-dev/envd/internal/server"
	"github.com/envd-dev/envd/internal/streamloop"
)

// Service is envd.ports.v1.PortService.
type Service struct {
	m     *ports.Monitor
	log   *slog.Logger
	clock quartz.Clock
}

var _ portsv1connect.PortServiceHandler = (*Service)(nil)

// Options configures New. Zero values are the defaults.
type Options struct {
	Logger *slog.Logger // zero: slog.Default()
	Clock  quartz.Clock // drives the keepalives; zero: the real clock
}

// New returns the service over m.
func New(m *ports.Monitor, opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = quartz.NewReal()
	}
	return &Service{m: m, log: opts.Logger, clock: opts.Clock}
}

// Handler returns the service's route pattern and handler.
func (s *Service) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return portsv1connect.NewPortServiceHandler(s, opts...)
}

// toConnectErr maps domain errors to Connect codes, in this one place.
func (s *Service) toConnectErr(err error) error {
	if err == nil {
		return nil
	}
	if _, known := errKinds.Code(err); !known {
		s.log.Warn("ports request failed", "error", err)
	}
	return errKinds.Error(err)
}

var errKinds = rpcerr.Kinds{
	{Err: ports.ErrInvalid, Code: connect.CodeInvalidArgument},
}

// filter converts the wire's filter, refusing what the domain's cannot
// hold.
func filter(f *pb.Filter) (ports.Filter, error) {
	var out ports.Filter
	for i, p := range f.GetPorts() {
		if p == 0 || p > math.MaxUint16 {
			return out, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("filter.ports[%d] is %d: a port is 1-65535", i, p))
		}
		out.Ports = append(out.Ports, uint16(p))
	}
	if f.GetPid() > math.MaxInt32 {
		return out, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("filter.pid %d is not a process id", f.GetPid()))
	}
	out.PID = int(f.GetPid())
	switch f.GetFamily() {
	case pb.Family_FAMILY_UNSPECIFIED:
	case pb.Family_FAMILY_IPV4:
		out.Family = ports.IPv4
	case pb.Family_FAMILY_IPV6:
		out.Family = ports.IPv6
	default:
		return out, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("filter.family %d is unknown: give FAMILY_IPV4, FAMILY_IPV6 or none", int32(f.GetFamily())))
	}
	out.ForwardedOnly = f.GetForwardedOnly()
	return out, nil
}

// List lists the listeners now.
func (s *Service) List(ctx context.Context, req *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	f, err := filter(req.Msg.GetFilter())
	if err != nil {
		return nil, err
	}
	ps, err := s.m.List(f)
	if err != nil {
		return nil, s.toConnectErr(err)
	}
	return connect.NewResponse(&pb.ListResponse{Ports: toProto(ps)}), nil
}

// Watch sends the listeners now, then their changes.
func (s *Service) Watch(ctx context.Context, req *connect.Request[pb.WatchRequest], stream *connect.ServerStream[pb.WatchResponse]) error {
	f, err := filter(req.Msg.GetFilter())
	if err != nil {
		return err
	}
	w, now, err := s.m.Watch(f)
	if err != nil {
		return s.toConnectErr(err)
	}
	defer w.Close()
	if err := stream.Send(&pb.WatchResponse{Event: &pb.WatchResponse_Snapshot{Snapshot: &pb.Snapshot{Ports: toProto(now)}}}); err != nil {
		return err
	}
	return streamloop.Loop{
		Clock:     s.clock,
		Keepalive: server.KeepaliveInterval(req.Header()),
		Ready:     w.Ready,
		Pump: func() (bool, error) {
			changes := w.Changes()
			for _, c := range changes {
				ev := &pb.PortChange{Kind: kinds[c.Kind], Port: portProto(c.Port)}
				if err := stream.Send(&pb.WatchResponse{Event: &pb.WatchResponse_Change{Change: ev}}); err != nil {
					return false, err
				}
			}
			return len(changes) > 0, nil
		},
		SendKeepalive: func() error {
			return stream.Send(&pb.WatchResponse{Event: &pb.WatchResponse_Keepalive{Keepalive: &pb.Keepalive{}}})
		},
	}.Run(ctx)
}

var kinds = map[ports.ChangeKind]pb.ChangeKind{
	ports.Opened:  pb.ChangeKind_CHANGE_KIND_OPENED,
	ports.Closed:  pb.ChangeKind_CHANGE_KIND_CLOSED,
	ports.Updated: pb.ChangeKind_CHANGE_KIND_UPDATED,
}

var privates = map[ports.Private]pb.Private{
	ports.NotPrivate:     pb.Private_PRIVATE_UNSPECIFIED,
	ports.PrivateEnvd:    pb.Private_PRIVATE_ENVD,
	ports.PrivateJupyter: pb.Private_PRIVATE_JUPYTER,
	ports.PrivateKernel:  pb.Private_PRIVATE_KERNEL,
}

func toProto(ps []ports.Port) []*pb.Port {
	out := make([]*pb.Port, len(ps))
	for i, p := range ps {
		out[i] = portProto(p)
	}
	return out
}

func portProto(p ports.Port) *pb.Port {
	out := &pb.Port{
		Pid:         uint32(p.PID),
		ProcessName: p.Process,
		Address:     p.Addr.String(),
		Port:        uint32(p.Port),
		Family:      pb.Family_FAMILY_IPV4,
		Loopback:    p.Loopback(),
		Envd:        p.Private != ports.NotPrivate,
		Forwarded:   p.Forwarded(),
		Private:     privates[p.Private],
	}
	if p.Family == ports.IPv6 {
		out.Family = pb.Family_FAMILY_IPV6
	}
	for _, from := range p.ForwardedFrom {
		out.ForwardedFrom = append(out.ForwardedFrom, from.String())
	}
	for _, fl := range p.Failures {
		out.ForwardFailures = append(out.ForwardFailures, &pb.ForwardFailure{From: fl.From.String(), Message: fl.Err})
	}
	return out
}
