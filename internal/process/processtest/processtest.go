// Package processtest serves the real process.Process service for tests,
// built the way internal/daemon wires it (Manager, procconnect.Service, the
// server's handler options and route table), on an httptest server that
// speaks HTTP/1.1 and h2c, and gives tests generated clients for each
// transport, codec and run-as user, plus a Watcher that reads a Start or
// Connect stream in the background.
//
// Nothing here calls t.Fatal from a goroutine: background readers only
// record, and the test's own goroutine asserts.
package processtest

import (
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/quartz"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/gen/process/processconnect"
	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/process"
	"github.com/envd-dev/envd/internal/process/procconnect"
	"github.com/envd-dev/envd/internal/server"
	"github.com/envd-dev/envd/internal/testutil"
	"github.com/envd-dev/envd/wirecodec"
)

// Timeouts shared by every test of the process packages. They are generous:
// the suite runs with -race on two cores, many tests in parallel.
const (
	// WaitShort bounds what should take well under a second.
	WaitShort = 15 * time.Second
	// WaitLong bounds heavy work: big streams, hundreds of processes.
	WaitLong = 120 * time.Second
	// Poll is the interval of Eventually.
	Poll = 10 * time.Millisecond
)

// FixedEnv is what the test server's defaults always set, as the daemon
// sets E2B_SANDBOX.
var FixedEnv = map[string]string{"E2B_SANDBOX": "true"}

// Options configures New. Every field may be left zero.
type Options struct {
	// DefaultUser is the user of requests without Basic auth. Zero: "root".
	DefaultUser string
	// LogSize, Retention and ReaderGrace go to process.Options (zero: its
	// defaults).
	LogSize     int
	Retention   time.Duration
	ReaderGrace time.Duration
	// Clock goes to process.Options (zero: the real clock).
	Clock quartz.Clock
	// StrictUsers goes to process.Options.
	StrictUsers bool
	// Accounts are users that exist only for this server: a request whose
	// Basic auth names one runs as it, though /etc/passwd does not know it
	// (tests cannot add accounts to the machine). Others resolve as in envd.
	Accounts []*identity.User
}

// Server is a served process service.
type Server struct {
	URL      string
	Manager  *process.Manager
	Defaults *defaults.Defaults
}

// Logger is the logger of test servers: silent, unless ENVD_TEST_LOG is set,
// then text on stderr. (Never t.Log: processes end, and log, after tests.)
func Logger() *slog.Logger {
	if os.Getenv("ENVD_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// New serves a fresh Manager's service until the test ends. At cleanup every
// process still running is killed by pid and waited for, then the server is
// closed.
func New(t testing.TB, o Options) *Server {
	t.Helper()
	if o.DefaultUser == "" {
		o.DefaultUser = "root"
	}
	log := Logger()
	defs := defaults.New(o.DefaultUser, FixedEnv)
	m := process.NewManager(process.Options{
		Logger: log, Env: defs.Env, LogSize: o.LogSize, Retention: o.Retention, ReaderGrace: o.ReaderGrace, Clock: o.Clock,
		StrictUsers: o.StrictUsers,
	})
	// As daemon.Run wires it.
	opts := server.HandlerOptions(log, defs)
	if len(o.Accounts) > 0 {
		opts = WithAccounts(opts, o.Accounts)
	}
	path, h := procconnect.NewService(m, defs).Handler(opts...)
	handler, err := server.New(server.Options{Logger: log, Routes: []server.Route{{Pattern: path, Handler: h}}})
	if err != nil {
		t.Fatalf("build routes: %v", err)
	}
	srv := httptest.NewUnstartedServer(handler)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	t.Cleanup(srv.Close) // runs last: after the processes are gone
	t.Cleanup(func() { KillAll(t, m) })
	return &Server{URL: srv.URL, Manager: m, Defaults: defs}
}

// KillAll sends SIGKILL to every live process of m and waits for each to end.
func KillAll(t testing.TB, m *process.Manager) {
	t.Helper()
	ps := m.List()
	for _, p := range ps {
		p.Signal(syscall.SIGKILL) // an error means it ended meanwhile
	}
	for _, p := range ps {
		select {
		case <-p.Done():
		case <-time.After(WaitShort):
			t.Errorf("process %d still running %v after SIGKILL", p.Pid(), WaitShort)
		}
	}
}

// Proto is the HTTP version a client speaks.
type Proto string

const (
	H2C   Proto = "h2c"
	HTTP1 Proto = "http1"
)

// Codec is the Connect codec a client uses.
type Codec string

const (
	JSON   Codec = "json"   // as the SDK
	Binary Codec = "binary" // protobuf
	// Wire is binary protobuf as envd's Go client decodes it
	// (package wirecodec): output in pooled buffers.
	Wire Codec = "wire"
)

// ClientOptions picks how a client talks.
type ClientOptions struct {
	Proto Proto // zero: H2C
	Codec Codec // zero: Binary
	// User, when set, goes as "Authorization: Basic base64(user:)".
	User string
	// Header is added to every request (e.g. Keepalive-Ping-Interval).
	Header http.Header
	// Gzip lets the server compress responses, as a Go client does by
	// default; the SDK does not, and neither does a zero ClientOptions.
	Gzip bool
}

// HTTPClient returns an HTTP client speaking proto, whose connections are
// closed when the test ends.
func HTTPClient(t testing.TB, proto Proto, user string, header http.Header) *http.Client {
	var p http.Protocols
	if proto == HTTP1 {
		p.SetHTTP1(true)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	// h2 as envd's Go client (package client) configures it.
	h2 := &http.HTTP2Config{MaxReadFrameSize: 1 << 20, MaxReceiveBufferPerStream: 8 << 20, MaxReceiveBufferPerConnection: 16 << 20}
	tr := &http.Transport{Protocols: &p, MaxIdleConnsPerHost: 64, HTTP2: h2}
	t.Cleanup(tr.CloseIdleConnections)
	var rt http.RoundTripper = tr
	if user != "" || len(header) > 0 {
		rt = &headers{user: user, header: header, next: tr}
	}
	return &http.Client{Transport: rt}
}

// Client returns a generated process client.
func (s *Server) Client(t testing.TB, o ClientOptions) processconnect.ProcessClient {
	var opts []connect.ClientOption
	switch o.Codec {
	case JSON:
		opts = append(opts, connect.WithProtoJSON())
	case Wire:
		opts = append(opts, connect.WithCodec(wirecodec.Codec{}))
	}
	if !o.Gzip {
		opts = append(opts, connect.WithAcceptCompression("gzip", nil, nil))
	}
	hc := HTTPClient(t, o.Proto, o.User, o.Header)
	if o.Proto != HTTP1 {
		s.connect(t, hc)
	}
	return processconnect.NewProcessClient(hc, s.URL, opts...)
}

// connect makes hc's HTTP/2 connection to the server before a test uses
// it, trying again when the server dropped it as it began: Go's HTTP/2
// server gives a new connection two seconds for the client's SETTINGS,
// and a -race client on a loaded machine has missed them ("timeout
// waiting for SETTINGS frames", then "connection reset by peer" for the
// test's first call). The connection made stays in hc's pool, and every
// call of the test is multiplexed on it.
func (s *Server) connect(t testing.TB, hc *http.Client) {
	t.Helper()
	var err error
	for range 3 {
		var req *http.Request
		req, err = http.NewRequest(http.MethodGet, s.URL+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		var resp *http.Response
		if resp, err = hc.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return
		}
	}
	t.Fatalf("connect to the test server %s: %v", s.URL, err)
}

// BasicAuth is the Authorization header value naming user.
func BasicAuth(user string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"))
}

type headers struct {
	user   string
	header http.Header
	next   http.RoundTripper
}

func (h *headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, vs := range h.header {
		r.Header[http.CanonicalHeaderKey(k)] = vs // replacing the client's own (User-Agent)
	}
	if h.user != "" {
		r.Header.Set("Authorization", BasicAuth(h.user))
	}
	return h.next.RoundTrip(r)
}

// Eventually polls cond every Poll until it holds, failing the test with msg
// after timeout.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: "+msg, append([]any{timeout}, args...)...)
		}
		time.Sleep(Poll)
	}
}

// Context returns a context that ends after d or with the test.
func Context(t testing.TB, d time.Duration) context.Context {
	return testutil.Context(t, d)
}

// KillAtCleanup pins a process a test learned the pid of (say a background child
// that a script printed) so that it can be killed at cleanup without
// risking a reused pid. A pid already gone is ignored.
func KillAtCleanup(t testing.TB, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // ended already
	}
	t.Cleanup(func() {
		unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		unix.Close(fd)
	})
}
