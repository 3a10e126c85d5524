package interpreter_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/envd-dev/envd/internal/interpreter"
	"github.com/envd-dev/envd/internal/testutil"
)

// TestKernelsIgnorePlantedStartupFiles: a kernel starts in its context's
// working directory, which sandbox code may write, and envd may run it as
// root. What a language would read from there while starting (python -m's
// sys.path[0], R's .Rprofile, .Renviron and .RData, the Java agent's class
// path) must not run; modules beside the code still import once it runs.
func TestKernelsIgnorePlantedStartupFiles(t *testing.T) {
	t.Parallel()
	dir, checkMarkers := plantStartupFiles(t)
	for _, tc := range plantedCases {
		t.Run(tc.lang, func(t *testing.T) {
			c := newContext(t, tc.lang, dir)
			if got := run(t, c.ID, tc.code).mustOK(t).out(); got != tc.want {
				t.Errorf("stdout %q, want %q", got, tc.want)
			}
		})
	}
	checkMarkers()
}

// TestPrestartedKernelsIgnorePlantedStartupFiles: the same for prestarted
// kernels (python, r, bash) moved into a planted directory at handover.
func TestPrestartedKernelsIgnorePlantedStartupFiles(t *testing.T) {
	t.Parallel()
	dir, checkMarkers := plantStartupFiles(t)
	eng := poolEngine(t, interpreter.Options{WarmKernels: interpreter.WarmKernels{"python": 1, "r": 1, "bash": 1}})
	for _, tc := range plantedCases {
		if tc.lang == "java" {
			continue // not prestarted
		}
		t.Run(tc.lang, func(t *testing.T) {
			waitWarm(t, eng, tc.lang, 1)
			c, err := eng.CreateContext(testutil.Context(t, kernelTimeout), tc.lang, dir)
			if err != nil {
				t.Fatal(err)
			}
			if !eng.PrestartedForTest(c.ID) {
				t.Fatal("the context did not take the prestarted kernel")
			}
			if got, _ := runOn(t, eng, c.ID, tc.code); got != tc.want {
				t.Errorf("stdout %q, want %q", got, tc.want)
			}
		})
	}
	checkMarkers()
}

// plantedCases run in a planted directory: what they print shows that
// nothing planted ran, and that modules beside the code import.
var plantedCases = []struct{ lang, code, want string }{
	{"python", "import helper\nprint(helper.VALUE)", "42\n"},
	{"r", `cat(Sys.getenv("ENVD_PLANTED", "unset"), exists(".First"), "\n")`, "unset FALSE \n"},
	{"bash", "echo ok", "ok\n"},
	{"java", `System.out.println("ok")`, "ok\n"},
}

// plantStartupFiles makes a directory holding what a language would read
// from its working directory while it starts (python -m's sys.path[0],
// R's .Rprofile, .Renviron and .RData, the Java agent's class path), each
// leaving a marker file when it runs, and a module beside the code
// (helper.py). checkMarkers fails the test if any marker exists.
func plantStartupFiles(t *testing.T) (dir string, checkMarkers func()) {
	t.Helper()
	dir = t.TempDir()
	marker := func(name string) string { return filepath.Join(dir, "ran-"+name) }
	plant := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []string{"ipykernel_launcher", "json", "envd_bash_kernel", "envd_java_kernel"} {
		plant(m+".py", "open("+pyQuote(marker(m))+", 'w').close()\n")
	}
	plant("helper.py", "VALUE = 42\n")
	plant(".Rprofile", "file.create("+pyQuote(marker("Rprofile"))+")\n")
	plant(".Renviron", "ENVD_PLANTED=yes\n")
	// A workspace whose .First runs when R restores it.
	rdata := exec.Command("Rscript", "--no-init-file", "--no-environ", "-e", ".First <- function() file.create("+pyQuote(marker("RData"))+"); save.image('.RData')")
	rdata.Dir = dir
	if out, err := rdata.CombinedOutput(); err != nil {
		t.Fatalf("make .RData: %v\n%s", err, out)
	}
	// A compiled EnvdJShell in "." would win over the agent's own source.
	plant("EnvdJShell.java", "public class EnvdJShell { public static void main(String[] a) throws Exception {"+
		" new java.io.File("+pyQuote(marker("java"))+").createNewFile(); } }\n")
	// So would classes named as JShell names the ones it generates for
	// snippets (the startup imports run before any user code), in the
	// user code's JVM.
	srcs := []string{filepath.Join(dir, "EnvdJShell.java")}
	if err := os.Mkdir(filepath.Join(dir, "replsrc"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 40; i++ {
		name := "$JShell$" + strconv.Itoa(i)
		p := filepath.Join(dir, "replsrc", name+".java")
		srcs = append(srcs, p)
		if err := os.WriteFile(p, []byte("package REPL; public class "+name+" { static { try { new java.io.File("+
			pyQuote(marker("jshell-snippet"))+").createNewFile(); } catch (Exception e) {} } }\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	javac := exec.Command("javac", append([]string{"-d", dir}, srcs...)...)
	if out, err := javac.CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	if err := os.Remove(filepath.Join(dir, "EnvdJShell.java")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "replsrc")); err != nil {
		t.Fatal(err)
	}
	return dir, func() {
		t.Helper()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "ran-") {
				t.Errorf("a planted file ran while a kernel started: %s", e.Name())
			}
		}
	}
}

// pyQuote quotes s for Python, R and Java alike (a double-quoted string).
func pyQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
