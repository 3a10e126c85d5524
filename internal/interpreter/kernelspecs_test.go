package interpreter_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/envd/interpreter/v1"
	"github.com/envd-dev/envd/internal/interpreter"
	"github.com/envd-dev/envd/internal/interpreter/codehttp"
	"github.com/envd-dev/envd/internal/testutil"
)

// specName is a kernelspec name no other test uses (Jupyter lowercases
// them).
func specName(prefix string) string {
	return "envd-test-" + prefix + "-" + strings.ToLower(rand.Text()[:8])
}

// installSpec writes kernels/name/kernel.json into the shared servers'
// extra JUPYTER_PATH directory (they read it at every listing) and
// removes it at cleanup, with the default context the tests gave it.
func installSpec(t testing.TB, name string, spec map[string]any) string {
	t.Helper()
	dir := filepath.Join(shared.kernels, "kernels", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	writeSpec(t, dir, spec)
	return dir
}

func writeSpec(t testing.TB, dir string, spec map[string]any) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "kernel.json"), mustMarshal(t, spec), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ipykernelSpec is a kernelspec of Debian's ipykernel that says it is of
// language lang.
func ipykernelSpec(display, lang string) map[string]any {
	return map[string]any{
		"argv":         []string{"/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"},
		"display_name": display,
		"language":     lang,
	}
}

// languages lists the shared engine's languages, by name.
func languages(t testing.TB) map[string]interpreter.LanguageInfo {
	t.Helper()
	list, err := shared.eng.Languages(testutil.Context(t, kernelTimeout))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]interpreter.LanguageInfo{}
	for _, l := range list {
		out[l.Language] = l
	}
	return out
}

// removeDefaultAtCleanup removes the default context of a language the
// test runs code in on the shared engine.
func removeDefaultAtCleanup(t testing.TB, lang string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		list, err := shared.eng.Languages(ctx)
		if err != nil {
			return
		}
		for _, l := range list {
			if l.Language == lang && l.DefaultContextID != "" {
				_ = shared.eng.RemoveContext(ctx, l.DefaultContextID)
			}
		}
	})
}

// A kernelspec installed after start is usable at once: by its name when
// its language is envd's (a second Python), by its language field (and
// its name) otherwise. A kernel of a language envd has no code for still
// starts in its cwd; per-execution env vars are refused for it.
func TestKernelspecAddedAfterStart(t *testing.T) {
	t.Parallel()
	py := specName("py")
	if _, ok := languages(t)[py]; ok {
		t.Fatalf("%s listed before it is installed", py)
	}
	if status, body := call(t, http.MethodPost, "/execute", map[string]any{"code": "1", "language": py}); status != 400 ||
		!strings.Contains(body, `"`+py+`"`) {
		t.Fatalf("before install: %d %s", status, body)
	}
	installSpec(t, py, ipykernelSpec("Second Python", "python"))
	removeDefaultAtCleanup(t, py)
	l, ok := languages(t)[py]
	if !ok || l.KernelName != py || l.DisplayName != "Second Python" || len(l.Aliases) != 0 || l.DefaultContextID != "" {
		t.Fatalf("after install: %+v (listed %v)", l, ok)
	}
	// Python's setup ran in it: the default cwd, sandbox and per-execution env.
	r := execute(t, map[string]any{"language": py, "env_vars": map[string]string{"ENVD_T": "per-run"},
		"code": "import os; print(os.getcwd(), os.environ['ENVD_TEST_GLOBAL'], os.environ['ENVD_T'])"}).mustOK(t)
	if r.out() != "/tmp global value per-run\n" {
		t.Errorf("second python: %q", r.out())
	}
	l = languages(t)[py]
	if l.DefaultContextID == "" || !l.DefaultContextRunning {
		t.Errorf("after a run: %+v", l)
	}
	c := newContext(t, strings.ToUpper(py), "")
	if c.Language != py {
		t.Errorf("context %+v, want language %s", c, py)
	}

	// By language field; the kernelspec's name is an alias.
	lang, name := specName("lang"), specName("spec")
	installSpec(t, name, ipykernelSpec("Other", lang))
	removeDefaultAtCleanup(t, lang)
	l = languages(t)[lang]
	if l.KernelName != name || !slices.Equal(l.Aliases, []string{name}) {
		t.Fatalf("by language: %+v", l)
	}
	dir := trickyDir(t)
	c = newContext(t, name, dir)
	if c.Language != lang || c.Cwd != dir {
		t.Errorf("context by alias: %+v", c)
	}
	if got := run(t, c.ID, "import os; print(os.getcwd())").mustOK(t).out(); got != dir+"\n" {
		t.Errorf("cwd %q, want %q (Jupyter starts the kernel there)", got, dir)
	}
	execute(t, map[string]any{"language": lang, "code": "v = 1"}).mustOK(t)
	if got := execute(t, map[string]any{"language": name, "code": "print(v + 1)"}).mustOK(t).out(); got != "2\n" {
		t.Errorf("name and language share the default context: %q", got)
	}
	status, body := call(t, http.MethodPost, "/execute", map[string]any{"language": lang, "code": "1", "env_vars": map[string]string{"A": "b"}})
	if status != 400 || !strings.Contains(body, "cannot set env vars per execution in "+lang) {
		t.Errorf("env vars: %d %s", status, body)
	}
}

// TestKernelspecNotListedFirst: context creations reuse the last listing
// of the kernelspecs for a while, yet one installed a moment ago is found
// at once (a language the listing lacks is looked up anew), and one
// removed a moment ago fails with a clear error, without a listing of the
// languages in between.
func TestKernelspecNotListedFirst(t *testing.T) {
	t.Parallel()
	newContext(t, "python", "") // a listing, kept
	name := specName("quick")
	dir := installSpec(t, name, ipykernelSpec("Quick", "python"))
	removeDefaultAtCleanup(t, name)
	c := newContext(t, name, "")
	if got := run(t, c.ID, "print(6 * 7)").mustOK(t).out(); got != "42\n" {
		t.Errorf("a context of a kernelspec installed a moment ago: %q", got)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	status, body := call(t, http.MethodPost, "/contexts", map[string]any{"language": name})
	if status != 400 || !strings.Contains(body, name) {
		t.Errorf("a context of a kernelspec removed a moment ago: %d %s", status, body)
	}
}

// A kernelspec removed or broken after start gives a clear error; its
// running contexts and the other languages keep working.
func TestKernelspecRemovedOrBroken(t *testing.T) {
	t.Parallel()
	gone, broken := specName("gone"), specName("broken")
	goneDir := installSpec(t, gone, ipykernelSpec("Gone", "python"))
	brokenDir := installSpec(t, broken, ipykernelSpec("Broken", "python"))
	c := newContext(t, gone, "")
	run(t, c.ID, "x = 41").mustOK(t)

	if err := os.RemoveAll(goneDir); err != nil {
		t.Fatal(err)
	}
	if _, ok := languages(t)[gone]; ok {
		t.Errorf("%s listed after its removal", gone)
	}
	status, body := call(t, http.MethodPost, "/contexts", map[string]any{"language": gone})
	if status != 400 || !strings.Contains(body, `unsupported language "`+gone+`"`) || !strings.Contains(body, "available languages: python, javascript") {
		t.Errorf("removed: %d %s", status, body)
	}
	if got := run(t, c.ID, "print(x + 1)").mustOK(t).out(); got != "42\n" {
		t.Errorf("a running context of a removed kernelspec: %q", got)
	}

	writeSpec(t, brokenDir, map[string]any{"argv": []string{"/nonexistent/envd-test-kernel", "{connection_file}"},
		"display_name": "Broken", "language": "python"})
	status, body = call(t, http.MethodPost, "/contexts", map[string]any{"language": broken})
	if status != 500 || !strings.Contains(body, "the "+broken+` kernel (kernelspec "`+broken+`") failed to start: `+
		`FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/envd-test-kernel'`) || strings.Contains(body, "Traceback") {
		t.Errorf("broken argv: %d %s", status, body)
	}
	if err := os.WriteFile(filepath.Join(brokenDir, "kernel.json"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := languages(t)[broken]; ok {
		t.Errorf("%s listed with a kernel.json that is not JSON", broken)
	}
	status, body = call(t, http.MethodPost, "/execute", map[string]any{"code": "1", "language": broken})
	if status != 400 || !strings.Contains(body, `"`+broken+`"`) {
		t.Errorf("broken JSON: %d %s", status, body)
	}

	// The others are unaffected.
	if got := run(t, "", "print(1 + 1)").mustOK(t).out(); got != "2\n" {
		t.Errorf("default python: %q", got)
	}
	if got := execute(t, map[string]any{"code": "echo ok", "language": "bash"}).mustOK(t).out(); got != "ok\n" {
		t.Errorf("bash: %q", got)
	}
}

// Aliases select envd's languages; the kernelspecs' names are aliases.
func TestLanguageAliases(t *testing.T) {
	t.Parallel()
	ls := languages(t)
	for lang, want := range map[string][]string{"python": {"py", "python3"}, "javascript": {"js", "deno"}, "typescript": {"ts"}, "r": {"ir"}, "bash": {"sh"}} {
		if l := ls[lang]; !slices.Equal(l.Aliases, want) {
			t.Errorf("%s: aliases %v, want %v", lang, l.Aliases, want)
		}
	}
	if ls["javascript"].KernelName != "deno" || ls["typescript"].KernelName != "deno" || ls["python"].KernelName != "python3" {
		t.Errorf("envd's mapping not preferred: %+v", ls)
	}
	run(t, "", "envd_alias_v = 7").mustOK(t)
	for _, alias := range []string{"py", "python3", " PY "} {
		if got := execute(t, map[string]any{"code": "print(envd_alias_v)", "language": alias}).mustOK(t).out(); got != "7\n" {
			t.Errorf("%q: %q, want the default python context's state", alias, got)
		}
	}
	if got := execute(t, map[string]any{"code": "echo sh", "language": "sh"}).mustOK(t).out(); got != "sh\n" {
		t.Errorf("sh: %q", got)
	}
}

// GET /languages and ListLanguages list the same languages.
func TestListLanguagesAdapters(t *testing.T) {
	t.Parallel()
	status, body := call(t, http.MethodGet, "/languages", nil)
	var list []map[string]any
	if err := json.Unmarshal([]byte(body), &list); status != 200 || err != nil {
		t.Fatalf("GET /languages: %d %s", status, body)
	}
	var names []string
	for _, l := range list {
		names = append(names, l["language"].(string))
		for _, k := range []string{"kernel_name", "display_name", "aliases", "default_context_id", "default_context_running"} {
			if _, ok := l[k]; !ok {
				t.Errorf("%v lacks %s", l, k)
			}
		}
	}
	if len(names) < 5 || !slices.Equal(names[:5], []string{"python", "javascript", "typescript", "r", "bash"}) {
		t.Errorf("GET /languages: %v", names)
	}
	py := list[0]
	if py["kernel_name"] != "python3" || py["default_context_id"] == "" || py["default_context_running"] != true {
		t.Errorf("python: %v", py)
	}

	ctx := testutil.Context(t, kernelTimeout)
	resp, err := svc(t).ListLanguages(ctx, connect.NewRequest(&pb.ListLanguagesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var rpcNames []string
	for _, l := range resp.Msg.GetLanguages() {
		rpcNames = append(rpcNames, l.GetLanguage())
	}
	if len(rpcNames) < 5 || !slices.Equal(rpcNames[:5], names[:5]) {
		t.Errorf("ListLanguages: %v", rpcNames)
	}
	js := resp.Msg.GetLanguages()[1]
	if js.GetKernelName() != "deno" || !slices.Equal(js.GetAliases(), []string{"js", "deno"}) || js.GetDisplayName() != "Deno" {
		t.Errorf("ListLanguages javascript: %v", js)
	}
}

// The JavaScript default context is listed from the start with an id that
// stays, and its kernel starts on first use (by id or by language).
func TestDefaultJavaScriptListedAtStart(t *testing.T) {
	t.Parallel()
	eng := ownEngine(t, interpreter.Options{})
	eng.Start()
	select {
	case <-eng.Ready():
	case <-testutil.Context(t, kernelTimeout).Done():
		t.Fatalf("not ready: %v", eng.Health())
	}
	first := eng.Contexts()
	if len(first) != 2 || first[0].Language != "python" || first[1].Language != "javascript" || first[1].ID == "" {
		t.Fatalf("contexts at start: %+v", first)
	}
	if again := eng.Contexts(); !slices.Equal(again, first) {
		t.Errorf("second listing %+v, first %+v", again, first)
	}
	jsID := first[1].ID
	langs, err := eng.Languages(testutil.Context(t, kernelTimeout))
	if err != nil {
		t.Fatal(err)
	}
	if langs[1].Language != "javascript" || langs[1].DefaultContextID != jsID || langs[1].DefaultContextRunning ||
		langs[0].DefaultContextID != first[0].ID || !langs[0].DefaultContextRunning {
		t.Errorf("languages at start: %+v", langs[:2])
	}
	base := serveHTTP(t, eng, codehttp.Options{ReadyWait: kernelTimeout})
	executeAt(t, base, map[string]any{"code": "var envdFirst = 41", "context_id": jsID}).mustOK(t)
	if got := executeAt(t, base, map[string]any{"code": "console.log(envdFirst + 1)", "language": "js"}).mustOK(t).out(); got != "42\n" {
		t.Errorf("language js after a run on the listed id: %q", got)
	}
	if after := eng.Contexts(); !slices.Equal(after, first) {
		t.Errorf("contexts after first use %+v, want %+v", after, first)
	}
	langs, err = eng.Languages(testutil.Context(t, kernelTimeout))
	if err != nil {
		t.Fatal(err)
	}
	if !langs[1].DefaultContextRunning {
		t.Errorf("javascript after first use: %+v", langs[1])
	}
}
