package startup_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/envd-dev/envd/internal/jupyter/startup"
)

// envScript is the language-specific part of an env + chdir round trip
// (runEnvRoundTrip): preset, global, per-execution set, dump, restore, dump,
// chdir, getwd.
type envScript struct {
	preset string // sets ENVD_T_PRESET=preset and ENVD_T_QUOTES=orig
	dump   string // prints {"NAME": value-or-null, ...} for envNames as JSON
	getwd  string // prints (or returns) the working directory
}

var envNames = []string{"ENVD_T_QUOTES", "ENVD_T_NEWLINE", "ENVD_T_UNICODE", "ENVD_T_EMPTY", "ENVD_T_PRESET", "ENVD_T_GLOBAL"}

func runEnvRoundTrip(t *testing.T, language, kernel, cwd string, env []string, s envScript) {
	t.Helper()
	runEnvRoundTripGrace(t, language, kernel, cwd, env, s, 0)
}

func runEnvRoundTripGrace(t *testing.T, language, kernel, cwd string, env []string, s envScript, grace float64) {
	t.Helper()
	chdirTo := filepath.Join(cwd, "it's a \"dir\" $HOME é")
	if err := os.Mkdir(chdirTo, 0o755); err != nil {
		t.Fatal(err)
	}
	perExec := map[string]*string{"ENVD_T_PRESET": nil}
	for k, v := range tricky {
		perExec[k] = ptr(v)
	}
	setCode, err := startup.SetEnvCode(language, perExec)
	if err != nil {
		t.Fatal(err)
	}
	globalCode, err := startup.SetGlobalEnvCode(language, map[string]*string{"ENVD_T_GLOBAL": ptr("global 'v'\nx")})
	if err != nil {
		t.Fatal(err)
	}
	restoreCode, err := startup.RestoreEnvCode(language)
	if err != nil {
		t.Fatal(err)
	}
	chdirCode, err := startup.ChdirCode(language, chdirTo)
	if err != nil {
		t.Fatal(err)
	}
	cells := []cell{
		{Code: s.preset, Silent: true},
		{Code: globalCode, Silent: true},
		{Code: setCode, Silent: true},
		{Code: s.dump},
		{Code: restoreCode, Silent: true},
		{Code: s.dump},
		{Code: restoreCode, Silent: true},
		{Code: chdirCode, Silent: true},
		{Code: s.getwd},
		// Prepended to a user cell instead of a silent execution.
		{Code: setCode + "\n" + s.dump},
		{Code: restoreCode, Silent: true},
	}
	res := runKernelGrace(t, kernel, cwd, env, cells, grace)
	for i, r := range res {
		for _, m := range r.Messages {
			if m.Late && m.MsgType != "status" {
				t.Logf("%s kernel: cell %d: %s arrived after status idle", kernel, i, m.MsgType)
			}
		}
	}
	for _, i := range []int{0, 1, 2, 4, 6, 7, 10} {
		res[i].mustOK(t, "silent cell "+strconv.Itoa(i))
		if errs := res[i].errors(t); len(errs) > 0 {
			t.Errorf("cell %d: %+v", i, errs)
		}
	}
	want := map[string]any{"ENVD_T_PRESET": nil, "ENVD_T_GLOBAL": "global 'v'\nx"}
	for k, v := range tricky {
		want[k] = v
	}
	res[3].mustOK(t, "dump")
	assertEnvJSON(t, "set", strings.TrimSpace(res[3].stdout(t)), want)
	res[5].mustOK(t, "dump restored")
	assertEnvJSON(t, "restored", strings.TrimSpace(res[5].stdout(t)), map[string]any{
		"ENVD_T_PRESET": "preset", "ENVD_T_QUOTES": "orig", "ENVD_T_GLOBAL": "global 'v'\nx",
		"ENVD_T_NEWLINE": nil, "ENVD_T_UNICODE": nil, "ENVD_T_EMPTY": nil,
	})
	res[9].mustOK(t, "prepended")
	assertEnvJSON(t, "prepended", strings.TrimSpace(res[9].stdout(t)), want)
	if rs := res[9].results(t); len(rs) != 0 {
		t.Errorf("prepended set code produced results: %+v", rs)
	}
	res[8].mustOK(t, "getwd")
	out := strings.TrimSpace(res[8].stdout(t))
	if strings.HasPrefix(out, `"`) {
		if err := json.Unmarshal([]byte(out), &out); err != nil {
			t.Fatalf("working directory %s: %v", out, err)
		}
	}
	if out != chdirTo {
		t.Errorf("working directory: %q, want %q", out, chdirTo)
	}
}

func TestRKernel(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("R"); err != nil {
		t.Skip("R is not installed (apt-get install r-base-core r-cran-irkernel)")
	}
	if !kernelNames(t, nil)["ir"] {
		t.Skip("IRkernel kernelspec 'ir' not found (apt-get install r-cran-irkernel)")
	}
	// Read back through a child process that prints ASCII-only JSON, so the
	// check does not depend on how R prints non-ASCII in the locale.
	viaPython := func(code string) string {
		return `cat(system2("` + python + `", c("-c", shQuote('` + code + `')), stdout = TRUE), sep = "\n")`
	}
	script := envScript{
		preset: `Sys.setenv(ENVD_T_PRESET = "preset", ENVD_T_QUOTES = "orig")`,
		dump:   viaPython(`import os, json; print(json.dumps({k: os.environ.get(k) for k in ` + pyList(envNames) + `}))`),
		getwd:  viaPython(`import os, json; print(json.dumps(os.getcwd()))`),
	}
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"default locale", nil},
		// Sandboxes may start Jupyter without LANG: values must not be
		// mangled into "<U+00E9>" by R's native-encoding translation.
		{"C locale", []string{"LANG=C", "LC_ALL=C"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runEnvRoundTrip(t, "r", "ir", t.TempDir(), tc.env, script)
		})
	}
}

const denoBinary = "/opt/envd-kernels/node_modules/@deno/linux-x64-glibc/deno"

func TestDenoKernel(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(denoBinary); err != nil {
		t.Skipf("Deno is not installed at %s", denoBinary)
	}
	// Our own kernelspec, so the test does not depend on how Deno's was
	// installed.
	jp := t.TempDir()
	spec := map[string]any{
		"argv":         []string{denoBinary, "jupyter", "--kernel", "--conn", "{connection_file}"},
		"display_name": "Deno (envd test)",
		"language":     "typescript",
		"env":          map[string]string{"NO_COLOR": "1"},
	}
	b, _ := json.Marshal(spec)
	if err := os.MkdirAll(filepath.Join(jp, "kernels", "envd-test-deno"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(jp, "kernels", "envd-test-deno", "kernel.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"JUPYTER_PATH=" + layout(t).JupyterPath + string(os.PathListSeparator) + jp}
	for _, language := range []string{"javascript", "typescript"} {
		t.Run(language, func(t *testing.T) {
			// Deno's kernel sometimes publishes console.log output after
			// status idle: read a little longer (and log it when it happens).
			runEnvRoundTripGrace(t, language, "envd-test-deno", t.TempDir(), env, envScript{
				preset: `Deno.env.set("ENVD_T_PRESET", "preset"); Deno.env.set("ENVD_T_QUOTES", "orig");`,
				dump: `console.log(JSON.stringify(Object.fromEntries(` + pyList(envNames) +
					`.map((k) => [k, Deno.env.get(k) ?? null]))))`,
				getwd: `console.log(Deno.cwd())`,
			}, 0.5)
		})
	}
}

// TestJavaSnippets runs the Java env/chdir code in the jshell tool (IJava is not
// packaged by Debian, but the snippets are plain Java statements).
func TestJavaSnippets(t *testing.T) {
	t.Parallel()
	jshell, err := exec.LookPath("jshell")
	if err != nil {
		t.Skip("jshell is not installed")
	}
	perExec := map[string]*string{"ENVD_T_PRESET": nil}
	for k, v := range tricky {
		perExec[k] = ptr(v)
	}
	set, err := startup.SetEnvCode("java", perExec)
	if err != nil {
		t.Fatal(err)
	}
	global, _ := startup.SetGlobalEnvCode("java", map[string]*string{"ENVD_T_QUOTES": ptr("global")})
	restore, _ := startup.RestoreEnvCode("java")
	chdir, _ := startup.ChdirCode("java", "/tmp/it's \"x\" é")
	dump := `for (String k : new String[]{"ENVD_T_QUOTES", "ENVD_T_NEWLINE", "ENVD_T_UNICODE", "ENVD_T_EMPTY", "ENVD_T_PRESET"}) { ` +
		`String v = System.getProperty(k); System.out.println(k + "=" + (v == null ? "null" : ` +
		`v.chars().mapToObj(Integer::toString).collect(java.util.stream.Collectors.joining(",")))); }`
	script := strings.Join([]string{
		`System.setProperty("ENVD_T_PRESET", "preset");`,
		`System.setProperty("ENVD_T_QUOTES", "orig");`,
		set,
		`System.out.println("--set");`,
		dump,
		global,
		restore,
		`System.out.println("--restored");`,
		dump,
		chdir,
		`System.out.println("--cwd " + System.getProperty("user.dir").chars().mapToObj(Integer::toString).collect(java.util.stream.Collectors.joining(",")));`,
		`/exit`,
	}, "\n") + "\n"
	file := filepath.Join(t.TempDir(), "snippets.jsh")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(jshell, "-q", "-R-Duser.home="+t.TempDir(), file).CombinedOutput()
	if err != nil {
		t.Fatalf("jshell: %v\n%s", err, out)
	}
	units := func(s string) string {
		var parts []string
		for _, u := range utf16.Encode([]rune(s)) {
			parts = append(parts, strconv.Itoa(int(u)))
		}
		return strings.Join(parts, ",")
	}
	var want []string
	want = append(want, "--set")
	for _, k := range []string{"ENVD_T_QUOTES", "ENVD_T_NEWLINE", "ENVD_T_UNICODE", "ENVD_T_EMPTY"} {
		want = append(want, k+"="+units(tricky[k]))
	}
	want = append(want, "ENVD_T_PRESET=null", "--restored",
		"ENVD_T_QUOTES="+units("global"), "ENVD_T_NEWLINE=null", "ENVD_T_UNICODE=null", "ENVD_T_EMPTY=null",
		"ENVD_T_PRESET="+units("preset"), "--cwd "+units("/tmp/it's \"x\" é"))
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "ENVD_") || strings.HasPrefix(l, "--") {
			lines = append(lines, l)
		}
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("jshell output:\n%s\nwant:\n%s\nfull output:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"), out)
	}
}

func TestCodeBuilders(t *testing.T) {
	t.Parallel()
	for _, lang := range []string{"python", "Python", "javascript", "js", "ts", "typescript", "deno", "r", "bash", "java"} {
		code, err := startup.SetEnvCode(lang, map[string]*string{"B": ptr("x"), "A": nil})
		if err != nil {
			t.Fatalf("%s: %v", lang, err)
		}
		again, _ := startup.SetEnvCode(lang, map[string]*string{"A": nil, "B": ptr("x")})
		if code != again {
			t.Errorf("%s: code is not deterministic", lang)
		}
		if strings.Contains(code, "\n") {
			t.Errorf("%s: set code is not one line: %q", lang, code)
		}
		if code, _ := startup.SetEnvCode(lang, nil); code != "" {
			t.Errorf("%s: empty vars gave %q", lang, code)
		}
		for _, f := range []func(string) (string, error){startup.RestoreEnvCode, func(l string) (string, error) { return startup.ChdirCode(l, "/x") }} {
			if c, err := f(lang); err != nil || c == "" || strings.Contains(c, "\n") {
				t.Errorf("%s: %q %v", lang, c, err)
			}
		}
	}
	// Values and paths never appear raw: only as ASCII JSON.
	code, _ := startup.SetEnvCode("python", map[string]*string{"K": ptr("a'b\"c\nd é")})
	if want := `__envd_setenv("{\"K\":\"a'b\\\"c\\nd \\u00e9\"}");`; code != want {
		t.Errorf("python set code:\n%s\nwant\n%s", code, want)
	}
	code, _ = startup.SetEnvCode("bash", map[string]*string{"K": ptr("a'b\n😀")})
	if want := `#%envd setenv {"K":"a'b\n\ud83d\ude00"}`; code != want {
		t.Errorf("bash set code %s, want %s", code, want)
	}
	for _, tc := range []struct {
		lang string
		vars map[string]*string
	}{
		{"python", map[string]*string{"": ptr("x")}},
		{"python", map[string]*string{"A=B": ptr("x")}},
		{"python", map[string]*string{"A": ptr("nul\x00")}},
		{"bash", map[string]*string{"not-an-identifier": ptr("x")}},
		{"bash", map[string]*string{"1X": ptr("x")}},
	} {
		if _, err := startup.SetEnvCode(tc.lang, tc.vars); err == nil {
			t.Errorf("%s %v: no error", tc.lang, tc.vars)
		}
	}
	if _, err := startup.SetEnvCode("cobol", map[string]*string{"A": ptr("x")}); !errors.Is(err, startup.ErrUnsupportedLanguage) {
		t.Errorf("unknown language: %v", err)
	}
	if _, err := startup.ChdirCode("python", ""); err == nil {
		t.Error("empty dir: no error")
	}
}

func TestInstall(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, err := startup.Install(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		filepath.Join(l.IPythonDir, "profile_default", "ipython_kernel_config.py"),
		filepath.Join(l.IPythonDir, "profile_default", "startup", "00-envd.py"),
		filepath.Join(l.PythonPath, "envd_kernel", "__init__.py"),
		filepath.Join(l.PythonPath, "envd_kernel", "charts.py"),
		filepath.Join(l.PythonPath, "envd_bash_kernel", "__main__.py"),
		filepath.Join(l.JupyterPath, "kernels", "bash", "kernel.json"),
		l.BashKernelSpec,
		l.MatplotlibRC,
	} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("missing %s", p)
		}
	}
	var spec struct {
		Argv []string          `json:"argv"`
		Env  map[string]string `json:"env"`
	}
	b, _ := os.ReadFile(l.BashKernelSpec)
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	if want := []string{startup.DefaultPython, "-P", "-m", "envd_bash_kernel", "-f", "{connection_file}"}; strings.Join(spec.Argv, " ") != strings.Join(want, " ") {
		t.Errorf("argv %v", spec.Argv)
	}
	if spec.Env["PYTHONPATH"] != l.PythonPath {
		t.Errorf("PYTHONPATH %q, want %q", spec.Env["PYTHONPATH"], l.PythonPath)
	}
	rc, _ := os.ReadFile(l.MatplotlibRC)
	if !strings.Contains(string(rc), "font.family: sans-serif") {
		t.Errorf("matplotlibrc: %s", rc)
	}

	// Idempotent: a second install rewrites nothing.
	before := snapshot(t, dir, true)
	if _, err := startup.Install(dir); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(t, dir, true); strings.Join(before, "\n") != strings.Join(after, "\n") {
		t.Errorf("second install touched files:\n%v\n%v", before, after)
	}

	// It removes stale files of ours, repairs modified ones, keeps others.
	before = snapshot(t, dir, false)
	stale := []string{
		filepath.Join(l.PythonPath, "envd_kernel", "old_module.py"),
		filepath.Join(l.IPythonDir, "profile_default", "startup", "01-envd-old.py"),
	}
	for _, p := range stale {
		if err := os.WriteFile(p, []byte("raise SystemExit"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	userScript := filepath.Join(l.IPythonDir, "profile_default", "startup", "50-user.py")
	if err := os.WriteFile(userScript, []byte("x = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A modified file is put back.
	if err := os.WriteFile(filepath.Join(l.PythonPath, "envd_kernel", "env.py"), []byte("broken"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := startup.Install(dir); err != nil {
		t.Fatal(err)
	}
	for _, p := range stale {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("stale %s not removed", p)
		}
	}
	if _, err := os.Stat(userScript); err != nil {
		t.Errorf("user startup script removed: %v", err)
	}
	os.Remove(userScript)
	if after := snapshot(t, dir, false); strings.Join(before, "\n") != strings.Join(after, "\n") {
		t.Errorf("repair install differs:\n%v\n%v", before, after)
	}
}

func TestEnviron(t *testing.T) {
	t.Parallel()
	l := startup.Layout{IPythonDir: "/i", MatplotlibRC: "/m/rc", JupyterPath: "/j"}
	got := l.Environ([]string{"PATH=/bin", "IPYTHONDIR=/old", "JUPYTER_PATH=/a:/j:/b", "X=1"})
	want := []string{"PATH=/bin", "X=1", "IPYTHONDIR=/i", "MATPLOTLIBRC=/m/rc", "JUPYTER_PATH=/j:/a:/b"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("Environ: %v, want %v", got, want)
	}
	if got := l.Env(); strings.Join(got, " ") != "IPYTHONDIR=/i MATPLOTLIBRC=/m/rc JUPYTER_PATH=/j" {
		t.Errorf("Env: %v", got)
	}
}

// snapshot describes every file under dir: path, mode, size, content (and
// modification time if withTime).
func snapshot(t *testing.T, dir string, withTime bool) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		line := p + " " + fi.Mode().String() + " " + strconv.Itoa(len(b)) + " " + string(b)
		if withTime {
			line += " " + fi.ModTime().String()
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}
