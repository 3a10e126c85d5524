// Package fsconnect is the filesystem.Filesystem Connect service over a
// filesystem.Files: it converts between the wire's messages and the
// domain's types, reads the run-as user the interceptor put in the
// request's context, and is the only place where the domain's errors become
// Connect codes (toConnectErr). It uses only package filesystem's exported
// API. /files, the HTTP side of the same domain, is internal/httpapi.
package fsconnect

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/envd-dev/envd/gen/filesystem"
	"github.com/envd-dev/envd/gen/filesystem/filesystemconnect"
	"github.com/envd-dev/envd/internal/auth"
	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/rpcerr"
	"github.com/envd-dev/envd/internal/server"
	"github.com/envd-dev/envd/internal/streamloop"
)

// Service is the filesystem.Filesystem Connect service: the only place that
// knows both the wire and the domain.
type Service struct {
	f        *filesystem.Files
	defaults *defaults.Defaults
}

var _ filesystemconnect.FilesystemHandler = (*Service)(nil)

// NewService adapts f to the wire. Empty paths resolve to d's working
// directory.
func NewService(f *filesystem.Files, d *defaults.Defaults) *Service {
	return &Service{f: f, defaults: d}
}

// Handler returns the service's route pattern and handler.
func (s *Service) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return filesystemconnect.NewFilesystemHandler(s, opts...)
}

// errNoUser is a request that reached the service without a run-as user.
var errNoUser = errors.New("no user specified")

// errKinds are the domain's kinds of error with their Connect codes, tried
// in order; a context's end and an error of no kind are mapped by rpcerr.
var errKinds = rpcerr.Kinds{
	{Err: errNoUser, Code: connect.CodeUnauthenticated},
	{Err: filesystem.ErrNotFound, Code: connect.CodeNotFound},
	{Err: filesystem.ErrExists, Code: connect.CodeAlreadyExists},
	{Err: filesystem.ErrInvalid, Code: connect.CodeInvalidArgument},
	{Err: identity.ErrBadPath, Code: connect.CodeInvalidArgument},
	{Err: filesystem.ErrPermission, Code: connect.CodePermissionDenied},
	{Err: filesystem.ErrLoop, Code: connect.CodeFailedPrecondition},
	{Err: filesystem.ErrNoSpace, Code: connect.CodeResourceExhausted},
	{Err: filesystem.ErrLimit, Code: connect.CodeResourceExhausted},
	{Err: filesystem.ErrLagging, Code: connect.CodeDataLoss},
	{Err: filesystem.ErrClosed, Code: connect.CodeUnavailable},
}

// toConnectErr maps domain errors to Connect codes, in this one place; the
// message is the error's own. nil stays nil.
func toConnectErr(err error) error {
	return errKinds.Error(err)
}

// user is the run-as user the interceptor put in ctx, and resolve turns a
// path it sent into an absolute one.
func (s *Service) user(ctx context.Context) (*identity.User, error) {
	u := auth.UserFrom(ctx)
	if u == nil {
		return nil, toConnectErr(errNoUser)
	}
	return u, nil
}

func (s *Service) resolve(ctx context.Context, p string) (*identity.User, string, error) {
	u, err := s.user(ctx)
	if err != nil {
		return nil, "", err
	}
	abs, err := u.Resolve(p, s.defaults.Workdir())
	if err != nil {
		return nil, "", toConnectErr(err) // identity.ErrBadPath: invalid argument
	}
	return u, abs, nil
}

// Stat describes one path.
func (s *Service) Stat(ctx context.Context, req *connect.Request[pb.StatRequest]) (*connect.Response[pb.StatResponse], error) {
	u, p, err := s.resolve(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	e, err := s.f.Stat(u, p)
	if err != nil {
		return nil, toConnectErr(err)
	}
	return connect.NewResponse(&pb.StatResponse{Entry: EntryInfo(e)}), nil
}

// MakeDir creates a directory and its parents.
func (s *Service) MakeDir(ctx context.Context, req *connect.Request[pb.MakeDirRequest]) (*connect.Response[pb.MakeDirResponse], error) {
	u, p, err := s.resolve(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	e, err := s.f.MakeDir(u, p)
	if err != nil {
		return nil, toConnectErr(err)
	}
	return connect.NewResponse(&pb.MakeDirResponse{Entry: EntryInfo(e)}), nil
}

// Move renames a path.
func (s *Service) Move(ctx context.Context, req *connect.Request[pb.MoveRequest]) (*connect.Response[pb.MoveResponse], error) {
	u, src, err := s.resolve(ctx, req.Msg.GetSource())
	if err != nil {
		return nil, err
	}
	_, dst, err := s.resolve(ctx, req.Msg.GetDestination())
	if err != nil {
		return nil, err
	}
	e, err := s.f.Move(u, src, dst)
	if err != nil {
		return nil, toConnectErr(err)
	}
	return connect.NewResponse(&pb.MoveResponse{Entry: EntryInfo(e)}), nil
}

// ListDir lists a directory.
func (s *Service) ListDir(ctx context.Context, req *connect.Request[pb.ListDirRequest]) (*connect.Response[pb.ListDirResponse], error) {
	u, p, err := s.resolve(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	es, err := s.f.ListDir(u, p, req.Msg.GetDepth())
	if err != nil {
		return nil, toConnectErr(err)
	}
	out := &pb.ListDirResponse{Entries: make([]*pb.EntryInfo, len(es))}
	for i, e := range es {
		out.Entries[i] = EntryInfo(e)
	}
	return connect.NewResponse(out), nil
}

// Remove deletes a path and everything below it.
func (s *Service) Remove(ctx context.Context, req *connect.Request[pb.RemoveRequest]) (*connect.Response[pb.RemoveResponse], error) {
	u, p, err := s.resolve(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if err := s.f.Remove(u, p); err != nil {
		return nil, toConnectErr(err)
	}
	return connect.NewResponse(&pb.RemoveResponse{}), nil
}

// WatchDir streams the changes below a directory: start once the watch is
// in place, then events, with keepalives while nothing happens. It ends when
// the client goes, at the request's deadline, or when the watch fails.
func (s *Service) WatchDir(ctx context.Context, req *connect.Request[pb.WatchDirRequest], stream *connect.ServerStream[pb.WatchDirResponse]) error {
	u, p, err := s.resolve(ctx, req.Msg.GetPath())
	if err != nil {
		return err
	}
	w, err := s.f.Watch(u, p, filesystem.WatchOptions{
		Recursive:          req.Msg.GetRecursive(),
		IncludeEntry:       req.Msg.GetIncludeEntry(),
		AllowNetworkMounts: req.Msg.GetAllowNetworkMounts(),
	})
	if err != nil {
		return toConnectErr(err)
	}
	defer w.Close()
	if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Start{Start: &pb.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	err = streamloop.Loop{
		Clock:     s.f.Clock(),
		Keepalive: server.KeepaliveInterval(req.Header()),
		Ready:     w.Ready,
		Pump: func() (bool, error) {
			evs, werr := w.Drain()
			for _, e := range evs {
				if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Filesystem{Filesystem: FilesystemEvent(e)}}); err != nil {
					return false, err
				}
			}
			if werr != nil {
				return false, toConnectErr(werr)
			}
			return len(evs) > 0, nil
		},
		SendKeepalive: func() error {
			return stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Keepalive{Keepalive: &pb.WatchDirResponse_KeepAlive{}}})
		},
	}.Run(ctx)
	if err != nil && errors.Is(err, ctx.Err()) {
		return toConnectErr(err) // the client left, or the deadline passed
	}
	return err
}

// CreateWatcher starts a polling watcher.
func (s *Service) CreateWatcher(ctx context.Context, req *connect.Request[pb.CreateWatcherRequest]) (*connect.Response[pb.CreateWatcherResponse], error) {
	u, p, err := s.resolve(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	id, err := s.f.CreateWatcher(u, p, filesystem.WatchOptions{
		Recursive:          req.Msg.GetRecursive(),
		IncludeEntry:       req.Msg.GetIncludeEntry(),
		AllowNetworkMounts: req.Msg.GetAllowNetworkMounts(),
	})
	if err != nil {
		return nil, toConnectErr(err)
	}
	return connect.NewResponse(&pb.CreateWatcherResponse{WatcherId: id}), nil
}

// GetWatcherEvents returns what a polling watcher collected.
func (s *Service) GetWatcherEvents(ctx context.Context, req *connect.Request[pb.GetWatcherEventsRequest]) (*connect.Response[pb.GetWatcherEventsResponse], error) {
	evs, err := s.f.GetWatcherEvents(req.Msg.GetWatcherId())
	if err != nil {
		return nil, toConnectErr(err)
	}
	out := &pb.GetWatcherEventsResponse{Events: make([]*pb.FilesystemEvent, len(evs))}
	for i, e := range evs {
		out.Events[i] = FilesystemEvent(e)
	}
	return connect.NewResponse(out), nil
}

// RemoveWatcher stops a polling watcher.
func (s *Service) RemoveWatcher(ctx context.Context, req *connect.Request[pb.RemoveWatcherRequest]) (*connect.Response[pb.RemoveWatcherResponse], error) {
	if err := s.f.RemoveWatcher(req.Msg.GetWatcherId()); err != nil {
		return nil, toConnectErr(err)
	}
	return connect.NewResponse(&pb.RemoveWatcherResponse{}), nil
}

// wireString is s as a proto string, which must be valid UTF-8 or the whole
// message fails to marshal. A Linux file name is any bytes but "/" and NUL,
// and any user can make one that is not UTF-8 (in /tmp, say): such a name is
// sent with each run of invalid bytes replaced by U+FFFD, as
// strings.ToValidUTF8 does. The entry is still listed and the watch goes on;
// only that one name is lossy, and may not address the file it names.
func wireString(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// EntryInfo is e on the wire. Names and paths are made valid UTF-8
// (wireString).
func EntryInfo(e filesystem.Entry) *pb.EntryInfo {
	out := &pb.EntryInfo{
		Name:        wireString(e.Name),
		Path:        wireString(e.Path),
		Size:        e.Size,
		Mode:        uint32(e.Perm),
		Permissions: e.Mode.String(),
		Owner:       wireString(e.Owner),
		Group:       wireString(e.Group),
		Metadata:    e.Metadata, // only valid UTF-8 is read (filesystem.Entry.Metadata)
	}
	if e.SymlinkTarget != nil {
		target := wireString(*e.SymlinkTarget)
		out.SymlinkTarget = &target
	}
	switch e.Type {
	case filesystem.TypeFile:
		out.Type = pb.FileType_FILE_TYPE_FILE
	case filesystem.TypeDir:
		out.Type = pb.FileType_FILE_TYPE_DIRECTORY
	}
	if !e.ModTime.IsZero() {
		out.ModifiedTime = timestamppb.New(e.ModTime)
	}
	return out
}

// FilesystemEvent is e on the wire; its name is made valid UTF-8
// (wireString).
func FilesystemEvent(e filesystem.Event) *pb.FilesystemEvent {
	out := &pb.FilesystemEvent{Name: wireString(e.Name)}
	switch e.Type {
	case filesystem.EventCreate:
		out.Type = pb.EventType_EVENT_TYPE_CREATE
	case filesystem.EventWrite:
		out.Type = pb.EventType_EVENT_TYPE_WRITE
	case filesystem.EventRemove:
		out.Type = pb.EventType_EVENT_TYPE_REMOVE
	case filesystem.EventRename:
		out.Type = pb.EventType_EVENT_TYPE_RENAME
	case filesystem.EventChmod:
		out.Type = pb.EventType_EVENT_TYPE_CHMOD
	}
	if e.Entry != nil {
		out.Entry = EntryInfo(*e.Entry)
	}
	return out
}
