package interpreter_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/interpreter"
	"github.com/envd-dev/envd/internal/interpreter/codehttp"
	"github.com/envd-dev/envd/internal/server"
	"github.com/envd-dev/envd/internal/testutil"
)

// line is one NDJSON line of /execute, fields kept raw.
type line map[string]json.RawMessage

func (l line) str(key string) string {
	var s string
	_ = json.Unmarshal(l[key], &s)
	return s
}

func (l line) typ() string { return l.str("type") }

type errLine struct{ Name, Value, Traceback string }

// execResult is what an /execute stream carried.
type execResult struct {
	lines      []line
	raw        []string
	count      int
	stdout     []string
	stderr     []string
	results    []line
	errors     []errLine
	keepalives int
}

func (r *execResult) out() string { return strings.Join(r.stdout, "") }
func (r *execResult) err() string { return strings.Join(r.stderr, "") }

// text is the text of the main result ("" if none).
func (r *execResult) text() string {
	for _, res := range r.results {
		if string(res["is_main_result"]) == "true" {
			return res.str("text")
		}
	}
	return ""
}

// types lists the lines' types, adjacent stdout (or stderr) lines as one:
// the kernel flushes its streams on a timer, so one print can arrive as
// two lines ("one", then "\n").
func (r *execResult) types() []string {
	var out []string
	for _, l := range r.lines {
		typ := l.typ()
		if n := len(out); n > 0 && (typ == "stdout" || typ == "stderr") && out[n-1] == typ {
			continue
		}
		out = append(out, typ)
	}
	return out
}

func (r *execResult) lastError() *errLine {
	if len(r.errors) == 0 {
		return nil
	}
	return &r.errors[len(r.errors)-1]
}

// mustOK fails unless the execution raised nothing.
func (r *execResult) mustOK(t testing.TB) *execResult {
	t.Helper()
	if len(r.errors) > 0 {
		t.Fatalf("execution raised %+v; stdout %q stderr %q", r.errors, r.out(), r.err())
	}
	return r
}

// execute posts body to /execute and reads the whole stream, checking the
// framing: every line ASCII-only, non-empty, a JSON object with a type,
// end_of_execution last and only there.
func execute(t testing.TB, body any) *execResult {
	t.Helper()
	return executeAt(t, shared.srv.URL, body)
}

// executeAt is execute on the API at base.
func executeAt(t testing.TB, base string, body any) *execResult {
	t.Helper()
	ctx := testutil.Context(t, execTimeout)
	resp := doAt(t, ctx, base, http.MethodPost, "/execute", body)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST /execute %s: %d %s", short(string(mustMarshal(t, body))), resp.StatusCode, b)
	}
	return readStream(t, resp.Body)
}

func readStream(t testing.TB, body io.Reader) *execResult {
	t.Helper()
	r := &execResult{}
	br := bufio.NewReaderSize(body, 1<<20)
	ended := false
	for {
		raw, err := br.ReadBytes('\n')
		if len(raw) > 0 && !bytes.HasSuffix(raw, []byte("\n")) {
			t.Fatalf("stream ended inside a line: %q", short(string(raw)))
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read stream: %v (lines so far: %v)", err, r.types())
		}
		if ended {
			t.Fatalf("line after end_of_execution: %q", raw)
		}
		text := strings.TrimSuffix(string(raw), "\n")
		if text == "" {
			t.Fatal("blank line in the stream")
		}
		for i := 0; i < len(text); i++ {
			if text[i] >= 0x80 || (text[i] < 0x20) {
				t.Fatalf("non-ASCII or control byte %#x in line %q", text[i], short(text))
			}
		}
		var l line
		if err := json.Unmarshal([]byte(text), &l); err != nil {
			t.Fatalf("line is not a JSON object: %v: %q", err, short(text))
		}
		if l.typ() == "keepalive" {
			// Anywhere a silence lasts: counted, not listed.
			r.keepalives++
			continue
		}
		r.lines = append(r.lines, l)
		r.raw = append(r.raw, text)
		switch l.typ() {
		case "number_of_executions":
			_ = json.Unmarshal(l["execution_count"], &r.count)
		case "stdout":
			r.stdout = append(r.stdout, l.str("text"))
			if l.str("timestamp") == "" {
				t.Errorf("stdout line without timestamp: %s", text)
			}
		case "stderr":
			r.stderr = append(r.stderr, l.str("text"))
		case "result":
			r.results = append(r.results, l)
			if _, ok := l["extra"]; !ok {
				t.Errorf("result without extra: %s", short(text))
			}
		case "error":
			r.errors = append(r.errors, errLine{l.str("name"), l.str("value"), l.str("traceback")})
		case "end_of_execution":
			ended = true
		default:
			t.Fatalf("unknown line type: %q", text)
		}
	}
	if !ended {
		t.Fatalf("stream ended without end_of_execution: %v", r.types())
	}
	return r
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	if s, ok := v.(string); ok {
		return []byte(s)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// postJSON posts body (a string is sent as is) to the shared API.
func postJSON(t testing.TB, ctx context.Context, path string, body any) *http.Response {
	t.Helper()
	return do(t, ctx, http.MethodPost, path, body)
}

func do(t testing.TB, ctx context.Context, method, path string, body any) *http.Response {
	t.Helper()
	return doAt(t, ctx, shared.srv.URL, method, path, body)
}

func doAt(t testing.TB, ctx context.Context, base, method, path string, body any) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(mustMarshal(t, body))
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// call does a non-streaming request and returns status and body.
func call(t testing.TB, method, path string, body any) (int, string) {
	t.Helper()
	return callAt(t, shared.srv.URL, method, path, body)
}

// callAt is call on the API at base.
func callAt(t testing.TB, base, method, path string, body any) (int, string) {
	t.Helper()
	resp := doAt(t, testutil.Context(t, kernelTimeout), base, method, path, body)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// run executes code in a context ("" = the default Python one).
func run(t testing.TB, contextID, code string) *execResult {
	t.Helper()
	body := map[string]any{"code": code}
	if contextID != "" {
		body["context_id"] = contextID
	}
	return execute(t, body)
}

// newContext creates a context through the API and removes it at cleanup.
func newContext(t testing.TB, language, cwd string) interpreter.ContextInfo {
	t.Helper()
	body := map[string]any{}
	if language != "" {
		body["language"] = language
	}
	if cwd != "" {
		body["cwd"] = cwd
	}
	status, out := call(t, http.MethodPost, "/contexts", body)
	if status != http.StatusOK {
		t.Fatalf("POST /contexts %v: %d %s", body, status, out)
	}
	var c interpreter.ContextInfo
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		t.Fatalf("decode context %q: %v", out, err)
	}
	t.Cleanup(func() { removeContext(t, c.ID) })
	return c
}

func removeContext(t testing.TB, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = shared.eng.RemoveContext(ctx, id)
}

// serveHTTP serves the HTTP API over eng on a server of its own, closed at
// cleanup, and returns its base URL.
func serveHTTP(t testing.TB, eng *interpreter.Engine, opts codehttp.Options) string {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	if opts.Keepalive == 0 {
		opts.Keepalive = testKeepalive
	}
	api := codehttp.New(eng, opts)
	h, err := server.New(server.Options{Logger: testLogger(), Routes: append(api.Routes(), api.HealthRoute())})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL
}
