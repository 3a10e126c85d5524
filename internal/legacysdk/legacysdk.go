// Package legacysdk serves E2B's older Python SDK releases the messages they
// know. Those clients speak Connect JSON with the User-Agent connect-python
// (possibly followed by a version) and refuse a response that carries a field
// they do not know, so every field envd added to a response of
// process.Process or filesystem.Filesystem (an entry's size and mode, a
// process end's reason, a watch event's entry, ...) would break them.
//
// Interceptor converts, for such a client and those two services only, every
// response message (a unary answer, a client stream's answer, each message of
// a server stream) into its frozen copy in gen/envd/legacy, which has only
// the fields the old clients know, and marks the answer with the header
// X-E2B-Legacy-SDK: true. Errors pass through unchanged. Every other client,
// and every other service, costs one header lookup.
package legacysdk

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/emptypb"

	legacyfs "github.com/envd-dev/envd/gen/envd/legacy/filesystem/v1"
	legacyproc "github.com/envd-dev/envd/gen/envd/legacy/process/v1"
	fspb "github.com/envd-dev/envd/gen/filesystem"
	"github.com/envd-dev/envd/gen/filesystem/filesystemconnect"
	procpb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/gen/process/processconnect"
)

// Header marks an answer whose messages were converted: "true".
const Header = "X-E2B-Legacy-SDK"

// userAgent is the prefix, in any case, of the older SDKs' User-Agent.
const userAgent = "connect-python"

// IsLegacy tells whether a User-Agent is that of an older Python SDK.
func IsLegacy(ua string) bool {
	return len(ua) >= len(userAgent) && strings.EqualFold(ua[:len(userAgent)], userAgent)
}

// converted reports whether procedure belongs to a service whose answers
// are converted.
func converted(procedure string) bool {
	return strings.HasPrefix(procedure, "/"+processconnect.ProcessName+"/") ||
		strings.HasPrefix(procedure, "/"+filesystemconnect.FilesystemName+"/")
}

// Interceptor returns the interceptor that converts the answers of the two
// upstream services for older Python SDKs. It may be installed on every
// service: the others pass through.
func Interceptor() connect.Interceptor { return interceptor{} }

type interceptor struct{}

func (interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if !IsLegacy(req.Header().Get("User-Agent")) || !converted(req.Spec().Procedure) {
			return next(ctx, req)
		}
		res, err := next(ctx, req)
		if err != nil {
			return res, err
		}
		out, err := Response(res)
		if err != nil {
			return nil, err
		}
		out.Header().Set(Header, "true")
		return out, nil
	}
}

func (interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if !IsLegacy(conn.RequestHeader().Get("User-Agent")) || !converted(conn.Spec().Procedure) {
			return next(ctx, conn)
		}
		// Set before the handler runs: a stream's header leaves with its
		// first message.
		conn.ResponseHeader().Set(Header, "true")
		return next(ctx, &convertingConn{StreamingHandlerConn: conn})
	}
}

// convertingConn converts each message sent on a stream. Everything else
// is the wrapped conn's, and the handler's context is untouched, so what a
// handler tells the server through it (server.LastSend) still applies.
type convertingConn struct {
	connect.StreamingHandlerConn
}

func (c *convertingConn) Send(msg any) error {
	m, ok := msg.(proto.Message)
	if !ok {
		return c.StreamingHandlerConn.Send(msg)
	}
	out, err := Message(m)
	if err != nil {
		return err
	}
	return c.StreamingHandlerConn.Send(out)
}

// Message returns m as the older SDKs know it: a new message of m's frozen
// type holding only the fields that type has. An enum value the frozen enum
// lacks is kept as its number. A message that has no frozen type becomes an
// empty message (google.protobuf.Empty, "{}" in JSON): only
// process.CloseStdinResponse today, which is empty anyway, so that a field
// added to such a message later never reaches an old client.
func Message(m proto.Message) (proto.Message, error) {
	return converterOf(m).message(m)
}

// Response is res with its message converted by Message, and with its
// header and trailer.
func Response(res connect.AnyResponse) (connect.AnyResponse, error) {
	m, ok := res.Any().(proto.Message)
	if !ok {
		return res, nil
	}
	return converterOf(m).response(m, res.Header(), res.Trailer())
}

func converterOf(m proto.Message) converter {
	if c, ok := frozen[m.ProtoReflect().Descriptor().FullName()]; ok {
		return c
	}
	return empty
}

// frozen maps each response message of the two services, by full name, to
// the converter into its frozen copy.
var frozen = map[protoreflect.FullName]converter{
	name(&fspb.StatResponse{}):             to[legacyfs.StatResponse](),
	name(&fspb.MakeDirResponse{}):          to[legacyfs.MakeDirResponse](),
	name(&fspb.MoveResponse{}):             to[legacyfs.MoveResponse](),
	name(&fspb.ListDirResponse{}):          to[legacyfs.ListDirResponse](),
	name(&fspb.RemoveResponse{}):           to[legacyfs.RemoveResponse](),
	name(&fspb.WatchDirResponse{}):         to[legacyfs.WatchDirResponse](),
	name(&fspb.CreateWatcherResponse{}):    to[legacyfs.CreateWatcherResponse](),
	name(&fspb.GetWatcherEventsResponse{}): to[legacyfs.GetWatcherEventsResponse](),
	name(&fspb.RemoveWatcherResponse{}):    to[legacyfs.RemoveWatcherResponse](),

	name(&procpb.ListResponse{}):        to[legacyproc.ListResponse](),
	name(&procpb.StartResponse{}):       to[legacyproc.StartResponse](),
	name(&procpb.ConnectResponse{}):     to[legacyproc.ConnectResponse](),
	name(&procpb.UpdateResponse{}):      to[legacyproc.UpdateResponse](),
	name(&procpb.SendInputResponse{}):   to[legacyproc.SendInputResponse](),
	name(&procpb.StreamInputResponse{}): to[legacyproc.StreamInputResponse](),
	name(&procpb.SendSignalResponse{}):  to[legacyproc.SendSignalResponse](),
}

// empty converts any message into an empty one.
var empty = to[emptypb.Empty]()

func name(m proto.Message) protoreflect.FullName { return m.ProtoReflect().Descriptor().FullName() }

// converter makes a message of one frozen type, bare or in a response.
type converter struct {
	message  func(proto.Message) (proto.Message, error)
	response func(m proto.Message, header, trailer http.Header) (connect.AnyResponse, error)
}

// to is the converter into the frozen type T. Every field of T has the
// name, number and type of a field of the message it converts
// (frozen_internal_test.go checks it), so our message's binary encoding,
// read as a T with the unknown fields dropped, is exactly what T can say of
// it.
func to[T any, PT interface {
	*T
	proto.Message
}]() converter {
	convert := func(m proto.Message) (*T, error) {
		b, err := proto.Marshal(m)
		if err == nil {
			out := PT(new(T))
			if err = (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, out); err == nil {
				return out, nil
			}
		}
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("convert %s for an older sdk: %w", name(m), err))
	}
	return converter{
		message: func(m proto.Message) (proto.Message, error) {
			out, err := convert(m)
			if err != nil {
				return nil, err
			}
			return PT(out), nil
		},
		response: func(m proto.Message, header, trailer http.Header) (connect.AnyResponse, error) {
			out, err := convert(m)
			if err != nil {
				return nil, err
			}
			res := connect.NewResponse(out)
			copyHeader(res.Header(), header)
			copyHeader(res.Trailer(), trailer)
			return res, nil
		},
	}
}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append(dst[k], vs...)
	}
}
