package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/envd-dev/envd/internal/auth"
	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/httpapi"
	"github.com/envd-dev/envd/internal/server"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitShort bounds what should take well under a second, generously: the
// suite runs with -race on two shared cores.
const waitShort = 15 * time.Second

// env serves the real HTTP API (with envd's middleware) on a test server.
type env struct {
	url   string
	token *auth.Token
	defs  *defaults.Defaults
	files *filesystem.Files
	hc    *http.Client
	clock *fakeClock
}

type fakeClock struct {
	set []time.Time
}

func (c *fakeClock) Set(t time.Time) error {
	c.set = append(c.set, t)
	return nil
}

type envOpts struct {
	syncClock bool
	now       func() time.Time
	strict    bool // filesystem.Options.StrictUsers
	boot      httpapi.BootMetadata
	mounter   httpapi.Mounter
	hooks     *httpapi.Hooks // their routes too, and /init resumes through them
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("these tests act as other users: run them as root")
	}
	log := slog.New(slog.DiscardHandler)
	e := &env{token: &auth.Token{}, defs: defaults.New("user", map[string]string{"E2B_SANDBOX": "true"}), clock: &fakeClock{}}
	e.files = filesystem.New(filesystem.Options{Logger: log, StrictUsers: o.strict})
	ao := httpapi.Options{Logger: log, Files: e.files, Defaults: e.defs, Token: e.token, Version: "9.8.7", Now: o.now,
		Boot: o.boot, Mounter: o.mounter}
	if o.syncClock {
		ao.SetClock = e.clock.Set
	}
	routes := []server.Route{}
	if o.hooks != nil {
		ao.Resume = o.hooks.Resume
		routes = append(routes, o.hooks.Routes()...)
	}
	h, err := server.New(server.Options{Logger: log, Token: e.token, Routes: append(routes, httpapi.New(ao).Routes()...)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	tr := &http.Transport{DisableCompression: true}
	e.hc = &http.Client{Transport: tr}
	e.url = srv.URL
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
		e.files.Close()
	})
	return e
}

type response struct {
	status int
	header http.Header
	body   string
}

// do sends a request; query is added to the URL.
func (e *env) do(t *testing.T, method, path string, query url.Values, header http.Header, body io.Reader) response {
	t.Helper()
	u := e.url + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := e.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: string(b)}
}

// wantError checks the HTTP API's error shape.
func wantError(t *testing.T, r response, status int, subs ...string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d (%s), want %d", r.status, r.body, status)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	var body struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal([]byte(r.body), &body); err != nil {
		t.Fatalf("error body %q: %v", r.body, err)
	}
	if body.Code != status {
		t.Errorf("body code %d, want %d", body.Code, status)
	}
	for _, s := range subs {
		if !strings.Contains(body.Message, s) {
			t.Errorf("message %q lacks %q", body.Message, s)
		}
	}
}

type part struct {
	field, filename, content string
}

func multipartBody(t *testing.T, parts ...part) (string, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := make(map[string][]string)
		cd := `form-data; name="` + p.field + `"`
		if p.filename != "" {
			cd += `; filename="` + p.filename + `"`
		}
		h["Content-Disposition"] = []string{cd}
		h["Content-Type"] = []string{"application/octet-stream"}
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, p.content)
	}
	mw.Close()
	return mw.FormDataContentType(), &buf
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// noTemp fails if an upload's temporary file is left in dir.
func noTemp(t *testing.T, dir string) {
	t.Helper()
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		if filesystem.IsTemp(de.Name()) {
			t.Errorf("temporary file left behind: %s", de.Name())
		}
	}
}

func q(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}
