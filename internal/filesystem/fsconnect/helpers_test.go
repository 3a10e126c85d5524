package fsconnect_test

import (
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"

	pb "github.com/envd-dev/envd/gen/filesystem"
	"github.com/envd-dev/envd/gen/filesystem/filesystemconnect"
	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/filesystem/fsconnect"
	"github.com/envd-dev/envd/internal/server"
	"github.com/envd-dev/envd/internal/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Bounds of waits, generous: the suite runs with -race on two cores
// shared with other work. They are limits, never the expected time.
const (
	waitShort = 15 * time.Second
	waitLong  = 60 * time.Second
)

// env is the real filesystem service served over HTTP, with clients acting
// as root, as `user` and as the default user (`user`).
type env struct {
	url    string
	files  *filesystem.Files
	defs   *defaults.Defaults
	root   filesystemconnect.FilesystemClient
	user   filesystemconnect.FilesystemClient
	anyone filesystemconnect.FilesystemClient // no Authorization: the default user
	hc     *http.Client
}

func newEnv(t *testing.T, o filesystem.Options) *env {
	t.Helper()
	requireRoot(t)
	o.Logger = slog.New(slog.DiscardHandler)
	files := filesystem.New(o)
	defs := defaults.New("user", nil)
	path, h := fsconnect.NewService(files, defs).Handler(server.HandlerOptions(o.Logger, defs)...)
	hh, err := server.New(server.Options{Logger: o.Logger, Routes: []server.Route{{Pattern: path, Handler: h}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(hh)
	tr := &http.Transport{}
	hc := &http.Client{Transport: tr}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
		files.Close()
	})
	e := &env{url: srv.URL, files: files, defs: defs, hc: hc}
	e.root = e.client("root")
	e.user = e.client("user")
	e.anyone = e.client("")
	return e
}

// client talks JSON, as the JS SDK does, as the given user ("" sends no
// Authorization header).
func (e *env) client(user string) filesystemconnect.FilesystemClient {
	var opts []connect.ClientOption
	opts = append(opts, connect.WithProtoJSON())
	if user != "" {
		opts = append(opts, connect.WithInterceptors(basicAuth(user)))
	}
	return filesystemconnect.NewFilesystemClient(e.hc, e.url, opts...)
}

type basicAuth string

func (b basicAuth) header() string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(string(b)+":"))
}

func (b basicAuth) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", b.header())
		return next(ctx, req)
	}
}

func (b basicAuth) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", b.header())
		return conn
	}
}

func (b basicAuth) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("these tests act as other users: run them as root")
	}
}

// wantErr checks err's Connect code and that its message has every sub.
func wantErr(t *testing.T, err error, code connect.Code, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", code)
	}
	if got := connect.CodeOf(err); got != code {
		t.Fatalf("code %v (%v), want %v", got, err, code)
	}
	var ce *connect.Error
	msg := err.Error()
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	for _, s := range subs {
		if !strings.Contains(msg, s) {
			t.Errorf("message %q lacks %q", msg, s)
		}
	}
}

func stat(t *testing.T, c filesystemconnect.FilesystemClient, p string) *pb.EntryInfo {
	t.Helper()
	res, err := c.Stat(testutil.Context(t, waitLong), connect.NewRequest(&pb.StatRequest{Path: p}))
	if err != nil {
		t.Fatalf("stat %s: %v", p, err)
	}
	return res.Msg.GetEntry()
}

func names(es []*pb.EntryInfo, root string) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = strings.TrimPrefix(e.GetPath(), root+"/")
	}
	return out
}
