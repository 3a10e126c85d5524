package daemon_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/daemon"
	"github.com/envd-dev/envd/internal/mmds"
)

// fakeMMDS serves the MMDS protocol on loopback; until ready is closed its
// document answers hang (a slow MMDS at boot).
type fakeMMDS struct {
	mu    sync.Mutex
	doc   string
	ready chan struct{}
	srv   *httptest.Server
}

func newFakeMMDS(t *testing.T, doc string) *fakeMMDS {
	t.Helper()
	f := &fakeMMDS{doc: doc, ready: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
			w.Write([]byte("tok"))
		case r.Method == http.MethodGet && r.URL.Path == "/" && r.Header.Get("X-metadata-token") == "tok":
			select {
			case <-f.ready:
			case <-r.Context().Done():
				return
			}
			f.mu.Lock()
			doc := f.doc
			f.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(doc))
		default:
			http.Error(w, "bad request", http.StatusBadRequest)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeMMDS) set(doc string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.doc = doc
}

// TestMMDSBoot: a slow MMDS does not hold /health; once it answers, every
// process gets the sandbox's ids, the log records carry them, and /init
// accepts the published token only, reading the MMDS again each time (a
// resumed sandbox's new token and ids).
func TestMMDSBoot(t *testing.T) {
	f := newFakeMMDS(t, `{"instanceID":"sbx-1","envID":"tpl-1","address":"http://logs.invalid","accessTokenHash":"`+mmds.HashToken("orchestrator-token")+`"}`)
	r := start(t, daemon.Config{MMDSURL: f.srv.URL})
	c := tcpClient(t)
	base := "http://" + r.tcp
	if code, err := getHealth(c, base); err != nil || code != http.StatusNoContent {
		t.Fatalf("/health while the MMDS hangs: %d %v", code, err)
	}
	envs := func() map[string]string {
		t.Helper()
		req, _ := http.NewRequest("GET", base+"/envs", nil)
		req.Header.Set("X-Access-Token", "orchestrator-token")
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var m map[string]string
		json.NewDecoder(res.Body).Decode(&m)
		return m
	}
	if m := envs(); m["E2B_SANDBOX_ID"] != "" {
		t.Fatalf("ids before the MMDS answered: %v", m)
	}
	close(f.ready)
	deadline := time.Now().Add(testTimeout)
	for envs()["E2B_SANDBOX_ID"] != "sbx-1" {
		if time.Now().After(deadline) {
			t.Fatalf("no E2B_SANDBOX_ID after the MMDS answered: %v\n%s", envs(), r.logs)
		}
		time.Sleep(20 * time.Millisecond) // polling the daemon's state, not synchronizing
	}
	if m := envs(); m["E2B_TEMPLATE_ID"] != "tpl-1" {
		t.Errorf("env %v", m)
	}
	init := func(body string) (int, string) {
		t.Helper()
		res, err := c.Post(base+"/init", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := init(`{"accessToken":"sandbox-code-guess"}`); code != 401 || !strings.Contains(body, "MMDS accessTokenHash") {
		t.Errorf("a token other than the published one: %d %s", code, body)
	}
	if code, body := init(`{"accessToken":"orchestrator-token"}`); code != 204 {
		t.Fatalf("the published token: %d %s", code, body)
	}
	// Resumed as another sandbox: a new token and new ids.
	f.set(`{"instanceID":"sbx-2","envID":"tpl-1","accessTokenHash":"` + mmds.HashToken("resumed-token") + `"}`)
	if code, body := init(`{"accessToken":"resumed-token"}`); code != 204 {
		t.Fatalf("the new published token: %d %s", code, body)
	}
	req, _ := http.NewRequest("GET", base+"/envs", nil)
	req.Header.Set("X-Access-Token", "resumed-token")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]string
	json.NewDecoder(res.Body).Decode(&m)
	res.Body.Close()
	if m["E2B_SANDBOX_ID"] != "sbx-2" {
		t.Errorf("ids after a resume: %v", m)
	}
	// The log records from then on carry the ids.
	tagged := false
	r.logs.mu.Lock()
	for _, l := range r.logs.lines {
		if l["sandbox_id"] == "sbx-1" && l["template_id"] == "tpl-1" && l["component"] != nil {
			tagged = true
		}
	}
	r.logs.mu.Unlock()
	if !tagged {
		t.Errorf("no component's log record carries the ids:\n%s", r.logs)
	}
}

// TestMMDSBadURL: a bad -mmds-url fails the start, saying so.
func TestMMDSBadURL(t *testing.T) {
	err := daemon.Run(t.Context(), daemon.Config{Host: "127.0.0.1", NoJupyter: true, MMDSURL: "169.254.169.254"})
	if err == nil || !strings.Contains(err.Error(), `MMDS URL "169.254.169.254": want http://HOST[:PORT]`) {
		t.Fatalf("%v", err)
	}
}
