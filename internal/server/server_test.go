package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/gen/process/processconnect"
	"github.com/envd-dev/envd/internal/auth"
	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/server"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The messages of the token check's 401: a missing token, a wrong one.
const (
	unauthorizedMsg = "this envd requires an access token: send it in the X-Access-Token header"
	wrongTokenMsg   = "the access token in X-Access-Token is not this envd's"
)

// testTimeout bounds each request of these tests.
const testTimeout = 10 * time.Second

// fakeProcess is a process.Process service that reports who it runs as:
// List and Start answer with the run-as user's name and uid.
type fakeProcess struct {
	processconnect.UnimplementedProcessHandler
}

func (fakeProcess) List(ctx context.Context, _ *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	u := auth.UserFrom(ctx)
	if u == nil {
		return nil, errors.New("no user in context")
	}
	return connect.NewResponse(&pb.ListResponse{Processes: []*pb.ProcessInfo{{
		Pid:    u.UID,
		Config: &pb.ProcessConfig{Cmd: u.Name},
	}}}), nil
}

func (fakeProcess) Start(ctx context.Context, _ *connect.Request[pb.StartRequest], s *connect.ServerStream[pb.StartResponse]) error {
	u := auth.UserFrom(ctx)
	if u == nil {
		return errors.New("no user in context")
	}
	return s.Send(&pb.StartResponse{Event: &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{
		Data: &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stdout{Stdout: []byte(u.Name)}},
	}}})
}

// Connect panics, to check connect.WithRecover from HandlerOptions.
func (fakeProcess) Connect(context.Context, *connect.Request[pb.ConnectRequest], *connect.ServerStream[pb.ConnectResponse]) error {
	panic("connect exploded")
}

// SendSignal panics too, for the unary path.
func (fakeProcess) SendSignal(context.Context, *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	panic("signal exploded")
}

func health(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type testServer struct {
	url    string
	h1     *http.Client // HTTP/1.1 only
	h2c    *http.Client // HTTP/2 with prior knowledge only
	logs   *syncBuffer
	cancel context.CancelFunc // cancels the server's base context
}

type serverOptions struct {
	token       string
	defaultUser string // "": root
}

// routes is the table the tests serve: the real shapes of envd's routes (a
// public GET, a Connect service, a private plain route) plus test-only ones.
func routes(d *defaults.Defaults, logger *slog.Logger, blocked chan<- struct{}) []server.Route {
	procPath, procHandler := processconnect.NewProcessHandler(fakeProcess{}, server.HandlerOptions(logger, d)...)
	return []server.Route{
		{Pattern: "GET /health", Handler: http.HandlerFunc(health), Public: true},
		{Pattern: procPath, Handler: procHandler},
		{Pattern: "GET /private", Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, "private ok")
		})},
		{Pattern: "POST /public", Public: true, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, "public ok")
		})},
		{Pattern: "POST /reason", Public: true, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// The body is left unread: WriteReason drains it.
			server.WriteReason(w, r, http.StatusBadRequest, "text/plain; charset=utf-8", []byte("the body"),
				"unsupported language \"cobol\";\n\tavailable: python é")
		})},
		{Pattern: "GET /panic", Public: true, Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			panic("boom")
		})},
		{Pattern: "GET /abort", Public: true, Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			panic(http.ErrAbortHandler)
		})},
		{Pattern: "POST /last", Public: true, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rc := http.NewResponseController(w)
			rc.EnableFullDuplex()
			io.WriteString(w, "first")
			rc.Flush()
			var b [1]byte
			if _, err := io.ReadFull(r.Body, b[:]); err != nil {
				return
			}
			server.LastSend(r.Context())
			io.WriteString(w, "second")
			rc.Flush()
			io.WriteString(w, "third")
			rc.Flush()
		})},
		{Pattern: "GET /block", Public: true, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
			blocked <- struct{}{}
			<-r.Context().Done()
		})},
	}
}

func newTestServer(t *testing.T, o serverOptions) (*testServer, chan struct{}) {
	t.Helper()
	if o.defaultUser == "" {
		o.defaultUser = "root"
	}
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	d := defaults.New(o.defaultUser, nil)
	token := &auth.Token{}
	token.Set(o.token)
	blocked := make(chan struct{}, 1)
	h, err := server.New(server.Options{Logger: logger, Token: token, Routes: routes(d, logger, blocked)})
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base, cancel := context.WithCancel(context.Background())
	srv := server.Serve(base, ln, h, logger)

	var p1, p2 http.Protocols
	p1.SetHTTP1(true)
	p2.SetUnencryptedHTTP2(true)
	ts := &testServer{
		url:    "http://" + ln.Addr().String(),
		h1:     &http.Client{Transport: &http.Transport{Protocols: &p1}, Timeout: testTimeout},
		h2c:    &http.Client{Transport: &http.Transport{Protocols: &p2}, Timeout: testTimeout},
		logs:   logs,
		cancel: cancel,
	}
	t.Cleanup(func() {
		cancel()
		srv.Close()
		ts.h1.CloseIdleConnections()
		ts.h2c.CloseIdleConnections()
	})
	return ts, blocked
}

// do sends a request and returns the response with its body read.
func do(t *testing.T, c *http.Client, method, url string, hdr map[string]string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp, b
}

// envelope frames msg as one Connect streaming message.
func envelope(flags byte, msg []byte) []byte {
	out := make([]byte, 5, 5+len(msg))
	out[0] = flags
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

type frame struct {
	flags byte
	msg   []byte
}

// frames splits a Connect streaming body into its envelopes.
func frames(t *testing.T, b []byte) []frame {
	t.Helper()
	var out []frame
	for len(b) > 0 {
		if len(b) < 5 {
			t.Fatalf("truncated envelope header: %q", b)
		}
		n := binary.BigEndian.Uint32(b[1:5])
		if uint32(len(b)-5) < n {
			t.Fatalf("truncated envelope: want %d bytes, have %d", n, len(b)-5)
		}
		out = append(out, frame{flags: b[0], msg: b[5 : 5+n]})
		b = b[5+n:]
	}
	return out
}

// endStream returns the end-stream message of a streaming body, failing if
// there is none or it is not last.
func endStream(t *testing.T, b []byte) (msgs []frame, end map[string]any) {
	t.Helper()
	fs := frames(t, b)
	if len(fs) == 0 || fs[len(fs)-1].flags&0x02 == 0 {
		t.Fatalf("stream body %q has no end-stream envelope last", b)
	}
	if err := json.Unmarshal(fs[len(fs)-1].msg, &end); err != nil {
		t.Fatalf("end-stream %q: %v", fs[len(fs)-1].msg, err)
	}
	return fs[:len(fs)-1], end
}

func basic(name string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(name+":"))
}

const (
	listPath  = "/process.Process/List"
	startPath = "/process.Process/Start"
)

var (
	unaryJSON  = map[string]string{"Content-Type": "application/json"}
	streamJSON = map[string]string{"Content-Type": "application/connect+json"}
	startBody  = envelope(0, []byte(`{"process":{"cmd":"/bin/true"}}`))
)

func with(base map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func TestNew(t *testing.T) {
	t.Parallel()
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	tests := []struct {
		name    string
		routes  []server.Route
		wantErr string // "" means New must succeed
	}{
		{name: "empty table", routes: nil},
		{name: "distinct routes", routes: []server.Route{
			{Pattern: "GET /health", Handler: ok, Public: true},
			{Pattern: "/process.Process/", Handler: ok},
			{Pattern: "POST /files", Handler: ok},
			{Pattern: "GET /files", Handler: ok},
		}},
		{name: "duplicate pattern", routes: []server.Route{
			{Pattern: "GET /health", Handler: ok},
			{Pattern: "/process.Process/", Handler: ok},
			{Pattern: "GET /health", Handler: ok, Public: true},
		}, wantErr: `route "GET /health" declared twice`},
		{name: "duplicate service prefix", routes: []server.Route{
			{Pattern: "/process.Process/", Handler: ok},
			{Pattern: "/process.Process/", Handler: ok},
		}, wantErr: "declared twice"},
		{name: "same route spelled differently", routes: []server.Route{
			{Pattern: "GET /health", Handler: ok},
			{Pattern: "GET  /health", Handler: ok},
		}, wantErr: `route "GET  /health"`},
		{name: "conflicting wildcards", routes: []server.Route{
			{Pattern: "GET /files/{a}", Handler: ok},
			{Pattern: "GET /files/{b}", Handler: ok},
		}, wantErr: `route "GET /files/{b}"`},
		{name: "empty pattern", routes: []server.Route{{Pattern: "", Handler: ok}}, wantErr: `route ""`},
		{name: "bad method", routes: []server.Route{{Pattern: "G(E)T /x", Handler: ok}}, wantErr: `route "G(E)T /x"`},
		{name: "relative path", routes: []server.Route{{Pattern: "GET health", Handler: ok}}, wantErr: `route "GET health"`},
		{name: "bad wildcard", routes: []server.Route{{Pattern: "GET /x/{", Handler: ok}}, wantErr: `route "GET /x/{"`},
		{name: "nil handler", routes: []server.Route{{Pattern: "GET /x", Handler: nil}}, wantErr: `route "GET /x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, err := server.New(server.Options{Routes: tt.routes})
			if tt.wantErr == "" {
				if err != nil || h == nil {
					t.Fatalf("New = %v, %v; want a handler", h, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("New accepted %v", server.Patterns(tt.routes))
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("New: %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestPatterns(t *testing.T) {
	t.Parallel()
	got := server.Patterns([]server.Route{{Pattern: "b"}, {Pattern: "GET /a"}, {Pattern: "/c/"}})
	if want := []string{"/c/", "GET /a", "b"}; !slices.Equal(got, want) {
		t.Fatalf("Patterns = %q, want %q", got, want)
	}
	if got := server.Patterns(nil); len(got) != 0 {
		t.Fatalf("Patterns(nil) = %q", got)
	}
}

func TestWriteError(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	server.WriteError(rec, http.StatusNotFound, `no "such" file`)
	if rec.Code != http.StatusNotFound {
		t.Errorf("status %d", rec.Code)
	}
	if got := rec.Header().Get("Content-Type"); got != "application/json; charset=utf-8" {
		t.Errorf("Content-Type %q", got)
	}
	if got := rec.Header().Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("X-Content-Type-Options %q", got)
	}
	if want := `{"code":404,"message":"no \"such\" file"}` + "\n"; rec.Body.String() != want {
		t.Errorf("body %q, want %q", rec.Body.String(), want)
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	ts, _ := newTestServer(t, serverOptions{token: "secret"})
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		resp, body := do(t, ts.h1, method, ts.url+"/health", nil, nil)
		if resp.StatusCode != http.StatusNoContent || len(body) != 0 {
			t.Errorf("%s /health: %d %q, want 204 and no body", method, resp.StatusCode, body)
		}
		if got := resp.Header.Get("Cache-Control"); got != "no-store" {
			t.Errorf("%s /health: Cache-Control %q", method, got)
		}
	}
}

func TestUnknownPath(t *testing.T) {
	t.Parallel()
	ts, _ := newTestServer(t, serverOptions{})
	for _, path := range []string{"/nope", "/process.Process", "/filesystem.Filesystem/Stat", "/health/x"} {
		resp, body := do(t, ts.h1, http.MethodGet, ts.url+path, nil, nil)
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: status %d, want 404", path, resp.StatusCode)
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
			t.Errorf("GET %s: Content-Type %q, want text/plain", path, ct)
		}
		if string(body) != "404 page not found\n" {
			t.Errorf("GET %s: body %q", path, body)
		}
	}
}

func TestAccessToken(t *testing.T) {
	t.Parallel()
	ts, _ := newTestServer(t, serverOptions{token: "secret"})
	tests := []struct {
		name       string
		method     string
		path       string
		hdr        map[string]string
		body       []byte
		wantStatus int
		wantBody   string // substring
	}{
		{name: "health without token", method: "GET", path: "/health", wantStatus: 204},
		{name: "health with wrong token", method: "GET", path: "/health", hdr: map[string]string{"X-Access-Token": "bad"}, wantStatus: 204},
		{name: "public route without token", method: "POST", path: "/public", wantStatus: 200, wantBody: "public ok"},
		{name: "private route without token", method: "GET", path: "/private", wantStatus: 401, wantBody: unauthorizedMsg},
		{name: "private route with wrong token", method: "GET", path: "/private", hdr: map[string]string{"X-Access-Token": "secreT"}, wantStatus: 401, wantBody: wrongTokenMsg},
		{name: "private route with token", method: "GET", path: "/private", hdr: map[string]string{"X-Access-Token": "secret"}, wantStatus: 200, wantBody: "private ok"},
		{name: "token in another header", method: "GET", path: "/private", hdr: map[string]string{"Authorization": "Bearer secret"}, wantStatus: 401, wantBody: unauthorizedMsg},
		{name: "unary without token", method: "POST", path: listPath, hdr: unaryJSON, body: []byte(`{}`), wantStatus: 401, wantBody: unauthorizedMsg},
		{name: "unary with wrong token", method: "POST", path: listPath, hdr: with(unaryJSON, "X-Access-Token", "x"), body: []byte(`{}`), wantStatus: 401, wantBody: wrongTokenMsg},
		{name: "unary with empty token", method: "POST", path: listPath, hdr: with(unaryJSON, "X-Access-Token", ""), body: []byte(`{}`), wantStatus: 401, wantBody: unauthorizedMsg},
		{name: "unary with token", method: "POST", path: listPath, hdr: with(unaryJSON, "X-Access-Token", "secret"), body: []byte(`{}`), wantStatus: 200, wantBody: `"cmd":"root"`},
		// A stream's error is its end-of-stream message, after a 200.
		{name: "stream without token", method: "POST", path: startPath, hdr: streamJSON, body: startBody, wantStatus: 200, wantBody: unauthorizedMsg},
		{name: "stream with wrong token", method: "POST", path: startPath, hdr: with(streamJSON, "X-Access-Token", "nope"), body: startBody, wantStatus: 200, wantBody: wrongTokenMsg},
		{name: "stream with token", method: "POST", path: startPath, hdr: with(streamJSON, "X-Access-Token", "secret"), body: startBody, wantStatus: 200},
		// An unknown path matches no public route: with a token set it is
		// refused before the mux can say 404, as upstream's middleware does.
		{name: "unknown path without token", method: "GET", path: "/nope", wantStatus: 401, wantBody: unauthorizedMsg},
		{name: "unknown path with token", method: "GET", path: "/nope", hdr: map[string]string{"X-Access-Token": "secret"}, wantStatus: 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, body := do(t, ts.h1, tt.method, ts.url+tt.path, tt.hdr, tt.body)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d; body %q", resp.StatusCode, tt.wantStatus, body)
			}
			if !strings.Contains(string(body), tt.wantBody) {
				t.Errorf("body %q, want it to contain %q", body, tt.wantBody)
			}
			if tt.wantBody != unauthorizedMsg && tt.wantBody != wrongTokenMsg {
				return
			}
			// A Connect route answers in Connect's shape, which every
			// Connect client shows (upstream's HTTP API shape there
			// leaves them a bare "HTTP 401"); others in the HTTP API's.
			switch {
			case tt.path == startPath:
				// An end-of-stream frame: flags 2, length, then the error.
				if ct := resp.Header.Get("Content-Type"); ct != "application/connect+json" {
					t.Errorf("Content-Type %q", ct)
				}
				var e struct {
					Error struct{ Code, Message string }
				}
				if len(body) < 5 || body[0] != 2 || json.Unmarshal(body[5:], &e) != nil || e.Error.Code != "unauthenticated" || e.Error.Message != tt.wantBody {
					t.Errorf("body %q: want an end-of-stream unauthenticated error %q", body, tt.wantBody)
				}
			case tt.path == listPath:
				if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type %q", ct)
				}
				var e struct{ Code, Message string }
				if err := json.Unmarshal(body, &e); err != nil || e.Code != "unauthenticated" || e.Message != tt.wantBody {
					t.Errorf("body %q = %+v, %v; want {code:unauthenticated, message:%q}", body, e, err, tt.wantBody)
				}
			default:
				if ct := resp.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
					t.Errorf("Content-Type %q", ct)
				}
				var e struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				}
				if err := json.Unmarshal(body, &e); err != nil || e.Code != 401 || e.Message != tt.wantBody {
					t.Errorf("body %q = %+v, %v; want {code:401, message:%q}", body, e, err, tt.wantBody)
				}
			}
		})
	}
}

// TestAccessTokenConnectClient: a Connect client sees the 401 as
// unauthenticated, on unary and streaming calls, in both codecs.
func TestAccessTokenConnectClient(t *testing.T) {
	t.Parallel()
	ts, _ := newTestServer(t, serverOptions{token: "secret"})
	for _, codec := range []struct {
		name string
		opts []connect.ClientOption
	}{{"json", []connect.ClientOption{connect.WithProtoJSON()}}, {"binary", nil}} {
		t.Run(codec.name, func(t *testing.T) {
			t.Parallel()
			c := processconnect.NewProcessClient(ts.h1, ts.url, codec.opts...)
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			_, err := c.List(ctx, connect.NewRequest(&pb.ListRequest{}))
			if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), unauthorizedMsg) {
				t.Errorf("List without token: %v, want unauthenticated: %s", err, unauthorizedMsg)
			}
			stream, err := c.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/true"}}))
			if err == nil {
				for stream.Receive() {
					t.Errorf("Start without token received %v", stream.Msg())
				}
				err = stream.Err()
				stream.Close()
			}
			if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), unauthorizedMsg) {
				t.Errorf("Start without token: %v, want unauthenticated: %s", err, unauthorizedMsg)
			}
			req := connect.NewRequest(&pb.ListRequest{})
			req.Header().Set("X-Access-Token", "secret")
			if _, err := c.List(ctx, req); err != nil {
				t.Errorf("List with token: %v", err)
			}
		})
	}
}

func TestNoTokenSetAllowsAll(t *testing.T) {
	t.Parallel()
	ts, _ := newTestServer(t, serverOptions{})
	for _, hdr := range []map[string]string{nil, {"X-Access-Token": "anything"}} {
		resp, body := do(t, ts.h1, "GET", ts.url+"/private", hdr, nil)
		if resp.StatusCode != 200 {
			t.Errorf("GET /private with %v and no token set: %d %q", hdr, resp.StatusCode, body)
		}
	}
}

func TestCORS(t *testing.T) {
	t.Parallel()
	ts, _ := newTestServer(t, serverOptions{token: "secret"})
	const exposed = "Grpc-Status, Grpc-Message, Grpc-Status-Details-Bin, Location, Cache-Control, X-Content-Type-Options"
	tests := []struct {
		name        string
		method      string
		path        string
		hdr         map[string]string
		wantStatus  int
		wantHeaders map[string]string // "" means the header must be absent
	}{
		{
			name: "preflight of a Connect call, no token", method: "OPTIONS", path: listPath,
			hdr: map[string]string{
				"Origin":                         "https://app.example",
				"Access-Control-Request-Method":  "POST",
				"Access-Control-Request-Headers": "content-type,connect-protocol-version,x-access-token,authorization",
			},
			wantStatus: 204,
			wantHeaders: map[string]string{
				"Access-Control-Allow-Origin":   "*",
				"Access-Control-Allow-Methods":  "POST",
				"Access-Control-Allow-Headers":  "content-type,connect-protocol-version,x-access-token,authorization",
				"Access-Control-Max-Age":        "7200",
				"Access-Control-Expose-Headers": "",
			},
		},
		{
			name: "preflight of a private route", method: "OPTIONS", path: "/private",
			hdr:        map[string]string{"Origin": "http://localhost:3000", "Access-Control-Request-Method": "delete"},
			wantStatus: 204,
			wantHeaders: map[string]string{
				"Access-Control-Allow-Origin":  "*",
				"Access-Control-Allow-Methods": "DELETE",
				"Access-Control-Allow-Headers": "",
				"Access-Control-Max-Age":       "7200",
			},
		},
		{
			name: "preflight of an unknown path", method: "OPTIONS", path: "/nope",
			hdr:         map[string]string{"Origin": "http://x", "Access-Control-Request-Method": "GET"},
			wantStatus:  204,
			wantHeaders: map[string]string{"Access-Control-Allow-Methods": "GET", "Access-Control-Max-Age": "7200"},
		},
		{
			name: "preflight of a method not allowed", method: "OPTIONS", path: "/private",
			hdr:         map[string]string{"Origin": "http://x", "Access-Control-Request-Method": "TRACE"},
			wantStatus:  204,
			wantHeaders: map[string]string{"Access-Control-Allow-Methods": "", "Access-Control-Max-Age": ""},
		},
		{
			name: "preflight of a part of an allowed method", method: "OPTIONS", path: "/private",
			hdr:         map[string]string{"Origin": "http://x", "Access-Control-Request-Method": "PATC"},
			wantStatus:  204,
			wantHeaders: map[string]string{"Access-Control-Allow-Methods": "", "Access-Control-Max-Age": ""},
		},
		{
			name: "actual response", method: "GET", path: "/health",
			hdr:        map[string]string{"Origin": "https://app.example"},
			wantStatus: 204,
			wantHeaders: map[string]string{
				"Access-Control-Allow-Origin":   "*",
				"Access-Control-Expose-Headers": exposed,
				"Vary":                          "Origin",
				"Access-Control-Max-Age":        "",
				"Access-Control-Allow-Methods":  "",
			},
		},
		{
			name: "actual response refused for the token keeps CORS headers", method: "GET", path: "/private",
			hdr:        map[string]string{"Origin": "https://app.example"},
			wantStatus: 401,
			wantHeaders: map[string]string{
				"Access-Control-Allow-Origin":   "*",
				"Access-Control-Expose-Headers": exposed,
			},
		},
		{
			// The code API's errors (404 Context x not found, 400, 422)
			// go through WriteReason: a browser drops an answer without
			// Access-Control-Allow-Origin, and the SDK sees "Failed to
			// fetch" instead of NotFoundError (docs/wire.md: every
			// answer to a request with an Origin).
			name: "error answer with a reason phrase keeps CORS headers", method: "POST", path: "/reason",
			hdr:        map[string]string{"Origin": "https://app.example"},
			wantStatus: 400,
			wantHeaders: map[string]string{
				"Access-Control-Allow-Origin":   "*",
				"Access-Control-Expose-Headers": exposed,
				"Vary":                          "Origin",
			},
		},
		{
			name: "no origin, no CORS", method: "GET", path: "/health",
			wantStatus: 204,
			wantHeaders: map[string]string{
				"Access-Control-Allow-Origin":   "",
				"Access-Control-Expose-Headers": "",
			},
		},
		{
			name: "OPTIONS without a requested method is not a preflight", method: "OPTIONS", path: "/private",
			hdr:        map[string]string{"Origin": "http://x", "X-Access-Token": "secret"},
			wantStatus: 405,
			wantHeaders: map[string]string{
				"Access-Control-Allow-Origin":   "*",
				"Access-Control-Expose-Headers": exposed,
				"Access-Control-Max-Age":        "",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, body := do(t, ts.h1, tt.method, ts.url+tt.path, tt.hdr, nil)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d; body %q", resp.StatusCode, tt.wantStatus, body)
			}
			for k, want := range tt.wantHeaders {
				if got := strings.Join(resp.Header.Values(k), ", "); got != want {
					if k == "Vary" && strings.Contains(got, want) {
						continue
					}
					t.Errorf("%s: %q, want %q", k, got, want)
				}
			}
		})
	}
}

func TestPanicRecovered(t *testing.T) {
	t.Parallel()
	ts, _ := newTestServer(t, serverOptions{})
	for range 3 {
		resp, body := do(t, ts.h1, "GET", ts.url+"/panic", nil, nil)
		if resp.StatusCode != 500 {
			t.Fatalf("GET /panic: %d %q, want 500", resp.StatusCode, body)
		}
		if want := `{"code":500,"message":"internal error"}` + "\n"; string(body) != want {
			t.Errorf("GET /panic: body %q, want %q", body, want)
		}
		if resp, _ := do(t, ts.h1, "GET", ts.url+"/health", nil, nil); resp.StatusCode != 204 {
			t.Fatalf("GET /health after a panic: %d", resp.StatusCode)
		}
	}
	if !strings.Contains(ts.logs.String(), "handler panicked") || !strings.Contains(ts.logs.String(), "boom") {
		t.Errorf("the panic was not logged:\n%s", ts.logs)
	}

	// http.ErrAbortHandler aborts the response, and only that one.
	req, _ := http.NewRequest("GET", ts.url+"/abort", nil)
	if resp, err := ts.h1.Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("GET /abort: %d, want the connection aborted", resp.StatusCode)
	}
	if resp, _ := do(t, ts.h1, "GET", ts.url+"/health", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("GET /health after an abort: %d", resp.StatusCode)
	}

	// A panic inside a Connect procedure is Connect's internal error.
	c := processconnect.NewProcessClient(ts.h1, ts.url, connect.WithProtoJSON())
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, err := c.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{}))
	if connect.CodeOf(err) != connect.CodeInternal || !strings.Contains(err.Error(), "internal error") {
		t.Errorf("SendSignal (panics): %v, want internal: internal error", err)
	}
	stream, err := c.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{}))
	if err == nil {
		for stream.Receive() {
		}
		err = stream.Err()
		stream.Close()
	}
	if connect.CodeOf(err) != connect.CodeInternal {
		t.Errorf("Connect (panics): %v, want internal", err)
	}
	if strings.Contains(err.Error(), "exploded") {
		t.Errorf("the panic value reached the client: %v", err)
	}
	if resp, _ := do(t, ts.h1, "GET", ts.url+"/health", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("GET /health after Connect panics: %d", resp.StatusCode)
	}
}

func TestProtocols(t *testing.T) {
	t.Parallel()
	ts, _ := newTestServer(t, serverOptions{})
	for _, tc := range []struct {
		name      string
		client    *http.Client
		wantMajor int
	}{{"HTTP/1.1", ts.h1, 1}, {"h2c", ts.h2c, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp, _ := do(t, tc.client, "GET", ts.url+"/health", nil, nil)
			if resp.StatusCode != 204 || resp.ProtoMajor != tc.wantMajor {
				t.Fatalf("GET /health: %d over %s, want 204 over HTTP/%d", resp.StatusCode, resp.Proto, tc.wantMajor)
			}
			c := processconnect.NewProcessClient(tc.client, ts.url)
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			list, err := c.List(ctx, connect.NewRequest(&pb.ListRequest{}))
			if err != nil || list.Msg.GetProcesses()[0].GetConfig().GetCmd() != "root" {
				t.Fatalf("List: %v, %v", list, err)
			}
			stream, err := c.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/true"}}))
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			var got []string
			for stream.Receive() {
				got = append(got, string(stream.Msg().GetEvent().GetData().GetStdout()))
			}
			if err := stream.Err(); err != nil || !slices.Equal(got, []string{"root"}) {
				t.Fatalf("Start: %q, %v", got, err)
			}
		})
	}
}

// TestUserInterceptor: the run-as user comes from Basic auth, else the
// default; an unknown name is unauthenticated before the handler runs.
func TestUserInterceptor(t *testing.T) {
	t.Parallel()
	ts, _ := newTestServer(t, serverOptions{defaultUser: "root"})
	tests := []struct {
		name     string
		auth     string // Authorization header; "" sends none
		wantUser string // "" means the call must fail
		wantMsg  string
	}{
		{name: "no header is the default user", wantUser: "root"},
		{name: "basic root", auth: basic("root"), wantUser: "root"},
		{name: "basic nobody", auth: basic("nobody"), wantUser: "nobody"},
		{name: "basic sandbox user", auth: basic("user"), wantUser: "user"},
		{name: "lowercase scheme", auth: "basic " + base64.StdEncoding.EncodeToString([]byte("nobody:")), wantUser: "nobody"},
		{name: "password ignored", auth: "Basic " + base64.StdEncoding.EncodeToString([]byte("nobody:pw")), wantUser: "nobody"},
		{name: "unknown user", auth: basic("x"), wantMsg: "invalid username: 'x'"},
		{name: "empty user name", auth: basic(""), wantMsg: "invalid username: ''"},
		{name: "bearer is the default user", auth: "Bearer abc", wantUser: "root"},
		{name: "garbage basic is the default user", auth: "Basic %%%", wantUser: "root"},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/unary", func(t *testing.T) {
			t.Parallel()
			hdr := with(unaryJSON)
			if tt.auth != "" {
				hdr["Authorization"] = tt.auth
			}
			resp, body := do(t, ts.h1, "POST", ts.url+listPath, hdr, []byte(`{}`))
			if tt.wantUser != "" {
				var lr struct {
					Processes []struct {
						Config struct{ Cmd string }
					}
				}
				if resp.StatusCode != 200 || json.Unmarshal(body, &lr) != nil || len(lr.Processes) != 1 || lr.Processes[0].Config.Cmd != tt.wantUser {
					t.Fatalf("List: %d %q, want 200 running as %q", resp.StatusCode, body, tt.wantUser)
				}
				return
			}
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("List: %d %q, want 401", resp.StatusCode, body)
			}
			var e struct{ Code, Message string }
			if err := json.Unmarshal(body, &e); err != nil || e.Code != "unauthenticated" || e.Message != tt.wantMsg {
				t.Fatalf("List: body %q, want {code:unauthenticated, message:%q}", body, tt.wantMsg)
			}
		})
		t.Run(tt.name+"/stream", func(t *testing.T) {
			t.Parallel()
			hdr := with(streamJSON)
			if tt.auth != "" {
				hdr["Authorization"] = tt.auth
			}
			resp, body := do(t, ts.h1, "POST", ts.url+startPath, hdr, startBody)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("Start: HTTP %d %q, want 200 (errors go in the end-stream)", resp.StatusCode, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/connect+json" {
				t.Errorf("Start: Content-Type %q", ct)
			}
			msgs, end := endStream(t, body)
			if tt.wantUser != "" {
				if len(msgs) != 1 || !strings.Contains(string(msgs[0].msg), base64.StdEncoding.EncodeToString([]byte(tt.wantUser))) {
					t.Fatalf("Start: messages %q, want one naming %q", msgs, tt.wantUser)
				}
				if _, bad := end["error"]; bad {
					t.Fatalf("Start: end-stream %v", end)
				}
				return
			}
			if len(msgs) != 0 {
				t.Errorf("Start: messages %q before the error, want none (the handler must not run)", msgs)
			}
			e, _ := end["error"].(map[string]any)
			if e["code"] != "unauthenticated" || e["message"] != tt.wantMsg {
				t.Fatalf("Start: end-stream %v, want error unauthenticated %q", end, tt.wantMsg)
			}
		})
	}
}

func TestUserInterceptorUnusableDefault(t *testing.T) {
	t.Parallel()
	ts, _ := newTestServer(t, serverOptions{defaultUser: "no-such-user-envd-test"})
	c := processconnect.NewProcessClient(ts.h1, ts.url, connect.WithProtoJSON())
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, err := c.List(ctx, connect.NewRequest(&pb.ListRequest{}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "default user 'no-such-user-envd-test' cannot be used") {
		t.Fatalf("List: %v, want unauthenticated naming the default user", err)
	}
	// Naming a real user still works.
	req := connect.NewRequest(&pb.ListRequest{})
	req.Header().Set("Authorization", basic("root"))
	if _, err := c.List(ctx, req); err != nil {
		t.Fatalf("List as root: %v", err)
	}
}

// TestLogsNoSecrets: the request log has method, path and status, never the
// query (it may hold a signature) nor headers.
func TestLogsNoSecrets(t *testing.T) {
	t.Parallel()
	ts, _ := newTestServer(t, serverOptions{token: "tok-SECRET-1"})
	do(t, ts.h1, "GET", ts.url+"/private?signature=v1_SIG-SECRET-2", map[string]string{
		"X-Access-Token": "tok-SECRET-1",
		"Authorization":  basic("root"),
	}, nil)
	do(t, ts.h1, "GET", ts.url+"/private?signature=v1_SIG-SECRET-2", map[string]string{"X-Access-Token": "WRONG-SECRET-3"}, nil)
	logs := ts.logs.String()
	if !strings.Contains(logs, "path=/private") || !strings.Contains(logs, "status=200") || !strings.Contains(logs, "status=401") {
		t.Errorf("request log lacks path or status:\n%s", logs)
	}
	if strings.Contains(logs, "SECRET") || strings.Contains(logs, basic("root")) {
		t.Errorf("request log holds a secret:\n%s", logs)
	}
}

// TestBaseContextEndsStreams: cancelling the base context given to Serve
// ends long-running handlers, which is how daemon ends streams at shutdown.
func TestBaseContextEndsStreams(t *testing.T) {
	t.Parallel()
	ts, blocked := newTestServer(t, serverOptions{})
	req, _ := http.NewRequest("GET", ts.url+"/block", nil)
	resp, err := ts.h1.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	select {
	case <-blocked:
	case <-time.After(testTimeout):
		t.Fatal("handler never ran")
	}
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		done <- err
	}()
	// The handler waits for its context and nothing else: the stream is
	// open until the base context is cancelled.
	select {
	case err := <-done:
		t.Fatalf("stream ended before the base context was cancelled: %v", err)
	default:
	}
	ts.cancel()
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatal("stream still open after the base context was cancelled")
	}
}

// TestChunkedRequestBody: requests with chunked bodies (Node's uploads) reach
// the handler.
func TestChunkedRequestBody(t *testing.T) {
	t.Parallel()
	ts, _ := newTestServer(t, serverOptions{})
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(testTimeout))
	io.WriteString(conn, "POST /process.Process/List HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"cmd":"root"`) {
		t.Fatalf("chunked List: %d %q", resp.StatusCode, body)
	}
}

// TestErrorsAreLogged: a refused request is logged at info with its reason
// (the message of its error body), and so is a stream that ended with an
// error behind a 200; a request that succeeded stays at debug.
func TestErrorsAreLogged(t *testing.T) {
	ts, _ := newTestServer(t, serverOptions{token: "secret"})
	resp, _ := do(t, ts.h1, "GET", ts.url+"/private", nil, nil)
	if resp.StatusCode != 401 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	resp, body := do(t, ts.h1, "POST", ts.url+startPath, with(with(streamJSON, "X-Access-Token", "secret"), "Authorization", basic("no-such-user-x")), startBody)
	if resp.StatusCode != 200 {
		t.Fatalf("stream status %d: %s", resp.StatusCode, body)
	}
	resp, _ = do(t, ts.h1, "GET", ts.url+"/private", map[string]string{"X-Access-Token": "secret"}, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	logs := ts.logs.String()
	for _, want := range []string{
		`level=INFO msg="http request" method=GET path=/private status=401`,
		`reason="` + unauthorizedMsg + `"`,
		`level=INFO msg="stream ended with an error" procedure=/process.Process/Start code=unauthenticated reason="invalid username: 'no-such-user-x'"`,
		`level=DEBUG msg="http request" method=GET path=/private status=200`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %s:\n%s", want, logs)
		}
	}
}

// TestLastSend: after LastSend, what a handler writes and the end of the
// answer reach the client in one write, flushes or not; before it, each
// flush sends what was written.
func TestLastSend(t *testing.T) {
	t.Parallel()
	ts, _ := newTestServer(t, serverOptions{})
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(testTimeout))
	if _, err := io.WriteString(conn, "POST /last HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, len("first"))
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "first" {
		t.Fatalf("the flushed part: %q, %v", first, err)
	}
	if br.Buffered() > 0 {
		rest, _ := br.Peek(br.Buffered())
		t.Fatalf("more than the flushed part came: %q", rest)
	}
	if _, err := conn.Write([]byte("x")); err != nil { // the handler goes on
		t.Fatal(err)
	}
	// One read gets the rest, chunks and the end of the body together.
	buf := make([]byte, 64<<10)
	n, err := br.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	want := "6\r\nsecond\r\n5\r\nthird\r\n0\r\n\r\n"
	if got := string(buf[:n]); got != want && got != "b\r\nsecondthird\r\n0\r\n\r\n" {
		t.Errorf("after LastSend one read got %q, want the rest of the answer at once (%q)", got, want)
	}
}
