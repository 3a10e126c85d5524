// Package server is envd's HTTP front: one handler, built from a route table,
// served on every listener (TCP, vsock, unix socket) with HTTP/1.1 and h2c.
//
// Every request passes, outer to inner: recover -> log -> CORS -> access
// token -> route. CORS comes before the token so browser preflights never need
// one; the run-as user is resolved per procedure by UserInterceptor, so that
// its errors reach Connect clients in Connect's own shape.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/envd-dev/envd/internal/auth"
)

// Route is one entry of the route table.
type Route struct {
	// Pattern is a net/http ServeMux pattern: "GET /health", or a prefix
	// such as "/process.Process/" for a whole Connect service.
	Pattern string
	Handler http.Handler
	// Public routes skip the access-token check. A public route that needs
	// protection checks for itself (signed /files URLs, /init).
	Public bool
}

// Options configures New.
type Options struct {
	Logger *slog.Logger
	Token  *auth.Token
	Routes []Route
}

// New builds the handler envd serves. It fails if a pattern is declared
// twice or is not one net/http accepts.
func New(o Options) (http.Handler, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Token == nil {
		o.Token = &auth.Token{}
	}
	mux := http.NewServeMux()
	public := map[string]bool{}
	seen := map[string]bool{}
	for _, r := range o.Routes {
		if seen[r.Pattern] {
			return nil, fmt.Errorf("route %q declared twice", r.Pattern)
		}
		seen[r.Pattern] = true
		h := r.Handler
		if isConnectService(r.Pattern) {
			h = capUnaryBody(h)
		}
		if err := register(mux, r.Pattern, h); err != nil {
			return nil, err
		}
		public[r.Pattern] = r.Public
	}
	var h http.Handler = mux
	h = requireToken(h, mux, public, o.Token)
	h = cors(h)
	h = logRequests(h, o.Logger)
	h = recoverPanics(h, o.Logger)
	return h, nil
}

// isConnectService tells whether pattern is that of a whole Connect
// service: "/package.Service/".
func isConnectService(pattern string) bool {
	name, ok := strings.CutPrefix(pattern, "/")
	name, ok2 := strings.CutSuffix(name, "/")
	return ok && ok2 && strings.Contains(name, ".") && !strings.ContainsAny(name, "/ {}")
}

// capUnaryBody bounds the body of a unary Connect call (Content-Type
// application/json or application/proto, possibly compressed) to one message
// of MaxMessageBytes, which Connect refuses anyway: past it, the handler
// answers resource_exhausted without reading the rest, and the connection is
// closed. Streams (application/connect+..., gRPC) carry many messages, each
// bounded by Connect itself.
func capUnaryBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		if r.Method == http.MethodPost && strings.HasPrefix(ct, "application/") &&
			!strings.HasPrefix(ct, "application/connect+") && !strings.HasPrefix(ct, "application/grpc") {
			// On a copy of the request, as http.MaxBytesHandler does: the
			// server must still see its own body, to learn that it was
			// left unread and close the connection rather than parse the
			// rest of it as the next request. One byte more than the
			// limit, so that Connect, which reads one past its limit,
			// reports the message as too large.
			capped := *r
			capped.Body = http.MaxBytesReader(w, r.Body, MaxMessageBytes+1)
			r = &capped
		}
		next.ServeHTTP(w, r)
	})
}

// register turns a ServeMux panic on a bad or clashing pattern into an error.
func register(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("route %q: %v", pattern, r)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

// Patterns lists the patterns of routes, sorted; for tests and docs.
func Patterns(routes []Route) []string {
	out := make([]string, 0, len(routes))
	for _, r := range routes {
		out = append(out, r.Pattern)
	}
	sort.Strings(out)
	return out
}

// WriteError writes the HTTP API's error body: {"code":<status>,"message":...}.
func WriteError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{status, msg})
}

// Messages of a request refused for its token: one without it learns that
// this envd needs one, and where; one with a wrong one, that it is wrong.
const (
	msgTokenMissing = "this envd requires an access token: send it in the X-Access-Token header"
	msgTokenWrong   = "the access token in X-Access-Token is not this envd's"
)

// TokenError is the message for a request refused for its access token:
// given says whether it carried one (a wrong one).
func TokenError(given bool) string {
	if given {
		return msgTokenWrong
	}
	return msgTokenMissing
}

// requireToken refuses a request for a non-public route that lacks the
// access token, once one is set: 401 with the HTTP API's error body, or, on
// a Connect service's route, the unauthenticated error in the protocol the
// client speaks (Connect's JSON error for a unary call, its end-of-stream
// message for a stream, gRPC's status): each client then shows envd's
// reason, not a bare "HTTP 401".
func requireToken(next http.Handler, mux *http.ServeMux, public map[string]bool, token *auth.Token) http.Handler {
	ew := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token.IsSet() {
			if _, pattern := mux.Handler(r); !public[pattern] && !token.Match(r.Header.Get("X-Access-Token")) {
				msg := TokenError(r.Header.Get("X-Access-Token") != "")
				if isConnectService(pattern) && ew.IsSupported(r) {
					// The error only says whether the answer was written;
					// the client is gone if it was not.
					_ = ew.Write(w, r, connect.NewError(connect.CodeUnauthenticated, errors.New(msg)))
					return
				}
				WriteError(w, http.StatusUnauthorized, msg)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// Browser clients (the SDK in a web page) may call envd from any origin; the
// headers match upstream's rs/cors setup.
const (
	corsMethods = "HEAD, GET, POST, PUT, PATCH, DELETE"
	corsExpose  = "Grpc-Status, Grpc-Message, Grpc-Status-Details-Bin, Location, Cache-Control, X-Content-Type-Options"
)

func cors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Origin") == "" {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Add("Vary", "Origin")
		h.Set("Access-Control-Allow-Origin", "*")
		if method := r.Header.Get("Access-Control-Request-Method"); r.Method == http.MethodOptions && method != "" {
			h.Add("Vary", "Access-Control-Request-Method")
			h.Add("Vary", "Access-Control-Request-Headers")
			// A whole method of the list: a substring such as "PATC" is not one.
			if !slices.Contains(strings.Split(corsMethods, ", "), strings.ToUpper(method)) {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			h.Set("Access-Control-Allow-Methods", strings.ToUpper(method))
			if hdrs := r.Header.Get("Access-Control-Request-Headers"); hdrs != "" {
				h.Set("Access-Control-Allow-Headers", hdrs)
			}
			h.Set("Access-Control-Max-Age", "7200")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.Set("Access-Control-Expose-Headers", corsExpose)
		next.ServeHTTP(w, r)
	})
}

// statusWriter records the status for the request log. It passes Flush
// through (streams need it) and exposes the original for http.ResponseController.
type statusWriter struct {
	http.ResponseWriter
	status  int
	errBody []byte // the start of an error answer's body (status >= 400), for the log
	// last is set by LastSend: flushes are left to the end of the answer.
	last bool
}

// errBodyMax bounds what of an error answer is kept for the log.
const errBodyMax = 1024

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	if s.status >= 400 && len(s.errBody) < errBodyMax {
		s.errBody = append(s.errBody, b[:min(len(b), errBodyMax-len(s.errBody))]...)
	}
	return s.ResponseWriter.Write(b)
}

// reason is why an error answer was given, from its body: the "message" of
// a JSON error (envd's HTTP API and Connect's unary errors both have one),
// else the text itself, on one line. Error answers carry envd's own
// messages, never tokens, environment values or file contents.
func (s *statusWriter) reason() string {
	var body struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(s.errBody, &body) == nil && body.Message != "" {
		return body.Message
	}
	return strings.Join(strings.Fields(string(s.errBody)), " ")
}

func (s *statusWriter) Flush() {
	if s.last {
		return
	}
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

type statusWriterKey struct{}

// LastSend tells the server that the handler of ctx's request is about to
// send its last message and return: the message, the end of the stream
// (Connect's end message, the chunked body's end) then leave in one write,
// not three (a stream's reader wakes once, not three times). Called from
// the goroutine that writes the answer.
func LastSend(ctx context.Context) {
	if sw, ok := ctx.Value(statusWriterKey{}).(*statusWriter); ok {
		sw.last = true
	}
}

// logRequests logs each request once it ends: method, path (never the query,
// which may hold a signature), status and duration; an error answer at info
// (a server error at warn) with its reason. Never headers, nor bodies but an
// error answer's message.
func logRequests(next http.Handler, logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), statusWriterKey{}, sw)))
		attrs := []any{"method", r.Method, "path", r.URL.Path, "status", sw.status, "duration", time.Since(start), "remote", r.RemoteAddr}
		level := slog.LevelDebug
		switch {
		case sw.status >= 500:
			level = slog.LevelWarn
		case sw.status >= 400:
			// A client's mistake: a person debugging it needs the why.
			level = slog.LevelInfo
		}
		if sw.status >= 400 {
			attrs = append(attrs, "reason", sw.reason())
		}
		logger.Log(r.Context(), level, "http request", attrs...)
	})
}

// recoverPanics keeps one bad request from taking the daemon down.
func recoverPanics(next http.Handler, logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				logger.Error("handler panicked", "path", r.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				WriteError(w, http.StatusInternalServerError, "internal error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// Serve serves h on ln until ctx ends or Shutdown is called on the returned
// server. base is the context every request's context derives from: cancel it
// to end long streams at shutdown.
func Serve(base context.Context, ln net.Listener, h http.Handler, logger *slog.Logger) *http.Server {
	srv := HTTPServer(base, h, logger)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("serve failed", "addr", ln.Addr().String(), "error", err)
		}
	}()
	return srv
}

// HTTPServer is the server Serve runs, for a caller that runs Serve itself:
// HTTP/1.1 and h2c, bounded headers, no timeout on streams. base is the
// context every request's context derives from: cancel it to end long
// streams at shutdown.
func HTTPServer(base context.Context, h http.Handler, logger *slog.Logger) *http.Server {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           h,
		Protocols:         &p,
		ReadHeaderTimeout: 10 * time.Second,
		// Streams may last hours: no read or write timeout. Idle keep-alive
		// connections are closed after a while, as upstream (640 s).
		IdleTimeout:    640 * time.Second,
		MaxHeaderBytes: 1 << 20,
		BaseContext:    func(net.Listener) context.Context { return base },
		ErrorLog:       slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
	}
}
