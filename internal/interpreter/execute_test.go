package interpreter_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/internal/interpreter"
	"github.com/envd-dev/envd/internal/interpreter/codehttp"
	"github.com/envd-dev/envd/internal/testutil"
)

func TestStateAcrossRuns(t *testing.T) {
	t.Parallel()
	c := newContext(t, "", "")
	first := run(t, c.ID, "x = 1").mustOK(t)
	second := run(t, c.ID, "x += 1; x").mustOK(t)
	if got := second.text(); got != "2" {
		t.Fatalf("x: %q, want 2", got)
	}
	// Internal executions (cwd, env) are silent: they do not count.
	if first.count != 1 || second.count != 2 {
		t.Errorf("execution counts %d, %d; want 1, 2", first.count, second.count)
	}
	if len(first.results) != 0 {
		t.Errorf("an assignment gave results: %v", first.raw)
	}
}

func TestDefaultContextAliases(t *testing.T) {
	t.Parallel()
	name := fmt.Sprintf("v_%d", time.Now().UnixNano())
	run(t, "", name+" = 41").mustOK(t)
	// No language, language python and the "default" alias share a kernel.
	if got := execute(t, map[string]any{"code": name + " + 1", "language": "python"}).mustOK(t).text(); got != "42" {
		t.Errorf("language python: %q", got)
	}
	if got := execute(t, map[string]any{"code": name, "context_id": "default"}).mustOK(t).text(); got != "41" {
		t.Errorf("context default: %q", got)
	}
	if got := execute(t, map[string]any{"code": name, "language": " PYTHON ", "context_id": nil, "env_vars": nil}).mustOK(t).text(); got != "41" {
		t.Errorf("nulls and a spaced language: %q", got)
	}
}

func TestStreamingOrder(t *testing.T) {
	t.Parallel()
	c := newContext(t, "", "")
	r := run(t, c.ID, `import sys
print("one")
print("two", file=sys.stderr)
display("shown")
print("three", flush=True)
1/0`)
	want := []string{"number_of_executions", "stdout", "stderr", "result", "stdout", "error", "end_of_execution"}
	if got := r.types(); !reflect.DeepEqual(got, want) {
		t.Fatalf("lines %v\nwant  %v\n%s", got, want, strings.Join(r.raw, "\n"))
	}
	if r.out() != "one\nthree\n" || r.err() != "two\n" {
		t.Errorf("stdout %q stderr %q", r.out(), r.err())
	}
	if r.results[0].str("text") != "shown" || string(r.results[0]["is_main_result"]) != "false" {
		t.Errorf("display: %s", r.raw[3])
	}
	// Timestamps as E2B renders them: +00:00, microseconds.
	var ts string
	_ = json.Unmarshal(r.lines[1]["timestamp"], &ts)
	if _, err := time.Parse("2006-01-02T15:04:05.999999-07:00", ts); err != nil || !strings.HasSuffix(ts, "+00:00") {
		t.Errorf("timestamp %q: %v", ts, err)
	}
	// Exact framing of a line.
	if want := `{"type": "number_of_executions", "execution_count": 1}`; r.raw[0] != want {
		t.Errorf("first line %s, want %s", r.raw[0], want)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	c := newContext(t, "", "")
	r := run(t, c.ID, "xyz")
	if len(r.errors) != 1 {
		t.Fatalf("errors: %+v", r.errors)
	}
	e := r.errors[0]
	if e.Name != "NameError" || e.Value != "name 'xyz' is not defined" || !strings.Contains(e.Traceback, "----> 1 xyz") {
		t.Errorf("error: %+v", e)
	}
	if strings.Contains(e.Traceback, "\x1b[") {
		t.Errorf("traceback has ANSI colours: %q", e.Traceback)
	}
	r = run(t, c.ID, "def f(:\n  pass")
	if e := r.lastError(); e == nil || e.Name != "SyntaxError" {
		t.Errorf("syntax error: %+v", r.errors)
	}
	// An exception raised while displaying, then the cell's own: only the
	// first error is forwarded.
	r = run(t, c.ID, `class Bad:
    def _repr_html_(self):
        raise ValueError("in repr")
    def __repr__(self):
        return "bad"
Bad()
`)
	if len(r.errors) > 1 {
		t.Errorf("more than one error forwarded: %+v", r.errors)
	}
	// input() cannot hang: stdin is off.
	r = run(t, c.ID, "input('x')")
	if e := r.lastError(); e == nil || e.Name != "StdinNotImplementedError" {
		t.Errorf("input(): %+v", r.errors)
	}
}

func TestDisplayDataEveryType(t *testing.T) {
	t.Parallel()
	c := newContext(t, "", "")
	r := run(t, c.ID, `from IPython.display import display
display({
  "text/plain": "'quoted'",
  "text/html": "<b>h</b>",
  "text/markdown": "# m",
  "image/svg+xml": "<svg/>",
  "image/png": "iVBORw0KGgo=",
  "image/jpeg": "/9j/4AAQ",
  "application/pdf": "JVBERi0=",
  "text/latex": "$x^2$",
  "application/json": {"a": [1, None, 0.0, "é"]},
  "application/javascript": "alert(1)",
  "e2b/data": {"col": [1.0, None]},
  "e2b/chart": {"type": "line", "x_unit": None, "elements": []},
  "image/gif": "R0lGOD",
  "application/vnd.custom+json": {"k": None},
}, raw=True)
display({"text/latex": "$y$"}, raw=True)
`).mustOK(t)
	if len(r.results) != 2 {
		t.Fatalf("results: %v", r.raw)
	}
	// Field order and raw values exactly as the E2B server writes them.
	want := `{"type": "result", "text": "quoted", "html": "<b>h</b>", "markdown": "# m", "svg": "<svg/>", ` +
		`"png": "iVBORw0KGgo=", "jpeg": "/9j/4AAQ", "pdf": "JVBERi0=", "latex": "$x^2$", ` +
		`"json": {"a": [1, null, 0.0, "\u00e9"]}, "javascript": "alert(1)", "data": {"col": [1.0, null]}, ` +
		`"chart": {"type": "line", "x_unit": null, "elements": []}, ` +
		`"extra": {"application/vnd.custom+json": {"k": null}, "image/gif": "R0lGOD"}, "is_main_result": false}`
	if got := normalizeSpaces(r.raw[1]); got != normalizeSpaces(want) {
		t.Errorf("result line\n got %s\nwant %s", r.raw[1], want)
	}
	// A latex-only display has no text and an empty extra (the Python
	// SDK's formats() must be exactly ["latex"]).
	if got := r.raw[2]; got != `{"type": "result", "latex": "$y$", "extra": {}, "is_main_result": false}` {
		t.Errorf("latex-only: %s", got)
	}
}

// normalizeSpaces drops the spaces after , and : outside strings: the
// kernel's JSON formatting of nested values is its own.
func normalizeSpaces(s string) string {
	var b strings.Builder
	in := false
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch == '"' && (i == 0 || s[i-1] != '\\') {
			in = !in
		}
		if !in && ch == ' ' {
			continue
		}
		b.WriteByte(ch)
	}
	return b.String()
}

func TestMainResultAndQuotes(t *testing.T) {
	t.Parallel()
	c := newContext(t, "", "/tmp")
	r := run(t, c.ID, "import os\nos.getcwd()").mustOK(t)
	if r.text() != "/tmp" {
		t.Errorf("text %q, want /tmp (outer quotes stripped)", r.text())
	}
	r = run(t, c.ID, `"it's"`).mustOK(t)
	if r.text() != "it's" {
		t.Errorf("text %q", r.text())
	}
	r = run(t, c.ID, "{'a': [1, 2.0, None]}").mustOK(t)
	var j map[string]any
	if err := json.Unmarshal(r.results[0]["json"], &j); err != nil || !strings.Contains(string(r.results[0]["json"]), "2.0") {
		t.Errorf("dict json %s: %v", r.results[0]["json"], err)
	}
	r = run(t, c.ID, "x = list(range(2000)); x").mustOK(t)
	if !strings.HasSuffix(r.text(), "1999]") {
		t.Errorf("a long list was truncated: ...%s", r.text()[max(0, len(r.text())-20):])
	}
}

func TestDataFrame(t *testing.T) {
	t.Parallel()
	c := newContext(t, "", "")
	r := run(t, c.ID, `import pandas as pd
pd.DataFrame({"a": [1, 2, 3], "b": [0.5, None, 1.0]})`).mustOK(t)
	if len(r.results) != 1 {
		t.Fatalf("results: %v", r.raw)
	}
	res := r.results[0]
	var data map[string][]any
	if err := json.Unmarshal(res["data"], &data); err != nil {
		t.Fatalf("data %s: %v", res["data"], err)
	}
	if len(data["a"]) != 3 || res["html"] == nil || res.str("text") == "" {
		t.Errorf("dataframe result: %s", short(string(mustMarshal(t, res))))
	}
	if !strings.Contains(string(res["data"]), "1.0") {
		t.Errorf("float 1.0 lost its form: %s", res["data"])
	}
}

// Charts: the startup package's tests check the extraction in depth; here
// each type must arrive through the wire intact, floats as floats and
// nested nulls kept.
func TestCharts(t *testing.T) {
	t.Parallel()
	c := newContext(t, "", "")
	run(t, c.ID, "import matplotlib.pyplot as plt\nimport numpy as np").mustOK(t)
	cases := []struct {
		name, code, typ string
		check           func(t *testing.T, chart map[string]json.RawMessage)
	}{
		{"line", `x = np.linspace(0, 2, 5)
plt.plot(x, x * 2, label="double")
plt.title("Line"); plt.xlabel("Time (s)"); plt.ylabel("Y")
plt.show()`, "line", func(t *testing.T, ch map[string]json.RawMessage) {
			if string(ch["y_unit"]) != "null" || !strings.Contains(string(ch["x_unit"]), "s") {
				t.Errorf("units %s %s", ch["x_unit"], ch["y_unit"])
			}
			if !strings.Contains(string(ch["elements"]), "0.0") {
				t.Errorf("points lost float form: %s", short(string(ch["elements"])))
			}
		}},
		{"scatter", `plt.scatter([1, 2, 3], [4.0, 5.0, 6.0], label="s"); plt.show()`, "scatter", func(t *testing.T, ch map[string]json.RawMessage) {
			if string(ch["title"]) != "null" {
				t.Errorf("title %s, want null", ch["title"])
			}
		}},
		{"bar", `plt.bar(["a", "b"], [3, 4], label="g"); plt.title("Bars"); plt.show()`, "bar", nil},
		{"pie", `plt.pie([90, 10], labels=["x", "y"]); plt.show()`, "pie", nil},
		{"box", `plt.boxplot([[1, 2, 3, 4, 10], [2, 3, 4, 5, 6]], patch_artist=True); plt.show()`, "box_and_whisker", nil},
		{"superchart", `fig, (a, b) = plt.subplots(1, 2)
a.plot([1, 2], [3, 4]); b.scatter([1], [2])
fig.suptitle("Both"); plt.show()`, "superchart", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, c.ID, tc.code).mustOK(t)
			if len(r.results) != 1 {
				t.Fatalf("results: %v", r.types())
			}
			res := r.results[0]
			if res["png"] == nil {
				t.Error("no png")
			}
			var chart map[string]json.RawMessage
			if err := json.Unmarshal(res["chart"], &chart); err != nil {
				t.Fatalf("chart %s: %v", short(string(res["chart"])), err)
			}
			var typ string
			_ = json.Unmarshal(chart["type"], &typ)
			if typ != tc.typ {
				t.Fatalf("chart type %q, want %q: %s", typ, tc.typ, short(string(res["chart"])))
			}
			if tc.check != nil {
				tc.check(t, chart)
			}
		})
	}
}

func TestFIFOOnOneContext(t *testing.T) {
	t.Parallel()
	c := newContext(t, "", "")
	run(t, c.ID, "order = []").mustOK(t)
	// Submitted in order while the first one runs.
	var rds []*interpreter.Reader
	for i := range 4 {
		code := fmt.Sprintf("order.append(%d)", i)
		if i == 0 {
			code = "import time; time.sleep(0.5); " + code
		}
		_, rd, err := shared.eng.Execute(testutil.Context(t, execTimeout), interpreter.ExecuteRequest{Code: code, ContextID: c.ID})
		if err != nil {
			t.Fatal(err)
		}
		rds = append(rds, rd)
	}
	for i := len(rds) - 1; i >= 0; i-- {
		if evs := collect(t, rds[i]); endOf(evs).Reason != interpreter.EndOK {
			t.Errorf("execution %d: %v %v", i, kinds(evs), errorNames(evs))
		}
	}
	if got := run(t, c.ID, "order").mustOK(t).text(); got != "[0, 1, 2, 3]" {
		t.Errorf("order %s", got)
	}
}

// A quiet execution's stream carries a keepalive line after Keepalive of
// silence.
func TestKeepalive(t *testing.T) {
	t.Parallel()
	ctx := testutil.Context(t, execTimeout)
	clock := quartz.NewMock(t)
	newTicker := clock.Trap().NewTicker("keepalive")
	defer newTicker.Close()
	reset := clock.Trap().TickerReset("keepalive")
	defer reset.Close()
	base := serveHTTP(t, shared.eng, codehttp.Options{Clock: clock, Keepalive: 5 * time.Second})
	c := newContext(t, "", "")
	flag := filepath.Join(t.TempDir(), "go")
	resp := doAt(t, ctx, base, http.MethodPost, "/execute", map[string]any{"context_id": c.ID,
		"code": fmt.Sprintf("import os, time\nwhile not os.path.exists(%q):\n    time.sleep(0.01)\nprint('done')", flag)})
	defer resp.Body.Close()
	newTicker.MustWait(ctx).MustRelease(ctx)
	br := bufio.NewReader(resp.Body)
	if l, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(l, `{"type": "number_of_executions"`) {
		t.Fatalf("first line %q: %v", l, err)
	}
	reset.MustWait(ctx).MustRelease(ctx) // re-armed after the line
	reset.Close()
	for range 2 {
		clock.Advance(5 * time.Second).MustWait(ctx)
		if l, err := br.ReadString('\n'); err != nil || l != `{"type": "keepalive"}`+"\n" {
			t.Fatalf("after 5 s of silence %q: %v", l, err)
		}
	}
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := readStream(t, br).mustOK(t); r.out() != "done\n" || r.keepalives != 0 {
		t.Errorf("the rest: %v", r.types())
	}
}

func TestContextsAPI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := newContext(t, "PYTHON", dir)
	if c.Language != "python" || c.Cwd != dir || c.ID == "" {
		t.Fatalf("created %+v", c)
	}
	// Listed last, in creation order, with the defaults first.
	status, body := call(t, http.MethodGet, "/contexts", nil)
	var list []map[string]string
	if err := json.Unmarshal([]byte(body), &list); status != 200 || err != nil {
		t.Fatalf("GET /contexts: %d %s", status, body)
	}
	ids := []string{}
	for _, l := range list {
		ids = append(ids, l["id"])
	}
	if !slices.Contains(ids, c.ID) || list[0]["language"] != "python" {
		t.Errorf("list %v", list)
	}

	// Restart: fresh state, same id, same cwd even after a chdir.
	run(t, c.ID, "import os; os.chdir('/'); x = 1").mustOK(t)
	if status, body := call(t, http.MethodPost, "/contexts/"+c.ID+"/restart", nil); status != 200 || body != "null" {
		t.Fatalf("restart: %d %s", status, body)
	}
	r := run(t, c.ID, "x")
	if e := r.lastError(); e == nil || e.Name != "NameError" || e.Value != "name 'x' is not defined" {
		t.Errorf("after restart: %+v", r.errors)
	}
	if got := run(t, c.ID, "import os; os.getcwd()").mustOK(t).text(); got != dir {
		t.Errorf("cwd after restart %q, want %q", got, dir)
	}
	if got := run(t, c.ID, "import os; os.environ['ENVD_TEST_GLOBAL']").mustOK(t).text(); got != "global value" {
		t.Errorf("sandbox env after restart: %q", got)
	}

	// Remove: gone from the list, 404 afterwards.
	if status, body := call(t, http.MethodDelete, "/contexts/"+c.ID, nil); status != 200 || body != "null" {
		t.Fatalf("delete: %d %s", status, body)
	}
	_, body = call(t, http.MethodGet, "/contexts", nil)
	if strings.Contains(body, c.ID) {
		t.Errorf("removed context still listed: %s", body)
	}
	if status, body := call(t, http.MethodPost, "/execute", map[string]any{"code": "1", "context_id": c.ID}); status != 404 || body != "Context "+c.ID+" not found" {
		t.Errorf("execute on removed: %d %s", status, body)
	}
}

// Removing a language's default context makes the next run in that
// language create a new default. On an engine of its own: it changes the
// engine's defaults.
func TestRemoveLanguageDefault(t *testing.T) {
	t.Parallel()
	eng := ownEngine(t, interpreter.Options{})
	base := serveHTTP(t, eng, codehttp.Options{ReadyWait: kernelTimeout})
	first := executeAt(t, base, map[string]any{"code": "echo one", "language": "bash"}).mustOK(t)
	if first.out() != "one\n" {
		t.Fatalf("bash: %q", first.out())
	}
	ctxs := eng.Contexts()
	if len(ctxs) != 1 || ctxs[0].Language != "bash" {
		t.Fatalf("contexts %+v, want the bash default only", ctxs)
	}
	bashID := ctxs[0].ID
	if status, body := callAt(t, base, http.MethodDelete, "/contexts/"+bashID, nil); status != 200 {
		t.Fatalf("delete bash default: %d %s", status, body)
	}
	// The next bash run creates a new default instead of using the dead one.
	if r := executeAt(t, base, map[string]any{"code": "echo two", "language": "bash"}).mustOK(t); r.out() != "two\n" {
		t.Errorf("after removing the default: %q", r.out())
	}
	ctxs = eng.Contexts()
	if len(ctxs) != 1 || ctxs[0].ID == bashID || ctxs[0].Language != "bash" {
		t.Errorf("contexts %+v, want a new bash default only", ctxs)
	}
}

func TestIndependentContexts(t *testing.T) {
	t.Parallel()
	a := newContext(t, "", "")
	b := newContext(t, "", "")
	run(t, a.ID, "only_in_a = 1").mustOK(t)
	r := run(t, b.ID, "only_in_a")
	if e := r.lastError(); e == nil || e.Value != "name 'only_in_a' is not defined" {
		t.Errorf("state leaked between contexts: %+v", r.errors)
	}
}
