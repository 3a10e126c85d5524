package startup_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envd-dev/envd/internal/jupyter/startup"
	"github.com/envd-dev/envd/internal/testutil"
)

// requireJava fails the test when Install found no JDK: the Java kernel is
// part of what envd installs (scripts/install-deps.sh).
func requireJava(t *testing.T) startup.Layout {
	t.Helper()
	l := layout(t)
	if l.JavaKernelSpec == "" {
		t.Fatalf("no Java kernel: no JDK with jshell (on PATH or %s); apt-get install openjdk-17-jdk-headless "+
			"(scripts/install-deps.sh installs it)", startup.DefaultJShell)
	}
	return l
}

// javaDump prints envNames as a JSON object of system properties (ASCII
// only), in one statement.
var javaDump = `System.out.println(java.util.stream.Stream.of(` + strings.Trim(pyList(envNames), "[]") + `).map(k -> { ` +
	`String v = System.getProperty(k); if (v == null) return "\"" + k + "\": null"; ` +
	`StringBuilder b = new StringBuilder("\"" + k + "\": \""); for (char c : v.toCharArray()) { ` +
	`if (c == '"' || c == '\\') b.append('\\').append(c); ` +
	`else if (c < 0x20 || c > 0x7e) b.append(String.format("\\u%04x", (int) c)); else b.append(c); } ` +
	`return b.append('"').toString(); }).collect(java.util.stream.Collectors.joining(", ", "{", "}")));`

// TestJavaKernelEnv runs envd's env and chdir code (system properties)
// through the Java kernel.
func TestJavaKernelEnv(t *testing.T) {
	t.Parallel()
	requireJava(t)
	runEnvRoundTrip(t, "java", startup.JavaKernelName, t.TempDir(), nil, envScript{
		preset: `System.setProperty("ENVD_T_PRESET", "preset"); System.setProperty("ENVD_T_QUOTES", "orig");`,
		dump:   javaDump,
		getwd:  `System.out.println(System.getProperty("user.dir"));`,
	})
}

func TestJavaKernel(t *testing.T) {
	t.Parallel()
	requireJava(t)
	work := t.TempDir()
	released := filepath.Join(testutil.WorkDir(t), "one-received")

	type javaCell struct {
		name string
		cell cell
	}
	cells := []javaCell{
		// The first cell waits for the JVMs to start.
		{"cwd", cell{Code: `System.getProperty("user.dir") + "|" + Path.of("").toAbsolutePath()`, Timeout: 240}},
		{"state set", cell{Code: "int x = 41;\n" +
			"String greet(String n) { return \"hi \" + n; }\n" +
			"class Point { final int a; Point(int a) { this.a = a; } }\n" +
			"import java.time.*;"}},
		{"state get", cell{Code: "System.out.println(x + 1);\nSystem.out.println(greet(\"bob\"));\n" +
			"System.out.println(new Point(7).a);\nSystem.out.println(Duration.ofSeconds(61).toMinutes());"}},
		{"result int", cell{Code: "x + 1"}},
		{"result string", cell{Code: `"a\tb \"q\" \\ é " + (char) 1`}},
		{"result char", cell{Code: `'c'`}},
		{"result null", cell{Code: `System.getProperty("envd.t.unset")`}},
		{"declaration", cell{Code: "int y = 5;"}},
		{"last expression only", cell{Code: "int k = 2;\nk * 10;\n\"k=\" + k"}},
		{"print", cell{Code: `System.out.print("abc")`}},
		// "two" waits for the driver to have received "one": buffered
		// output would never get there (the cell then times out).
		{"streaming", cell{Code: `System.out.println("one");` + "\n" +
			`while (!Files.exists(Path.of(` + strings.Trim(pyList([]string{released}), "[]") + `))) Thread.sleep(20);` + "\n" +
			`System.out.println("two");`, TouchOnStream: released, Timeout: 120}},
		{"stderr", cell{Code: `System.out.println("out"); System.err.println("err");`}},
		{"exception", cell{Code: "void boom(int n) {\n  if (n == 0) throw new IllegalStateException(\"boom at zero\");\n  boom(n - 1);\n}\n" +
			"System.out.println(\"before\");\nboom(2);\nSystem.out.println(\"not reached\");"}},
		{"cause", cell{Code: `throw new RuntimeException("outer", new IOException("inner"));`}},
		{"custom exception", cell{Code: "class MyErr extends RuntimeException { MyErr(String m) { super(m); } }\nthrow new MyErr(\"mine\");"}},
		{"compile error", cell{Code: "int z = 1;\nint w = undefinedVar + 1;\nSystem.out.println(\"not reached\");"}},
		{"after compile error", cell{Code: "z"}},
		{"syntax error", cell{Code: "int q = ;"}},
		{"unicode", cell{Code: `System.out.println("é 漢字 😀");`}},
		{"interrupt loop", cell{Code: "System.out.println(\"looping\");\nlong n = 0;\nwhile (true) { n++; }\nSystem.out.println(\"not reached\");",
			InterruptAfter: fptr(2), Timeout: 60}},
		{"interrupt sleep", cell{Code: "System.out.println(\"sleeping\");\nThread.sleep(600_000);\nSystem.out.println(\"not reached\");",
			InterruptAfter: fptr(2), Timeout: 60}},
		{"after interrupt", cell{Code: `x + " " + greet("again") + " " + (n > 0)`}},
		{"silent", cell{Code: `System.setProperty("envd.t.silent", "kept"); System.out.println("hidden"); 99`, Silent: true}},
		{"exit", cell{Code: "System.out.println(\"bye\");\nSystem.exit(4);", Timeout: 240}},
		{"after exit", cell{Code: `System.getProperty("envd.t.silent") + " " + System.getProperty("user.dir")`, Timeout: 240}},
		{"state lost", cell{Code: "x"}},
	}
	plain := make([]cell, len(cells))
	for i, c := range cells {
		plain[i] = c.cell
	}
	res := runKernel(t, startup.JavaKernelName, work, nil, plain)
	got := map[string]cellResult{}
	for i, c := range cells {
		got[c.name] = res[i]
	}
	idle := func(r cellResult) float64 {
		if len(r.Messages) == 0 {
			return 0
		}
		return r.Messages[len(r.Messages)-1].T
	}
	t.Logf("first execution (JVMs start): %.2fs; x + 1: %.3fs; after System.exit: %.2fs",
		idle(got["cwd"]), idle(got["result int"]), idle(got["after exit"]))

	result := func(t *testing.T, name, want string) {
		t.Helper()
		r := got[name]
		r.mustOK(t, name)
		rs := r.results(t)
		if len(rs) != 1 || rs[0].MsgType != "execute_result" {
			t.Fatalf("%s: results %+v, want one execute_result", name, rs)
		}
		var text string
		if err := json.Unmarshal(rs[0].Data["text/plain"], &text); err != nil || text != want {
			t.Errorf("%s: result %s, want %q", name, rs[0].Data["text/plain"], want)
		}
	}
	stdoutIs := func(t *testing.T, name, want string) {
		t.Helper()
		got[name].mustOK(t, name)
		if out := got[name].stdout(t); out != want {
			t.Errorf("%s: stdout %q, want %q", name, out, want)
		}
		if rs := got[name].results(t); len(rs) != 0 {
			t.Errorf("%s: results %+v, want none", name, rs)
		}
	}
	wantError := func(t *testing.T, name, ename string) kernelError {
		t.Helper()
		r := got[name]
		if r.Error != "" {
			t.Fatalf("%s: %s", name, r.Error)
		}
		errs := r.errors(t)
		if r.status() != "error" || r.Reply["ename"] != ename || len(errs) != 1 || errs[0].Ename != ename {
			t.Fatalf("%s: reply %v, iopub errors %+v; want one %s", name, r.Reply, errs, ename)
		}
		if r.Reply["evalue"] != errs[0].Evalue {
			t.Errorf("%s: reply evalue %v, iopub %q", name, r.Reply["evalue"], errs[0].Evalue)
		}
		return errs[0]
	}

	t.Run("cwd", func(t *testing.T) {
		result(t, "cwd", work+"|"+work)
	})
	t.Run("state persists", func(t *testing.T) {
		stdoutIs(t, "state set", "")
		stdoutIs(t, "state get", "42\nhi bob\n7\n1\n")
	})
	t.Run("results", func(t *testing.T) {
		result(t, "result int", "42")
		result(t, "result string", "a\tb \"q\" \\ é \x01")
		result(t, "result char", "c")
		result(t, "result null", "null")
		stdoutIs(t, "declaration", "")
		result(t, "last expression only", "k=2")
		stdoutIs(t, "print", "abc")
		stdoutIs(t, "unicode", "é 漢字 😀\n")
	})
	t.Run("streaming", func(t *testing.T) {
		r := got["streaming"]
		r.mustOK(t, "streaming")
		var texts []string
		for _, s := range r.streams(t) {
			texts = append(texts, s.Name+":"+s.Text)
		}
		if len(texts) != 2 || texts[0] != "stdout:one\n" || texts[1] != "stdout:two\n" {
			t.Fatalf("streams %q, want [one two] as separate messages", texts)
		}
		r = got["stderr"]
		r.mustOK(t, "stderr")
		if r.stdout(t) != "out\n" || r.stderr(t) != "err\n" {
			t.Errorf("stderr: stdout %q stderr %q", r.stdout(t), r.stderr(t))
		}
	})
	t.Run("exceptions", func(t *testing.T) {
		e := wantError(t, "exception", "java.lang.IllegalStateException")
		if e.Evalue != "boom at zero" || len(e.Traceback) < 4 || e.Traceback[0] != "java.lang.IllegalStateException: boom at zero\n" ||
			strings.Count(strings.Join(e.Traceback, ""), "\tat boom(#") != 3 {
			t.Errorf("exception: %q %q", e.Evalue, e.Traceback)
		}
		if out := got["exception"].stdout(t); out != "before\n" {
			t.Errorf("exception: stdout %q (the cell must stop at the exception)", out)
		}
		e = wantError(t, "cause", "java.lang.RuntimeException")
		if e.Evalue != "outer" || !strings.Contains(strings.Join(e.Traceback, ""), "\nCaused by: java.io.IOException: inner\n") {
			t.Errorf("cause: %q %q", e.Evalue, e.Traceback)
		}
		e = wantError(t, "custom exception", "MyErr")
		if e.Evalue != "mine" || e.Traceback[0] != "MyErr: mine\n" {
			t.Errorf("custom exception: %q %q", e.Evalue, e.Traceback)
		}
	})
	t.Run("compile errors", func(t *testing.T) {
		e := wantError(t, "compile error", "CompilationException")
		tb := strings.Join(e.Traceback, "")
		if !strings.Contains(e.Evalue, "cannot find symbol") || !strings.Contains(tb, "int w = undefinedVar + 1;\n        ^") {
			t.Errorf("compile error: %q\n%s", e.Evalue, tb)
		}
		if out := got["compile error"].stdout(t); out != "" {
			t.Errorf("compile error: stdout %q", out)
		}
		// The snippets before the error ran.
		result(t, "after compile error", "1")
		e = wantError(t, "syntax error", "CompilationException")
		if e.Evalue == "" || len(e.Traceback) == 0 {
			t.Errorf("syntax error: %q %q", e.Evalue, e.Traceback)
		}
	})
	t.Run("interrupt", func(t *testing.T) {
		wantError(t, "interrupt loop", "KeyboardInterrupt")
		if out := got["interrupt loop"].stdout(t); out != "looping\n" {
			t.Errorf("interrupt loop: stdout %q", out)
		}
		wantError(t, "interrupt sleep", "KeyboardInterrupt")
		if out := got["interrupt sleep"].stdout(t); out != "sleeping\n" {
			t.Errorf("interrupt sleep: stdout %q", out)
		}
		result(t, "after interrupt", "41 hi again true")
	})
	t.Run("silent", func(t *testing.T) {
		r := got["silent"]
		r.mustOK(t, "silent")
		if len(r.streams(t)) != 0 || len(r.results(t)) != 0 {
			t.Errorf("silent: messages %+v", r.Messages)
		}
	})
	t.Run("exit restarts", func(t *testing.T) {
		wantError(t, "exit", "EnvdJavaKernelError")
		if !strings.Contains(got["exit"].stderr(t), "the state was lost") {
			t.Errorf("exit: stderr %q", got["exit"].stderr(t))
		}
		// Silent executions (envd's setup) are run again; the rest is gone.
		result(t, "after exit", "kept "+work)
		wantError(t, "state lost", "CompilationException")
	})
}

func TestInstallJava(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, err := startup.InstallWith(dir, startup.Options{JShell: filepath.Join(dir, "no-jshell")})
	if err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(dir, "kernels", startup.JavaKernelName)
	if l.JavaKernelSpec != "" || l.Java != "" {
		t.Errorf("without jshell: layout %+v", l)
	}
	if _, err := os.Stat(spec); !os.IsNotExist(err) {
		t.Errorf("without jshell: %s exists (%v)", spec, err)
	}

	// A JDK laid out as Debian does: bin/jshell and bin/java, reached
	// through a link.
	jdk := filepath.Join(t.TempDir(), "jdk", "bin")
	if err := os.MkdirAll(jdk, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"jshell", "java"} {
		if err := os.WriteFile(filepath.Join(jdk, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(t.TempDir(), "jshell")
	if err := os.Symlink(filepath.Join(jdk, "jshell"), link); err != nil {
		t.Fatal(err)
	}
	l, err = startup.InstallWith(dir, startup.Options{JShell: link})
	if err != nil {
		t.Fatal(err)
	}
	if l.JavaKernelSpec != filepath.Join(spec, "kernel.json") || l.Java != filepath.Join(jdk, "java") {
		t.Fatalf("with jshell: layout %+v", l)
	}
	var ks struct {
		Argv          []string          `json:"argv"`
		Language      string            `json:"language"`
		InterruptMode string            `json:"interrupt_mode"`
		Env           map[string]string `json:"env"`
	}
	b, err := os.ReadFile(l.JavaKernelSpec)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &ks); err != nil {
		t.Fatal(err)
	}
	if want := startup.DefaultPython + " -P -m envd_java_kernel -f {connection_file}"; strings.Join(ks.Argv, " ") != want ||
		ks.Language != "java" || ks.InterruptMode != "signal" ||
		ks.Env["PYTHONPATH"] != l.PythonPath || ks.Env["ENVD_JAVA"] != l.Java {
		t.Errorf("kernelspec: %s", b)
	}
	if _, err := os.Stat(filepath.Join(l.PythonPath, "envd_java_kernel", "EnvdJShell.java")); err != nil {
		t.Errorf("agent source: %v", err)
	}

	// A java launcher that is not executable is no JDK.
	if err := os.Chmod(filepath.Join(jdk, "java"), 0o644); err != nil {
		t.Fatal(err)
	}
	if l, err = startup.InstallWith(dir, startup.Options{JShell: link}); err != nil {
		t.Fatal(err)
	}
	if l.JavaKernelSpec != "" {
		t.Errorf("non-executable java: layout %+v", l)
	}
	if _, err := os.Stat(spec); !os.IsNotExist(err) {
		t.Errorf("the kernelspec of a JDK that is gone was left: %v", err)
	}
}

func TestJavaKernelListed(t *testing.T) {
	t.Parallel()
	requireJava(t)
	if !kernelNames(t, nil)[startup.JavaKernelName] {
		t.Errorf("kernelspec %q is not listed by Jupyter", startup.JavaKernelName)
	}
}
