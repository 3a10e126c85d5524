package interpreter_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/interpreter"
	"github.com/envd-dev/envd/internal/testutil"
)

// introspectCase is one language's code for the introspection tests.
type introspectCase struct {
	lang string
	// define sets the variables; then the query must list want (name ->
	// type) and none of hidden.
	define string
	want   map[string]string
	hidden []string
	// complete: code with the cursor at its end, a match it must give,
	// and where the replaced text starts (code points).
	complete, match string
	// typed is the end of complete that the match replaces.
	typed string
	// inspect: code with the cursor at its end, and a word its text/plain
	// must hold ("" : the kernel finds nothing, as Deno's).
	inspect, about string
}

var introspectCases = []introspectCase{
	{
		lang: "python",
		define: "import os, json\nimport numpy as np\nimport pandas as pd\n" +
			"héllo = 41\nbig = list(range(10**6))\ntext = 'x' * 10**6\narr = np.zeros((3, 4), dtype=np.float32)\n" +
			"df = pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})\n_private = 1\ndef fn(a, b=2): return a\n",
		want:     map[string]string{"héllo": "int", "big": "list", "text": "str", "arr": "ndarray", "df": "DataFrame", "fn": "function"},
		hidden:   []string{"os", "json", "np", "pd", "_private", "In", "Out", "get_ipython", "exit", "quit", "__envd_setenv"},
		complete: "x = 'é😀'; hél", match: "héllo", typed: "hél",
		inspect: "len", about: "Return the number of items",
	},
	{
		lang:     "javascript",
		define:   "let héllo = 41, hello_js = 1; const big = Array.from({length: 100000}, (_, i) => i); var text = 'x'.repeat(1e6); function fn(a) { return a } class K {}; globalThis.gl = new Map([[1, 2]]); var _private = 1;",
		want:     map[string]string{"héllo": "number", "big": "Array", "text": "string", "fn": "function", "K": "function", "gl": "Map"},
		hidden:   []string{"_private", "console", "Deno", "fetch", "globalThis"},
		complete: "const s = 'é😀'; hello_", match: "hello_js", typed: "hello_",
	},
	{
		lang:     "typescript",
		define:   "let héllo: number = 41, hello_js: number = 1; const big: number[] = Array.from({length: 100000}, (_, i) => i); var text: string = 'x'.repeat(1e6); interface I { a: number }; const obj: I = { a: 1 };",
		want:     map[string]string{"héllo": "number", "big": "Array", "text": "string", "obj": "Object"},
		hidden:   []string{"console", "Deno", "I"},
		complete: "const s: string = 'é😀'; hello_", match: "hello_js", typed: "hello_",
	},
	{
		lang:     "r",
		define:   "hello_r <- 41L\nbig <- seq_len(1e6)\ntext <- strrep('x', 1e6)\ndf <- data.frame(a = 1:3, b = c('x', 'y', 'z'))\nm <- matrix(0, 3, 4)\n.hidden <- 1\nfn <- function(a) a\n",
		want:     map[string]string{"hello_r": "integer", "big": "integer", "text": "character", "df": "data.frame", "m": "matrix", "fn": "function"},
		hidden:   []string{".hidden"},
		complete: "x <- 'é😀'; hello_", match: "hello_r", typed: "hello_",
		inspect: "hello_r", about: "Printed form",
	},
	{
		lang:     "bash",
		define:   "hello_b=41\narr=(a 'b c' d)\ndeclare -A assoc=([k]=v)\nexport EXPORTED=1\ntext=$(head -c 100000 /dev/zero | tr '\\0' x)\n_private=1\n",
		want:     map[string]string{"hello_b": "string", "arr": "array", "assoc": "associative array", "EXPORTED": "string (exported)", "text": "string"},
		hidden:   []string{"_private", "PATH", "HOME", "BASH_VERSION", "PWD", "ENVD_TEST_GLOBAL", "__envd_saved"},
		complete: "x='é😀'; echo $hello_", match: "hello_b", typed: "hello_",
		inspect: "cd", about: "Change the shell working directory",
	},
}

// queryCtx bounds one query of a test.
func queryCtx(t testing.TB) context.Context {
	return testutil.Context(t, execTimeout)
}

func TestVariables(t *testing.T) {
	t.Parallel()
	for _, tc := range introspectCases {
		t.Run(tc.lang, func(t *testing.T) {
			t.Parallel()
			c := newContext(t, tc.lang, "")
			first := run(t, c.ID, tc.define).mustOK(t).count
			vars, err := shared.eng.Variables(queryCtx(t), c.ID)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]interpreter.Variable{}
			for _, v := range vars.Variables {
				got[v.Name] = v
				if n := len([]rune(v.Repr)); n > interpreter.MaxReprLen {
					t.Errorf("%s: repr of %d characters", v.Name, n)
				}
			}
			for name, typ := range tc.want {
				if v, ok := got[name]; !ok || v.Type != typ {
					t.Errorf("variable %s: %+v, want type %q (all: %+v)", name, v, typ, vars.Variables)
				}
			}
			for _, name := range tc.hidden {
				if _, ok := got[name]; ok {
					t.Errorf("hidden name %s listed", name)
				}
			}
			if vars.Total != len(vars.Variables) || vars.Truncated {
				t.Errorf("total %d truncated %v for %d variables", vars.Total, vars.Truncated, len(vars.Variables))
			}
			if !slices.IsSortedFunc(vars.Variables, func(a, b interpreter.Variable) int { return strings.Compare(a.Name, b.Name) }) {
				t.Errorf("not sorted by name")
			}
			wantLen := int64(100000) // R: a vector of one string
			if tc.lang == "r" {
				wantLen = 1
			}
			if v := got["text"]; v.Len == nil || *v.Len < wantLen || !strings.Contains(v.Repr, "...") {
				t.Errorf("text: %+v", v)
			}
			checkSizes(t, tc.lang, got)
			// Silent: the next execution's count follows the last one's.
			if n := run(t, c.ID, tc.define).mustOK(t).count; n != first+1 {
				t.Errorf("execution count %d after the query, want %d", n, first+1)
			}
		})
	}
}

func checkSizes(t *testing.T, lang string, got map[string]interpreter.Variable) {
	t.Helper()
	switch lang {
	case "python":
		if v := got["arr"]; !slices.Equal(v.Shape, []int64{3, 4}) || v.DType != "float32" {
			t.Errorf("arr: %+v", v)
		}
		if v := got["df"]; !slices.Equal(v.Shape, []int64{2, 2}) {
			t.Errorf("df: %+v", v)
		}
		if v := got["big"]; v.Len == nil || *v.Len != 1e6 || !strings.HasPrefix(v.Repr, "[0, 1, 2") {
			t.Errorf("big: %+v", v)
		}
		if v := got["héllo"]; v.Repr != "41" {
			t.Errorf("héllo: %+v", v)
		}
	case "javascript", "typescript":
		if v := got["big"]; v.Len == nil || *v.Len != 100000 {
			t.Errorf("big: %+v", v)
		}
		if v := got["héllo"]; v.Repr != "41" {
			t.Errorf("héllo: %+v", v)
		}
	case "r":
		if v := got["df"]; !slices.Equal(v.Shape, []int64{3, 2}) {
			t.Errorf("df: %+v", v)
		}
		if v := got["m"]; !slices.Equal(v.Shape, []int64{3, 4}) || v.DType != "double" {
			t.Errorf("m: %+v", v)
		}
		if v := got["big"]; v.Len == nil || *v.Len != 1e6 {
			t.Errorf("big: %+v", v)
		}
	case "bash":
		if v := got["arr"]; v.Len == nil || *v.Len != 3 || v.Repr != `(a b\ c d)` {
			t.Errorf("arr: %+v", v)
		}
		if v := got["hello_b"]; v.Repr != "41" {
			t.Errorf("hello_b: %+v", v)
		}
	}
}

func TestComplete(t *testing.T) {
	t.Parallel()
	for _, tc := range introspectCases {
		t.Run(tc.lang, func(t *testing.T) {
			t.Parallel()
			c := newContext(t, tc.lang, "")
			run(t, c.ID, tc.define).mustOK(t)
			comp, err := shared.eng.Complete(queryCtx(t), c.ID, tc.complete, interpreter.CursorEnd)
			if err != nil {
				t.Fatal(err)
			}
			n := len([]rune(tc.complete))
			start := n - len([]rune(tc.typed))
			if !slices.Contains(comp.Matches, tc.match) || comp.CursorStart != start || comp.CursorEnd != n {
				t.Errorf("completion %+v, want %q replacing [%d:%d]", comp, tc.match, start, n)
			}
			// A cursor inside the code: the same, the rest after it kept.
			comp, err = shared.eng.Complete(queryCtx(t), c.ID, tc.complete+"\n", n)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(comp.Matches, tc.match) || comp.CursorStart != start {
				t.Errorf("completion inside the code %+v", comp)
			}
		})
	}
}

func TestCompleteTypes(t *testing.T) {
	t.Parallel()
	c := newContext(t, "python", "")
	run(t, c.ID, "def my_function(a, b=2): pass").mustOK(t)
	comp, err := shared.eng.Complete(queryCtx(t), c.ID, "my_fun", interpreter.CursorEnd)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(comp.Matches, "my_function") {
		t.Fatalf("completion %+v", comp)
	}
	i := slices.IndexFunc(comp.Types, func(ct interpreter.CompletionType) bool { return ct.Text == "my_function" })
	if i < 0 || comp.Types[i].Type != "function" {
		t.Errorf("types %+v", comp.Types)
	}
}

func TestInspect(t *testing.T) {
	t.Parallel()
	for _, tc := range introspectCases {
		t.Run(tc.lang, func(t *testing.T) {
			t.Parallel()
			c := newContext(t, tc.lang, "")
			run(t, c.ID, tc.define).mustOK(t)
			code := tc.inspect
			if code == "" {
				code = "héllo"
			}
			in, err := shared.eng.Inspect(queryCtx(t), c.ID, code, interpreter.CursorEnd, 0)
			if err != nil {
				t.Fatal(err)
			}
			if tc.about == "" {
				if in.Found { // Deno's kernel has no inspection (yet)
					t.Logf("found: %q", in.Text)
				}
				return
			}
			if !in.Found || !strings.Contains(in.Text, tc.about) || strings.Contains(in.Text, "\x1b") {
				t.Errorf("inspection %+v", in)
			}
			if _, ok := in.Data["text/plain"]; !ok {
				t.Errorf("no text/plain in %v", in.Data)
			}
		})
	}
}

// Text has no ANSI escapes, whatever the kernel's colours.
func TestInspectANSI(t *testing.T) {
	t.Parallel()
	c := newContext(t, "python", "")
	in, err := shared.eng.Inspect(queryCtx(t), c.ID, "print", 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !in.Found || strings.Contains(in.Text, "\x1b") || !strings.Contains(in.Text, "Docstring") {
		t.Errorf("inspection text %q", in.Text)
	}
	for in, want := range map[string]string{
		"\x1b[0;31mSignature:\x1b[0m print":      "Signature: print",
		"a\x1b]8;;http://x\x07link\x1b]8;;\x07b": "alinkb",
		"plain":                                  "plain",
		"\x1b[1;32;40mx\x1b(B":                   "x",
	} {
		if got := interpreter.StripANSI(in); got != want {
			t.Errorf("StripANSI(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestIntrospectBadInput(t *testing.T) {
	t.Parallel()
	c := newContext(t, "python", "")
	ctx := queryCtx(t)
	for _, tc := range []struct {
		name   string
		err    func() error
		kind   error
		phrase string
	}{
		{"empty code", func() error { _, err := shared.eng.Complete(ctx, c.ID, "", 0); return err }, interpreter.ErrBadQuery, "code is empty"},
		{"cursor past the end", func() error { _, err := shared.eng.Complete(ctx, c.ID, "é", 2); return err }, interpreter.ErrBadQuery, "1 code points"},
		{"negative cursor", func() error { _, err := shared.eng.Inspect(ctx, c.ID, "x", -2, 0); return err }, interpreter.ErrBadQuery, "out of range"},
		{"detail level", func() error { _, err := shared.eng.Inspect(ctx, c.ID, "x", 1, 3); return err }, interpreter.ErrBadQuery, "detail_level"},
		{"unknown context", func() error { _, err := shared.eng.Variables(ctx, "nope"); return err }, interpreter.ErrContextNotFound, "nope"},
	} {
		err := tc.err()
		if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.phrase) {
			t.Errorf("%s: %v, want %v with %q", tc.name, err, tc.kind, tc.phrase)
		}
	}
	if err := shared.eng.RemoveContext(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := shared.eng.Variables(ctx, c.ID); !errors.Is(err, interpreter.ErrContextNotFound) {
		t.Errorf("removed context: %v", err)
	}
}

// waitFileCode is Python code that prints "start", waits for the file at
// path, then prints "end".
func waitFileCode(path string) string {
	return "import os, time\nprint('start', flush=True)\nwhile not os.path.exists(" + pyString(path) +
		"): time.sleep(0.01)\nset_while_busy = 1\nprint('end')"
}

func pyString(s string) string { return "r'" + s + "'" }

// busyCode is code of each language that prints "start", waits for the
// file at path, then sets set_while_busy.
func busyCode(lang, path string) string {
	switch lang {
	case "javascript", "typescript":
		return `console.log("start"); while (true) { try { Deno.statSync(` + jsonString(path) + `); break; } ` +
			`catch { await new Promise((r) => setTimeout(r, 10)); } } var set_while_busy = 1;`
	case "r":
		return "cat('start\\n')\nwhile (!file.exists(" + jsonString(path) + ")) Sys.sleep(0.01)\nset_while_busy <- 1"
	case "bash":
		return "echo start; while [ ! -e '" + path + "' ]; do sleep 0.01; done; set_while_busy=1"
	}
	return waitFileCode(path)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// A query on a busy context waits its turn; one whose wait ends first
// answers ErrBusy; neither disturbs the running code. In each language.
func TestVariablesBusyContext(t *testing.T) {
	t.Parallel()
	for _, tc := range introspectCases {
		t.Run(tc.lang, func(t *testing.T) {
			t.Parallel()
			c := newContext(t, tc.lang, "")
			release := filepath.Join(t.TempDir(), "release")
			x, rd, err := shared.eng.Execute(queryCtx(t), interpreter.ExecuteRequest{Code: busyCode(tc.lang, release), ContextID: c.ID})
			if err != nil {
				t.Fatal(err)
			}
			readUntil(t, rd, isKind(interpreter.EventStdout))

			short, cancel := context.WithTimeout(queryCtx(t), 200*time.Millisecond)
			_, err = shared.eng.Variables(short, c.ID)
			cancel()
			if !errors.Is(err, interpreter.ErrBusy) || !strings.Contains(err.Error(), x.ID) {
				t.Fatalf("busy: %v", err)
			}
			short, cancel = context.WithTimeout(queryCtx(t), 200*time.Millisecond)
			_, err = shared.eng.Complete(short, c.ID, "x", interpreter.CursorEnd)
			cancel()
			if !errors.Is(err, interpreter.ErrBusy) {
				t.Fatalf("busy completion: %v", err)
			}

			type answer struct {
				vars *interpreter.Variables
				err  error
			}
			done := make(chan answer, 1)
			go func() {
				v, err := shared.eng.Variables(queryCtx(t), c.ID)
				done <- answer{v, err}
			}()
			if err := os.WriteFile(release, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			a := <-done
			if a.err != nil {
				t.Fatal(a.err)
			}
			if !slices.ContainsFunc(a.vars.Variables, func(v interpreter.Variable) bool { return v.Name == "set_while_busy" }) {
				t.Errorf("the query did not wait for the code: %+v", a.vars.Variables)
			}
			evs := collect(t, rd)
			if end := endOf(evs); end.Reason != interpreter.EndOK {
				t.Errorf("the running code ended %+v", end)
			}
		})
	}
}

// An execution on another context, streaming while a query runs, sees
// nothing of it.
func TestVariablesSilentToOthers(t *testing.T) {
	t.Parallel()
	a := newContext(t, "python", "")
	b := newContext(t, "python", "")
	run(t, a.ID, "x = 1\nprint('noise')").mustOK(t)
	release := filepath.Join(t.TempDir(), "release")
	_, rd, err := shared.eng.Execute(queryCtx(t), interpreter.ExecuteRequest{Code: waitFileCode(release), ContextID: b.ID})
	if err != nil {
		t.Fatal(err)
	}
	evs := readUntil(t, rd, isKind(interpreter.EventStdout))
	for range 3 {
		if _, err := shared.eng.Variables(queryCtx(t), a.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range append(evs, collect(t, rd)...) {
		switch ev.Kind {
		case interpreter.EventStdout, interpreter.EventStderr, interpreter.EventResult, interpreter.EventError, interpreter.EventNotice:
			out = append(out, ev.Kind.String()+":"+ev.Text)
		}
	}
	if strings.Join(out, "|") != "stdout:start\n|stdout:end\n" {
		t.Errorf("the other context's stream saw %q", out)
	}
}

// A kernel that died between executions was restarted by Jupyter: the
// query answers for the fresh kernel. One killed by the query answers
// ErrKernelUnavailable, and the context works after. One deleted for good
// answers ErrKernelUnavailable.
func TestIntrospectDeadKernel(t *testing.T) {
	t.Parallel()
	die := map[string]string{
		"python":     "import os\nos._exit(1)",
		"javascript": "Deno.exit(1)",
		"typescript": "Deno.exit(1)",
		"r":          "tools::pskill(Sys.getpid(), 9)",
		"bash":       "kill -9 $PPID",
	}
	for _, tc := range introspectCases {
		t.Run("died before/"+tc.lang, func(t *testing.T) {
			t.Parallel()
			c := newContext(t, tc.lang, "")
			run(t, c.ID, tc.define).mustOK(t)
			r := run(t, c.ID, die[tc.lang])
			if e := r.lastError(); e == nil || e.Name != "ContextRestarting" {
				t.Fatalf("errors %+v", r.errors)
			}
			vars, err := shared.eng.Variables(queryCtx(t), c.ID)
			if err != nil || len(vars.Variables) != 0 {
				t.Fatalf("after the death: %+v, %v", vars, err)
			}
			if _, err := shared.eng.Complete(queryCtx(t), c.ID, tc.complete, interpreter.CursorEnd); err != nil {
				t.Errorf("completion after the death: %v", err)
			}
		})
	}
	t.Run("died during", func(t *testing.T) {
		t.Parallel()
		c := newContext(t, "python", "")
		run(t, c.ID, "class Boom:\n    def __repr__(self):\n        import os; os._exit(1)\nb = Boom()").mustOK(t)
		_, err := shared.eng.Variables(queryCtx(t), c.ID)
		if !errors.Is(err, interpreter.ErrKernelUnavailable) || !strings.Contains(err.Error(), "died during the variables query") {
			t.Fatalf("query killing its kernel: %v", err)
		}
		r := run(t, c.ID, "print('alive')").mustOK(t)
		if r.out() != "alive\n" {
			t.Errorf("after: %q", r.out())
		}
	})
	t.Run("deleted", func(t *testing.T) {
		t.Parallel()
		c := newContext(t, "python", "")
		ctx := queryCtx(t)
		client, err := shared.sup.Client(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := client.DeleteKernel(ctx, c.ID); err != nil {
			t.Fatal(err)
		}
		// The kernel's connection learns of it; until then the query's own
		// request finds it gone.
		_, err = shared.eng.Complete(ctx, c.ID, "pri", interpreter.CursorEnd)
		if !errors.Is(err, interpreter.ErrKernelUnavailable) || !strings.Contains(err.Error(), "next execution starts a new one") {
			t.Fatalf("deleted kernel: %v", err)
		}
	})
}
