package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"connectrpc.com/connect"

	"github.com/envd-dev/envd/internal/auth"
	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/legacysdk"
)

// UserInterceptor resolves the run-as user of every procedure, unary or
// streaming: the username of an "Authorization: Basic" header, else the
// default user. An unknown name fails the call with unauthenticated, as
// upstream, before the handler runs.
func UserInterceptor(d *defaults.Defaults) connect.Interceptor {
	return &userInterceptor{d: d}
}

type userInterceptor struct{ d *defaults.Defaults }

func (i *userInterceptor) resolve(ctx context.Context, authorization string) (context.Context, error) {
	if name, ok := auth.BasicUser(authorization); ok {
		u, err := identity.Lookup(name)
		if err != nil {
			if errors.Is(err, identity.ErrUnknownUser) {
				return nil, connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("invalid username: '%s'", name))
			}
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		return auth.WithUser(ctx, u), nil
	}
	u, err := i.d.User()
	if err != nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("no user specified, and the default user '%s' cannot be used: %w", i.d.UserName(), err))
	}
	return auth.WithUser(ctx, u), nil
}

func (i *userInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		ctx, err := i.resolve(ctx, req.Header().Get("Authorization"))
		if err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (i *userInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i *userInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, err := i.resolve(ctx, conn.RequestHeader().Get("Authorization"))
		if err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// MaxMessageBytes bounds every message a client sends to a Connect
// procedure of envd: the one message of a unary call, and each message of a
// stream (StreamInput's chunks), compressed or not. A larger one fails the
// call with resource_exhausted after at most this much was buffered; the rest
// of a unary body is not even read (New caps it), that of a stream's message
// is read and dropped, never kept.
//
// The largest messages a client has reason to send are process input
// (SendInput, StreamInput), a process's command line and environment
// (execve takes 2 MiB of them at most with the usual 8 MiB stack limit) and
// the code of an execution. 6 MiB lets 4 MiB of input go in one message
// whatever the codec (bytes are base64 in JSON: 5.4 MiB), holds the others
// with margin, and costs no more buffer than 4 MiB would (Connect's buffer
// grows by doubling to 8 MiB either way); a client cannot make envd hold
// more than that per call. Larger input goes in several messages.
const MaxMessageBytes = 6 << 20

// HandlerOptions are the options every Connect service of envd is built
// with: panics are recovered and logged, the run-as user is resolved,
// messages are bounded by MaxMessageBytes, and older Python SDKs get the
// answers of process.Process and filesystem.Filesystem as they know them
// (legacysdk; the other services pass through it).
func HandlerOptions(logger *slog.Logger, d *defaults.Defaults) []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithReadMaxBytes(MaxMessageBytes),
		connect.WithInterceptors(streamErrorLog(logger), UserInterceptor(d), legacysdk.Interceptor()),
		connect.WithRecover(func(ctx context.Context, spec connect.Spec, _ http.Header, v any) error {
			logger.Error("procedure panicked", "procedure", spec.Procedure, "panic", fmt.Sprint(v))
			return connect.NewError(connect.CodeInternal, errors.New("internal error"))
		}),
	}
}

// streamErrorLog logs, at info, the error a streaming procedure ended
// with: its HTTP status was 200, so the request log cannot tell. Unary
// errors are in the request log already (logRequests).
func streamErrorLog(logger *slog.Logger) connect.Interceptor {
	return streamInterceptor(func(ctx context.Context, conn connect.StreamingHandlerConn, next connect.StreamingHandlerFunc) error {
		err := next(ctx, conn)
		if err != nil && ctx.Err() == nil {
			logger.Info("stream ended with an error", "procedure", conn.Spec().Procedure,
				"code", connect.CodeOf(err).String(), "reason", errorMessage(err))
		}
		return err
	})
}

// errorMessage is err's message without connect's code prefix.
func errorMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

// streamInterceptor is a connect.Interceptor that wraps streaming handlers
// only.
type streamInterceptor func(ctx context.Context, conn connect.StreamingHandlerConn, next connect.StreamingHandlerFunc) error

func (f streamInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }

func (f streamInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (f streamInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error { return f(ctx, conn, next) }
}
