package processtest

import (
	"context"
	"net/http"

	"connectrpc.com/connect"

	"github.com/envd-dev/envd/internal/auth"
	"github.com/envd-dev/envd/internal/identity"
)

// WithAccounts wraps envd's handler options so that a request naming one of
// accounts in its Basic auth runs as it. The outer interceptor takes such a
// request's Authorization header away (envd's user interceptor, in the
// middle, would refuse a name /etc/passwd does not know, and now resolves
// the default user instead), the inner one then puts the account in place of
// that user. Every other request goes through envd's resolution unchanged.
func WithAccounts(opts []connect.HandlerOption, accounts []*identity.User) []connect.HandlerOption {
	byName := map[string]*identity.User{}
	for _, u := range accounts {
		byName[u.Name] = u
	}
	outer := &accountInterceptor{take: func(ctx context.Context, h http.Header) context.Context {
		name, ok := auth.BasicUser(h.Get("Authorization"))
		u := byName[name]
		if !ok || u == nil {
			return ctx
		}
		h.Del("Authorization")
		return context.WithValue(ctx, accountKey{}, u)
	}}
	inner := &accountInterceptor{take: func(ctx context.Context, _ http.Header) context.Context {
		if u, ok := ctx.Value(accountKey{}).(*identity.User); ok {
			return auth.WithUser(ctx, u)
		}
		return ctx
	}}
	out := []connect.HandlerOption{connect.WithInterceptors(outer)}
	out = append(out, opts...)
	return append(out, connect.WithInterceptors(inner))
}

type accountKey struct{}

// accountInterceptor rewrites each call's context (and may edit its request
// header) before passing it on.
type accountInterceptor struct {
	take func(ctx context.Context, h http.Header) context.Context
}

func (i *accountInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		return next(i.take(ctx, req.Header()), req)
	}
}

func (i *accountInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i *accountInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(i.take(ctx, conn.RequestHeader()), conn)
	}
}
