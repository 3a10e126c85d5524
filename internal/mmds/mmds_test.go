package mmds_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/quartz"
	"go.uber.org/goleak"

	"github.com/envd-dev/envd/internal/mmds"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitLong turns a hang into a failure; the machine is loaded.
const waitLong = 30 * time.Second

// fake is a fake MMDS: it checks the protocol and serves doc (or what
// serve says).
type fake struct {
	srv   *httptest.Server
	doc   atomic.Value // string
	gets  atomic.Int64
	serve atomic.Value // func(w, r) bool: true when it answered
}

func newFake(t *testing.T, doc string) *fake {
	t.Helper()
	f := &fake{}
	f.doc.Store(doc)
	f.serve.Store(func(http.ResponseWriter, *http.Request) bool { return false })
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.serve.Load().(func(http.ResponseWriter, *http.Request) bool)(w, r) {
			return
		}
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
			if r.Header.Get("X-metadata-token-ttl-seconds") != "60" {
				http.Error(w, "bad ttl", http.StatusBadRequest)
				return
			}
			w.Write([]byte("session-token"))
		case r.Method == http.MethodGet && r.URL.Path == "/":
			f.gets.Add(1)
			if r.Header.Get("X-metadata-token") != "session-token" {
				http.Error(w, "no token", http.StatusUnauthorized)
				return
			}
			if r.Header.Get("Accept") != "application/json" {
				w.Header().Set("Content-Type", "text/plain")
				w.Write([]byte("instanceID\nenvID\n"))
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(f.doc.Load().(string)))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func client(t *testing.T, url string, o mmds.Options) *mmds.Client {
	t.Helper()
	c, err := mmds.New(url, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestGet(t *testing.T) {
	t.Parallel()
	hash := mmds.HashToken("tok")
	f := newFake(t, `{"instanceID":"sbx-1","envID":"tpl-2","address":"http://logs","accessTokenHash":"`+hash+`","extra":{"x":1}}`)
	c := client(t, f.srv.URL, mmds.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	m, err := c.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := mmds.Metadata{SandboxID: "sbx-1", TemplateID: "tpl-2", LogsAddress: "http://logs", AccessTokenHash: hash}
	if m != want || !m.Ready() {
		t.Errorf("got %+v, want %+v", m, want)
	}
	if ok, err := mmds.MatchToken(m.AccessTokenHash, "tok"); !ok || err != nil {
		t.Errorf("the token does not match its hash: %v %v", ok, err)
	}
	if ok, err := mmds.MatchToken(m.AccessTokenHash, "other"); ok || err != nil {
		t.Errorf("another token matches: %v %v", ok, err)
	}
	if _, err := mmds.MatchToken("abc", "tok"); !errors.Is(err, mmds.ErrBadHash) {
		t.Errorf("a short hash: %v", err)
	}
	if _, err := mmds.MatchToken(strings.Repeat("zz", 64), "tok"); !errors.Is(err, mmds.ErrBadHash) {
		t.Errorf("a hash that is not hex: %v", err)
	}
	// Upper case hex is the same digest.
	if ok, _ := mmds.MatchToken(strings.ToUpper(hash), "tok"); !ok {
		t.Error("upper case hex does not match")
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "169.254.169.254", "ftp://x", "http://", "http://x/?a=1", "http://u:p@x", "://"} {
		if _, err := mmds.New(u, mmds.Options{}); err == nil || !strings.Contains(err.Error(), "MMDS URL") {
			t.Errorf("New(%q): %v", u, err)
		}
	}
	c, err := mmds.New("http://127.0.0.1:1/", mmds.Options{})
	if err != nil || c.URL() != "http://127.0.0.1:1" {
		t.Errorf("%v %v", c, err)
	}
}

// TestBadAnswers: every way an MMDS can answer badly is an error that says
// what was wrong, within the timeout.
func TestBadAnswers(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	tests := []struct {
		name  string
		serve func(w http.ResponseWriter, r *http.Request) bool
		doc   string
		want  string
	}{
		{name: "html", want: "Content-Type \"text/html; charset=utf-8\", want application/json", serve: func(w http.ResponseWriter, r *http.Request) bool {
			if r.Method != http.MethodGet {
				return false
			}
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write([]byte("<html><body>hello</body></html>"))
			return true
		}},
		{name: "html without a type", want: "not a JSON object", serve: func(w http.ResponseWriter, r *http.Request) bool {
			if r.Method != http.MethodGet {
				return false
			}
			w.Header()["Content-Type"] = nil
			w.Write([]byte("<html><body>hello</body></html>"))
			return true
		}},
		{name: "500", want: `GET /: 500 Internal Server Error "boom"`, serve: func(w http.ResponseWriter, r *http.Request) bool {
			if r.Method != http.MethodGet {
				return false
			}
			http.Error(w, "boom", http.StatusInternalServerError)
			return true
		}},
		{name: "token refused", want: "MMDS session token: PUT /latest/api/token: 405 Method Not Allowed", serve: func(w http.ResponseWriter, r *http.Request) bool {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return true
		}},
		{name: "empty token", want: "MMDS session token: empty answer", serve: func(w http.ResponseWriter, r *http.Request) bool {
			return r.Method == http.MethodPut
		}},
		{name: "token with a newline", want: "not a header value", serve: func(w http.ResponseWriter, r *http.Request) bool {
			if r.Method != http.MethodPut {
				return false
			}
			w.Write([]byte("a\nb"))
			return true
		}},
		{name: "huge token", want: "over the 4096-byte limit", serve: func(w http.ResponseWriter, r *http.Request) bool {
			if r.Method != http.MethodPut {
				return false
			}
			w.Write([]byte(strings.Repeat("t", 1<<20)))
			return true
		}},
		{name: "huge document, sized", want: "over the 65536-byte limit", doc: `{"instanceID":"` + strings.Repeat("x", 1<<20) + `","envID":"e"}`},
		{name: "huge document, chunked", want: "answer over the 65536-byte limit", serve: func(w http.ResponseWriter, r *http.Request) bool {
			if r.Method != http.MethodGet {
				return false
			}
			w.Header().Set("Content-Type", "application/json")
			for range 100 {
				w.Write([]byte(strings.Repeat(" ", 1<<10)))
				w.(http.Flusher).Flush()
			}
			return true
		}},
		{name: "slow", want: "Client.Timeout exceeded", serve: func(w http.ResponseWriter, r *http.Request) bool {
			if r.Method != http.MethodGet {
				return false
			}
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return true
		}},
		{name: "redirect", want: "302 Found", serve: func(w http.ResponseWriter, r *http.Request) bool {
			if r.Method != http.MethodGet {
				return false
			}
			http.Redirect(w, r, "http://example.invalid/", http.StatusFound)
			return true
		}},
		{name: "array", doc: `["instanceID"]`, want: "not a JSON object"},
		{name: "id not a string", doc: `{"instanceID":12}`, want: "instanceID is not a string"},
		{name: "id with a NUL", doc: `{"instanceID":"a\u0000b"}`, want: `instanceID holds the control character '\x00'`},
		{name: "id with a newline", doc: `{"envID":"a\nb","instanceID":"x"}`, want: `envID holds the control character '\n'`},
		{name: "id too long", doc: `{"instanceID":"` + strings.Repeat("i", 257) + `"}`, want: "instanceID is 257 bytes long, over the 256-byte limit"},
		{name: "hash not a string", doc: `{"instanceID":"x","accessTokenHash":true}`, want: "accessTokenHash is not a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			doc := tt.doc
			if doc == "" {
				doc = `{"instanceID":"sbx"}`
			}
			f := newFake(t, doc)
			if tt.serve != nil {
				f.serve.Store(tt.serve)
			}
			// The timeout is what ends the slow case; the others answer at once.
			c := client(t, f.srv.URL, mmds.Options{Timeout: time.Second})
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			m, err := c.Get(ctx)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %+v, %v; want an error with %q", m, err, tt.want)
			}
		})
	}
}

func TestPoll(t *testing.T) {
	t.Parallel()
	// Not ready at first (no instanceID), then failing, then ready: Poll
	// goes on until it is.
	f := newFake(t, `{"envID":"tpl"}`)
	var failures, calls atomic.Int64
	f.serve.Store(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodGet {
			return false
		}
		switch n := calls.Add(1); {
		case n <= 2:
			return false // the document without an instanceID
		case n == 3:
			http.Error(w, "not yet", http.StatusServiceUnavailable)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"instanceID":"sbx","envID":"tpl"}`))
		}
		return true
	})
	c := client(t, f.srv.URL, mmds.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	var msgs []string
	m, err := c.Poll(ctx, mmds.Backoff{First: time.Millisecond, Max: 5 * time.Millisecond, Factor: 2}, func(n int, err error) {
		failures.Add(1)
		msgs = append(msgs, err.Error())
	})
	if err != nil {
		t.Fatal(err)
	}
	if m.SandboxID != "sbx" || m.TemplateID != "tpl" {
		t.Errorf("%+v", m)
	}
	if failures.Load() < 3 {
		t.Errorf("failures %d: %q", failures.Load(), msgs)
	}
	if !strings.Contains(strings.Join(msgs, "|"), "no instanceID yet") || !strings.Contains(strings.Join(msgs, "|"), "503") {
		t.Errorf("failures %q", msgs)
	}
}

func TestPollCancelled(t *testing.T) {
	t.Parallel()
	f := newFake(t, `{}`) // never ready
	c := client(t, f.srv.URL, mmds.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	attempts := make(chan int, 100)
	done := make(chan error, 1)
	go func() {
		_, err := c.Poll(ctx, mmds.Backoff{First: time.Millisecond, Max: time.Millisecond, Factor: 2}, func(n int, err error) {
			select {
			case attempts <- n:
			default:
			}
		})
		done <- err
	}()
	// Let it fail twice, then stop it.
	for range 2 {
		select {
		case <-attempts:
		case <-time.After(waitLong):
			t.Fatal("no attempt")
		}
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "no instanceID yet") {
			t.Errorf("%v", err)
		}
	case <-time.After(waitLong):
		t.Fatal("Poll did not return once cancelled")
	}
}

// TestPollClock: Poll waits on its client's clock, DefaultBackoff's
// schedule spread by a tenth, and ends as soon as its context does.
func TestPollClock(t *testing.T) {
	t.Parallel()
	f := newFake(t, `{}`) // never ready
	clk := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
	trap := clk.Trap().NewTimer("mmds", "poll")
	defer trap.Close()
	c := client(t, f.srv.URL, mmds.Options{Clock: clk})
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	pctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := c.Poll(pctx, mmds.DefaultBackoff, nil)
		done <- err
	}()
	var d time.Duration
	for i := range 4 {
		d = mmds.DefaultBackoff.Next(d)
		call := trap.MustWait(ctx)
		if lo, hi := d-d/20, d+d/20; call.Duration < lo || call.Duration >= hi {
			t.Fatalf("wait %d: %v, not in [%v, %v)", i+1, call.Duration, lo, hi)
		}
		call.MustRelease(ctx)
		if got := f.gets.Load(); got != int64(i+1) {
			t.Fatalf("%d attempts before wait %d", got, i+1)
		}
		if i < 3 {
			clk.Advance(call.Duration).MustWait(ctx)
		}
	}
	stop()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "no instanceID yet") {
			t.Errorf("%v", err)
		}
	case <-ctx.Done():
		t.Fatal("Poll did not return once cancelled")
	}
	if n := f.gets.Load(); n != 4 {
		t.Errorf("%d attempts, want 4", n)
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	b := mmds.DefaultBackoff
	var got []time.Duration
	var d time.Duration
	for range 12 {
		d = b.Next(d)
		got = append(got, d)
	}
	if got[0] != 50*time.Millisecond || got[1] != 75*time.Millisecond || got[len(got)-1] != 2*time.Second {
		t.Errorf("schedule %v", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			t.Errorf("schedule shrinks: %v", got)
		}
	}
}

func TestHashToken(t *testing.T) {
	t.Parallel()
	// SHA-512 of "" and of "abc", as every implementation gives them.
	if got := mmds.HashToken(""); got != "cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e" {
		t.Errorf("HashToken(\"\") = %s", got)
	}
	if got := mmds.HashToken("abc"); !strings.HasPrefix(got, "ddaf35a193617aba") {
		t.Errorf("HashToken(abc) = %s", got)
	}
}
