package filesystem_test

import (
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"

	pb "github.com/envd-dev/envd/gen/filesystem"
	"github.com/envd-dev/envd/gen/filesystem/filesystemconnect"
	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/server"
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
	path, h := filesystem.NewService(files, defs).Handler(server.HandlerOptions(o.Logger, defs)...)
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

func lookup(t *testing.T, name string) *identity.User {
	t.Helper()
	u, err := identity.Lookup(name)
	if err != nil {
		t.Fatalf("account %q is missing (scripts/install-deps.sh creates it): %v", name, err)
	}
	return u
}

// workdir is a fresh directory everybody may write (as /tmp), whose parent
// lets everybody through.
func workdir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// private is a fresh 0700 directory of root's, inside a dir users can reach.
func private(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(workdir(t), "private")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

func write(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func ownerOf(t *testing.T, p string) uint32 {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Uid
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
	res, err := c.Stat(ctx(t), connect.NewRequest(&pb.StatRequest{Path: p}))
	if err != nil {
		t.Fatalf("stat %s: %v", p, err)
	}
	return res.Msg.GetEntry()
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), waitLong)
	t.Cleanup(cancel)
	return c
}

func names(es []*pb.EntryInfo, root string) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = strings.TrimPrefix(e.GetPath(), root+"/")
	}
	return out
}
