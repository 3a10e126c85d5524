// Package shelltest serves the real envd.shell.v1 service for tests, built
// the way internal/daemon wires it (a process.Manager, a shell.Manager over
// it, shellconnect and procconnect, the server's handler options and route
// table), on an httptest server that speaks HTTP/1.1 and h2c, and reads a
// command's stream into a Result.
//
// Nothing here calls t.Fatal from a goroutine.
package shelltest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/envd/shell/v1"
	"github.com/envd-dev/envd/gen/envd/shell/v1/shellv1connect"
	"github.com/envd-dev/envd/gen/process/processconnect"
	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/process"
	"github.com/envd-dev/envd/internal/process/procconnect"
	"github.com/envd-dev/envd/internal/process/processtest"
	"github.com/envd-dev/envd/internal/server"
	"github.com/envd-dev/envd/internal/shell"
	"github.com/envd-dev/envd/internal/shell/shellconnect"
)

// Timeouts shared by the shell tests (see processtest's).
const (
	WaitShort = processtest.WaitShort
	WaitLong  = processtest.WaitLong
)

// Options configures New. Every field may be left zero.
type Options struct {
	// DefaultUser is the user of requests without Basic auth. Zero: "root".
	DefaultUser string
	// StrictUsers goes to process.Options.
	StrictUsers bool
	// Accounts are users that exist only for this server (see
	// processtest.Options.Accounts).
	Accounts []*identity.User
	// LogSize and ReaderGrace go to process.Options.
	LogSize     int
	ReaderGrace time.Duration
	// Shell is the shell.Options (its Processes and Logger are set here).
	Shell shell.Options
}

// Server is a served shell service, with the process service beside it.
type Server struct {
	URL       string
	Processes *process.Manager
	Shells    *shell.Manager
	Defaults  *defaults.Defaults
}

// New serves a fresh Manager's service until the test ends. At cleanup
// every session is closed, every process killed, then the server closed.
func New(t testing.TB, o Options) *Server {
	t.Helper()
	if o.DefaultUser == "" {
		o.DefaultUser = "root"
	}
	log := processtest.Logger()
	defs := defaults.New(o.DefaultUser, processtest.FixedEnv)
	pm := process.NewManager(process.Options{Logger: log, Env: defs.Env, LogSize: o.LogSize, ReaderGrace: o.ReaderGrace, StrictUsers: o.StrictUsers})
	so := o.Shell
	so.Processes, so.Logger = pm, log
	sm := shell.New(so)
	opts := server.HandlerOptions(log, defs)
	if len(o.Accounts) > 0 {
		opts = processtest.WithAccounts(opts, o.Accounts)
	}
	shellPath, shellH := shellconnect.New(sm, defs, log).Handler(opts...)
	procPath, procH := procconnect.NewService(pm, defs).Handler(opts...)
	handler, err := server.New(server.Options{Logger: log, Routes: []server.Route{
		{Pattern: shellPath, Handler: shellH},
		{Pattern: procPath, Handler: procH},
	}})
	if err != nil {
		t.Fatalf("build routes: %v", err)
	}
	srv := httptest.NewUnstartedServer(handler)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	t.Cleanup(srv.Close) // runs last
	t.Cleanup(func() {
		CloseAll(t, sm)
		processtest.KillAll(t, pm)
		sm.Cleanup()
	})
	return &Server{URL: srv.URL, Processes: pm, Shells: sm, Defaults: defs}
}

// CloseAll closes every session of m (ended ones included).
func CloseAll(t testing.TB, m *shell.Manager) {
	t.Helper()
	for _, s := range m.List(nil) {
		if err := m.Close(s.ID(), nil); err != nil {
			t.Errorf("close session %s: %v", s.ID(), err)
		}
	}
}

// Client returns a shell client speaking as o says.
func (s *Server) Client(t testing.TB, o processtest.ClientOptions) shellv1connect.ShellServiceClient {
	var opts []connect.ClientOption
	if o.Codec == processtest.JSON {
		opts = append(opts, connect.WithProtoJSON())
	}
	opts = append(opts, connect.WithAcceptCompression("gzip", nil, nil))
	hc := processtest.HTTPClient(t, o.Proto, o.User, o.Header)
	return shellv1connect.NewShellServiceClient(hc, s.URL, opts...)
}

// ProcessClient returns a process client as user (root if "").
func (s *Server) ProcessClient(t testing.TB, user string) processconnect.ProcessClient {
	return processconnect.NewProcessClient(processtest.HTTPClient(t, processtest.HTTP1, user, nil), s.URL)
}

// Result is a command's stream as read.
type Result struct {
	Queued  []*pb.Queued
	Started *pb.Started
	Stdout  []byte
	Stderr  []byte
	PTY     []byte
	End     *pb.End
	// Order is the kinds of the events in order: q, s, o (output), k
	// (keepalive), e.
	Order string
	Err   error
}

func (r Result) String() string {
	return fmt.Sprintf("events %q, stdout %q, stderr %q, pty %q, end %v, err %v", r.Order, r.Stdout, r.Stderr, r.PTY, r.End, r.Err)
}

// Add records one event.
func (r *Result) Add(e *pb.Event) {
	switch ev := e.GetEvent().(type) {
	case *pb.Event_Queued:
		r.Queued = append(r.Queued, ev.Queued)
		r.Order += "q"
	case *pb.Event_Started:
		r.Started = ev.Started
		r.Order += "s"
	case *pb.Event_Output:
		r.Stdout = append(r.Stdout, ev.Output.GetStdout()...)
		r.Stderr = append(r.Stderr, ev.Output.GetStderr()...)
		r.PTY = append(r.PTY, ev.Output.GetPty()...)
		if !strings.HasSuffix(r.Order, "o") {
			r.Order += "o"
		}
	case *pb.Event_Keepalive:
		r.Order += "k"
	case *pb.Event_End:
		r.End = ev.End
		r.Order += "e"
	}
}

// Stream is a Run or Connect stream.
type Stream interface {
	Receive() bool
	Err() error
	Close() error
}

// Read reads a stream to its end; event gives each message's event.
func Read[T any](st interface {
	Stream
	Msg() *T
}, event func(*T) *pb.Event) Result {
	var r Result
	defer st.Close()
	for st.Receive() {
		r.Add(event(st.Msg()))
	}
	r.Err = st.Err()
	return r
}

// Run runs req and reads its stream to the end, within WaitLong.
func Run(t testing.TB, c shellv1connect.ShellServiceClient, req *pb.RunRequest) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitLong)
	defer cancel()
	st, err := c.Run(ctx, connect.NewRequest(req))
	if err != nil {
		return Result{Err: err}
	}
	return Read(st, (*pb.RunResponse).GetEvent)
}

// Create makes a session and returns its id.
func Create(t testing.TB, c shellv1connect.ShellServiceClient, req *pb.CreateRequest) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitShort)
	defer cancel()
	res, err := c.Create(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return res.Msg.GetSession().GetId()
}
