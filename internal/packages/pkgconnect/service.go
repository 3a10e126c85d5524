// Package pkgconnect is the Connect service envd.packages.v1 over a
// packages.Installer: the only place where the wire meets the domain, and
// where domain errors become Connect codes (toConnectErr).
package pkgconnect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"connectrpc.com/connect"
	"github.com/coder/quartz"

	pb "github.com/envd-dev/envd/gen/envd/packages/v1"
	"github.com/envd-dev/envd/gen/envd/packages/v1/packagesv1connect"
	"github.com/envd-dev/envd/internal/auth"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/outbuf"
	"github.com/envd-dev/envd/internal/packages"
	"github.com/envd-dev/envd/internal/rpcerr"
	"github.com/envd-dev/envd/internal/server"
	"github.com/envd-dev/envd/internal/streamloop"
)

// Service is envd.packages.v1.PackageService. Every call acts as the
// request's user (Basic auth, else the default user: server.UserInterceptor).
type Service struct {
	in    *packages.Installer
	log   *slog.Logger
	clock quartz.Clock
}

var _ packagesv1connect.PackageServiceHandler = (*Service)(nil)

// Options configures New. Zero values are the defaults.
type Options struct {
	Logger *slog.Logger // zero: slog.Default()
	Clock  quartz.Clock // drives the keepalives; zero: the real clock
}

// New returns the service over in.
func New(in *packages.Installer, opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = quartz.NewReal()
	}
	return &Service{in: in, log: opts.Logger, clock: opts.Clock}
}

// Handler returns the service's route pattern and handler.
func (s *Service) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return packagesv1connect.NewPackageServiceHandler(s, opts...)
}

// toConnectErr maps domain errors to Connect codes, in this one place.
func (s *Service) toConnectErr(err error) error {
	if err == nil {
		return nil
	}
	if _, known := kinds.Code(err); !known {
		s.log.Warn("package request failed", "error", err)
	}
	return kinds.Error(err)
}

var kinds = rpcerr.Kinds{
	{Err: packages.ErrInvalid, Code: connect.CodeInvalidArgument},
	{Err: packages.ErrNotFound, Code: connect.CodeNotFound},
	{Err: packages.ErrPermission, Code: connect.CodePermissionDenied},
	{Err: packages.ErrFailed, Code: connect.CodeFailedPrecondition},
	{Err: packages.ErrUnavailable, Code: connect.CodeUnavailable},
}

var managers = map[pb.Manager]packages.Manager{
	pb.Manager_MANAGER_PIP: packages.PIP,
	pb.Manager_MANAGER_NPM: packages.NPM,
	pb.Manager_MANAGER_R:   packages.R,
	pb.Manager_MANAGER_APT: packages.APT,
}

// manager converts the wire's manager.
func manager(m pb.Manager) (packages.Manager, error) {
	if dm, ok := managers[m]; ok {
		return dm, nil
	}
	if m == pb.Manager_MANAGER_UNSPECIFIED {
		return "", connect.NewError(connect.CodeInvalidArgument, errors.New("manager is missing: give one of MANAGER_PIP, MANAGER_NPM, MANAGER_R, MANAGER_APT"))
	}
	return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("manager %d is unknown: give one of MANAGER_PIP, MANAGER_NPM, MANAGER_R, MANAGER_APT", int32(m)))
}

// user is the request's user.
func user(ctx context.Context) (*identity.User, error) {
	u := auth.UserFrom(ctx)
	if u == nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("no user specified"))
	}
	return u, nil
}

// List lists what a manager sees.
func (s *Service) List(ctx context.Context, req *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	m, err := manager(req.Msg.GetManager())
	if err != nil {
		return nil, err
	}
	u, err := user(ctx)
	if err != nil {
		return nil, err
	}
	l, err := s.in.List(ctx, packages.ListRequest{Manager: m, Dir: req.Msg.GetDir(), User: u})
	if err != nil {
		return nil, s.toConnectErr(err)
	}
	out := &pb.ListResponse{Target: l.Target, Packages: make([]*pb.Package, len(l.Packages))}
	for i, p := range l.Packages {
		out.Packages[i] = &pb.Package{Name: p.Name, Version: p.Version, Location: p.Location, System: p.System, Shadowed: p.Shadowed}
	}
	return connect.NewResponse(out), nil
}

// Install installs packages, streaming the installer's output.
func (s *Service) Install(ctx context.Context, req *connect.Request[pb.InstallRequest], stream *connect.ServerStream[pb.InstallResponse]) error {
	m, err := manager(req.Msg.GetManager())
	if err != nil {
		return err
	}
	u, err := user(ctx)
	if err != nil {
		return err
	}
	specs := make([]packages.Spec, len(req.Msg.GetPackages()))
	for i, p := range req.Msg.GetPackages() {
		specs[i] = packages.Spec{Name: p.GetName(), Version: p.GetVersion()}
	}
	op, err := s.in.Install(ctx, packages.InstallRequest{
		Manager: m, Packages: specs, Upgrade: req.Msg.GetUpgrade(),
		Source: req.Msg.GetSource(), Dir: req.Msg.GetDir(), User: u,
	})
	if err != nil {
		return s.toConnectErr(err)
	}
	return s.follow(ctx, req.Header(), op, func(ev *pb.PackageEvent) error {
		return stream.Send(&pb.InstallResponse{Event: ev})
	})
}

// Remove removes packages, streaming the installer's output.
func (s *Service) Remove(ctx context.Context, req *connect.Request[pb.RemoveRequest], stream *connect.ServerStream[pb.RemoveResponse]) error {
	m, err := manager(req.Msg.GetManager())
	if err != nil {
		return err
	}
	u, err := user(ctx)
	if err != nil {
		return err
	}
	op, err := s.in.Remove(ctx, packages.RemoveRequest{
		Manager: m, Names: req.Msg.GetNames(), Dir: req.Msg.GetDir(), Purge: req.Msg.GetPurge(), User: u,
	})
	if err != nil {
		return s.toConnectErr(err)
	}
	return s.follow(ctx, req.Header(), op, func(ev *pb.PackageEvent) error {
		return stream.Send(&pb.RemoveResponse{Event: ev})
	})
}

// follow sends op's output as it comes, then its done, or ends with its
// error. The operation runs on when the stream ends first.
func (s *Service) follow(ctx context.Context, h http.Header, op *packages.Op, send func(*pb.PackageEvent) error) error {
	log := op.Output()
	cur := log.Cursor(outbuf.Oldest)
	return streamloop.Loop{
		Clock:     s.clock,
		Keepalive: server.KeepaliveInterval(h),
		Ready:     func() <-chan struct{} { return cur.Wait() },
		Pump: func() (bool, error) {
			recs, err := cur.Read()
			if lost, ok := errors.AsType[*outbuf.LostError](err); ok {
				// Too slow a reader: say how much it missed, go on.
				cur = log.Cursor(outbuf.Oldest)
				return true, send(&pb.PackageEvent{Event: &pb.PackageEvent_OutputLost{OutputLost: &pb.OutputLost{Bytes: lost.Lost()}}})
			}
			for _, r := range recs {
				if err := send(event(r)); err != nil {
					return false, err
				}
			}
			if !errors.Is(err, io.EOF) {
				return len(recs) > 0, err
			}
			res, err := op.Result()
			if err != nil {
				return true, s.toConnectErr(err)
			}
			if err := send(&pb.PackageEvent{Event: &pb.PackageEvent_Done{Done: done(res)}}); err != nil {
				return true, err
			}
			return true, streamloop.Done
		},
		SendKeepalive: func() error {
			return send(&pb.PackageEvent{Event: &pb.PackageEvent_Keepalive{Keepalive: &pb.Keepalive{}}})
		},
	}.Run(ctx)
}

// event converts an output record.
func event(r outbuf.Record) *pb.PackageEvent {
	switch r.Kind {
	case packages.KindStdout:
		return &pb.PackageEvent{Event: &pb.PackageEvent_Stdout{Stdout: r.Data}}
	case packages.KindStderr:
		return &pb.PackageEvent{Event: &pb.PackageEvent_Stderr{Stderr: r.Data}}
	}
	var sc packages.StartedCommand
	json.Unmarshal(r.Data, &sc)
	return &pb.PackageEvent{Event: &pb.PackageEvent_Started{Started: &pb.Started{Command: sc.Command, User: sc.User}}}
}

func done(res *packages.Result) *pb.Done {
	d := &pb.Done{}
	for _, c := range res.Changes {
		d.Changes = append(d.Changes, &pb.Change{Name: c.Name, OldVersion: c.Old, NewVersion: c.New})
	}
	for _, st := range res.Stale {
		d.StaleContexts = append(d.StaleContexts, &pb.StaleContext{ContextId: st.ID, Modules: st.Modules, Message: st.Message})
	}
	return d
}
