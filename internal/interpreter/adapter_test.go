package interpreter_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/envd-dev/envd/internal/auth"
	"github.com/envd-dev/envd/internal/interpreter/codehttp"
	"github.com/envd-dev/envd/internal/server"
)

func writeFile(p string) error { return os.WriteFile(p, []byte("x"), 0o644) }

// With -no-jupyter every code route answers 503 and says why.
func TestDisabled(t *testing.T) {
	t.Parallel()
	api := codehttp.New(nil, codehttp.Options{Logger: testLogger()})
	h, err := server.New(server.Options{Logger: testLogger(), Routes: append(api.Routes(), api.HealthRoute())})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	for _, r := range [][2]string{
		{"GET", "/health"}, {"POST", "/execute"}, {"GET", "/contexts"}, {"POST", "/contexts"},
		{"DELETE", "/contexts/x"}, {"POST", "/contexts/x/restart"}, {"GET", "/languages"},
	} {
		req, _ := http.NewRequest(r[0], srv.URL+r[1], strings.NewReader(`{"code": "1"}`))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 503 || !strings.Contains(string(b), "-no-jupyter") {
			t.Errorf("%s %s: %d %s", r[0], r[1], resp.StatusCode, b)
		}
	}
}

// The access token is checked as on the main port; /health is public.
func TestAccessToken(t *testing.T) {
	t.Parallel()
	tok := &auth.Token{}
	tok.Set("secret")
	api := codehttp.New(shared.eng, codehttp.Options{Logger: testLogger()})
	h, err := server.New(server.Options{Logger: testLogger(), Token: tok, Routes: append(api.Routes(), api.HealthRoute())})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	try := func(method, path, token string) int {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(`{"code": 1}`))
		if token != "" {
			req.Header.Set("X-Access-Token", token)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := try("POST", "/execute", ""); s != 401 {
		t.Errorf("no token: %d", s)
	}
	if s := try("POST", "/execute", "wrong"); s != 401 {
		t.Errorf("wrong token: %d", s)
	}
	if s := try("POST", "/execute", "secret"); s != 422 { // past the token check
		t.Errorf("right token: %d", s)
	}
	if s := try("GET", "/contexts", ""); s != 401 {
		t.Errorf("contexts without token: %d", s)
	}
	if s := try("GET", "/health", ""); s != 200 {
		t.Errorf("health without token: %d", s)
	}
}
