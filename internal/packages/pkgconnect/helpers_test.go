package pkgconnect_test

import (
	"context"
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"

	pb "github.com/envd-dev/envd/gen/envd/packages/v1"
	"github.com/envd-dev/envd/gen/envd/packages/v1/packagesv1connect"
	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/packages"
	"github.com/envd-dev/envd/internal/packages/pkgconnect"
	"github.com/envd-dev/envd/internal/server"
	"github.com/envd-dev/envd/internal/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// installTimeout bounds one install or removal: a real installer on two
// loaded cores.
const installTimeout = 5 * time.Minute

func testLogger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("PACKAGES_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// serve serves the service over a new Installer with opts, as envd does
// (envd's handler options: the user interceptor, with owner as the
// default user), on an httptest server closed at cleanup.
func serve(t *testing.T, owner *identity.User, opts packages.Options) packagesv1connect.PackageServiceClient {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	if opts.DefaultUser == nil {
		opts.DefaultUser = func() (*identity.User, error) { return owner, nil }
	}
	in := packages.New(opts)
	path, h := pkgconnect.New(in, pkgconnect.Options{Logger: opts.Logger}).Handler(server.HandlerOptions(opts.Logger, defaults.New(owner.Name, nil))...)
	mux := http.NewServeMux()
	mux.Handle(path, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), testutil.Wait)
		defer cancel()
		if err := in.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	hc := srv.Client()
	t.Cleanup(hc.CloseIdleConnections)
	return packagesv1connect.NewPackageServiceClient(hc, srv.URL)
}

// as makes a request of user ("" is the default user).
func as[T any](user string, msg *T) *connect.Request[T] {
	r := connect.NewRequest(msg)
	if user != "" {
		r.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
	return r
}

// outcome is what an Install or Remove stream carried.
type outcome struct {
	started [][]string
	users   []string
	stdout  strings.Builder
	stderr  strings.Builder
	events  int
	done    *pb.Done
	err     error
}

func (o *outcome) add(ev *pb.PackageEvent) {
	o.events++
	switch e := ev.GetEvent().(type) {
	case *pb.PackageEvent_Started:
		o.started = append(o.started, e.Started.GetCommand())
		o.users = append(o.users, e.Started.GetUser())
	case *pb.PackageEvent_Stdout:
		o.stdout.Write(e.Stdout)
	case *pb.PackageEvent_Stderr:
		o.stderr.Write(e.Stderr)
	case *pb.PackageEvent_Done:
		o.done = e.Done
	case *pb.PackageEvent_Keepalive:
		o.events--
	}
}

// changes reads done's changes as "name old->new".
func (o *outcome) changes() []string {
	var out []string
	for _, c := range o.done.GetChanges() {
		out = append(out, c.GetName()+" "+c.GetOldVersion()+"->"+c.GetNewVersion())
	}
	return out
}

func (o *outcome) String() string {
	var b strings.Builder
	for _, c := range o.started {
		b.WriteString("+ " + strings.Join(c, " ") + "\n")
	}
	b.WriteString("stdout: " + o.stdout.String() + "\nstderr: " + o.stderr.String())
	if o.err != nil {
		b.WriteString("\nerror: " + o.err.Error())
	}
	return b.String()
}

// collect reads a stream to its end.
func collect[T any, PT interface {
	*T
	GetEvent() *pb.PackageEvent
}](s *connect.ServerStreamForClient[T], err error) *outcome {
	o := &outcome{}
	if err != nil {
		o.err = err
		return o
	}
	defer s.Close()
	for s.Receive() {
		o.add(PT(s.Msg()).GetEvent())
	}
	o.err = s.Err()
	return o
}

// install runs an Install to its end.
func install(t *testing.T, c packagesv1connect.PackageServiceClient, user string, req *pb.InstallRequest) *outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	return collect(c.Install(ctx, as(user, req)))
}

// remove runs a Remove to its end.
func remove(t *testing.T, c packagesv1connect.PackageServiceClient, user string, req *pb.RemoveRequest) *outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	return collect(c.Remove(ctx, as(user, req)))
}

// list lists what a manager sees.
func list(t *testing.T, c packagesv1connect.PackageServiceClient, user string, req *pb.ListRequest) *pb.ListResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	resp, err := c.List(ctx, as(user, req))
	if err != nil {
		t.Fatalf("list %v: %v", req.GetManager(), err)
	}
	return resp.Msg
}

// find returns the listed packages called name.
func find(l *pb.ListResponse, name string) []*pb.Package {
	var out []*pb.Package
	for _, p := range l.GetPackages() {
		if strings.EqualFold(p.GetName(), name) {
			out = append(out, p)
		}
	}
	return out
}

// ok fails the test unless the operation succeeded.
func ok(t *testing.T, what string, o *outcome) {
	t.Helper()
	if o.err != nil || o.done == nil {
		t.Fatalf("%s: %s", what, o)
	}
}
