package daemon_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/daemon"
	"github.com/envd-dev/envd/internal/mmds"
	"github.com/envd-dev/envd/internal/testutil"
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

// fakeCollector is a logs collector on loopback: it keeps the records POSTed
// to /logs, one JSON object each.
type fakeCollector struct {
	mu   sync.Mutex
	recs []map[string]any
	bad  []string // requests that were not one record
	srv  *httptest.Server
}

func newFakeCollector(t *testing.T) *fakeCollector {
	t.Helper()
	c := &fakeCollector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var rec map[string]any
		err := json.Unmarshal(body, &rec)
		c.mu.Lock()
		if err != nil || r.Method != http.MethodPost || r.URL.Path != "/logs" || r.Header.Get("Content-Type") != "application/json" {
			c.bad = append(c.bad, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type")+" "+string(body))
		} else {
			c.recs = append(c.recs, rec)
		}
		c.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// find returns the records whose message is msg.
func (c *fakeCollector) find(msg string) []map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []map[string]any
	for _, r := range c.recs {
		if r["message"] == msg {
			out = append(out, r)
		}
	}
	return out
}

func (c *fakeCollector) count() (recs, bad int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.recs), len(c.bad)
}

// TestMMDSShipsLogs: with ShipLogs, envd's records go to the address the
// MMDS publishes, each with the sandbox's ids in upstream's fields: those
// logged before the MMDS answered ("envd started") once it has, and the
// last of the shutdown ("envd stopped") before Run returns.
func TestMMDSShipsLogs(t *testing.T) {
	c := newFakeCollector(t)
	f := newFakeMMDS(t, `{"instanceID":"sbx-logs","envID":"tpl-logs","address":"`+c.srv.URL+`/logs"}`)
	r := start(t, daemon.Config{MMDSURL: f.srv.URL, ShipLogs: true})
	close(f.ready)
	for _, msg := range []string{"envd started", "boot metadata from the MMDS"} {
		testutil.Poll(t, "the record "+strconv.Quote(msg)+" at the collector", func() bool { return len(c.find(msg)) > 0 })
	}
	if _, err := r.stop(t, testTimeout); err != nil {
		t.Fatal(err)
	}
	for _, msg := range []string{"envd started", "boot metadata from the MMDS", "envd stopped"} {
		got := c.find(msg)
		if len(got) != 1 {
			t.Errorf("%d records %q at the collector; want 1\nenvd's log:\n%s", len(got), msg, r.logs)
			continue
		}
		rec := got[0]
		if rec["instanceID"] != "sbx-logs" || rec["envID"] != "tpl-logs" || rec["level"] != "info" || rec["timestamp"] == nil {
			t.Errorf("record %v", rec)
		}
		// The ids once, in upstream's fields: not slogtag's too.
		if _, ok := rec["sandbox_id"]; ok {
			t.Errorf("record with the ids twice: %v", rec)
		}
	}
	if got := c.find("boot metadata from the MMDS"); len(got) == 1 && got[0]["logger"] != "mmds" {
		t.Errorf("logger of %v; want mmds", got[0])
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bad) > 0 {
		t.Errorf("requests that are not one record each: %q", c.bad)
	}
	for _, rec := range c.recs {
		if rec["logger"] == "logship" {
			t.Errorf("the shipper's own record shipped: %v", rec)
		}
	}
}

// TestMMDSNoShipLogs: without ShipLogs, nothing goes to the logs address.
func TestMMDSNoShipLogs(t *testing.T) {
	c := newFakeCollector(t)
	f := newFakeMMDS(t, `{"instanceID":"sbx-logs","envID":"tpl-logs","address":"`+c.srv.URL+`/logs"}`)
	r := start(t, daemon.Config{MMDSURL: f.srv.URL})
	close(f.ready)
	testutil.Poll(t, "the boot metadata applied", func() bool { return strings.Contains(r.logs.String(), "boot metadata from the MMDS") })
	if _, err := r.stop(t, testTimeout); err != nil {
		t.Fatal(err)
	}
	if recs, bad := c.count(); recs+bad != 0 {
		t.Errorf("%d requests to the logs address without ShipLogs", recs+bad)
	}
}

// TestRunDir: as upstream in /run/e2b, envd writes .E2B_SANDBOX at start and
// the sandbox's ids once the MMDS names them, for code in the sandbox to
// read; never through a link, and never into a directory others can change.
func TestRunDir(t *testing.T) {
	read := func(dir, name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	t.Run("files", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "e2b") // made by envd
		// A link planted where an id goes is replaced, its target untouched.
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(t.TempDir(), "target")
		if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, ".E2B_SANDBOX_ID")); err != nil {
			t.Fatal(err)
		}
		f := newFakeMMDS(t, `{"instanceID":"sbx-run","envID":"tpl-run"}`)
		start(t, daemon.Config{MMDSURL: f.srv.URL, RunDir: dir})
		if got := read(dir, ".E2B_SANDBOX"); got != "true" {
			t.Errorf(".E2B_SANDBOX = %q, want true", got)
		}
		close(f.ready)
		testutil.Poll(t, "the ids in the run directory", func() bool {
			return read(dir, ".E2B_SANDBOX_ID") == "sbx-run" && read(dir, ".E2B_TEMPLATE_ID") == "tpl-run"
		})
		if got := read(target, ""); got != "keep" {
			t.Errorf("the link's target became %q", got)
		}
		fi, err := os.Lstat(filepath.Join(dir, ".E2B_SANDBOX_ID"))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o444 {
			t.Errorf(".E2B_SANDBOX_ID: %v %v, want a regular file, mode 0444", fi, err)
		}
	})
	t.Run("not a sandbox", func(t *testing.T) {
		dir := t.TempDir()
		start(t, daemon.Config{RunDir: dir, NotFirecracker: true})
		if got := read(dir, ".E2B_SANDBOX"); got != "false" {
			t.Errorf(".E2B_SANDBOX = %q, want false", got)
		}
	})
	t.Run("refused", func(t *testing.T) {
		real := t.TempDir()
		link := filepath.Join(t.TempDir(), "link")
		if err := os.Symlink(real, link); err != nil {
			t.Fatal(err)
		}
		open := t.TempDir()
		if err := os.Chmod(open, 0o777); err != nil {
			t.Fatal(err)
		}
		for _, dir := range []string{link, open} {
			r := start(t, daemon.Config{RunDir: dir})
			if _, err := os.Lstat(filepath.Join(real, ".E2B_SANDBOX")); err == nil {
				t.Errorf("envd wrote through the link %s", link)
			}
			if _, err := os.Lstat(filepath.Join(open, ".E2B_SANDBOX")); err == nil {
				t.Errorf("envd wrote into %s, which everyone can change", open)
			}
			if !strings.Contains(r.logs.String(), "cannot write the run directory's sandbox file") {
				t.Errorf("envd did not say it refused %s:\n%s", dir, r.logs)
			}
		}
	})
}
