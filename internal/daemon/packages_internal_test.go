package daemon

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envd-dev/envd/internal/defaults"
)

// TestCodeExecPackageEnv: commands get the package environment on top of
// envd's PATH, kernels' global variables leave it out, and a variable that
// names no virtual environment stops envd with a precise error. (Not
// parallel: t.Setenv.)
func TestCodeExecPackageEnv(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	venv := t.TempDir()
	if err := os.MkdirAll(filepath.Join(venv, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(venv, "pyvenv.cfg"), []byte("home = /usr/bin\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/bin/python3", filepath.Join(venv, "bin", "python")); err != nil {
		t.Fatal(err)
	}
	lib := t.TempDir()
	t.Setenv(defaults.PythonVenvVar, venv)
	t.Setenv(defaults.RLibraryVar, lib)
	t.Setenv("PATH", "/usr/bin:/bin")
	t.Setenv("LANG", "")

	defs := defaults.New("root", map[string]string{"E2B_SANDBOX": "true"})
	if _, err := newCodeExec(Config{NoJupyter: true}, log, defs, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	env := defs.Env()
	if want := venv + "/bin:/usr/bin:/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/sbin"; env["PATH"] != want ||
		env["VIRTUAL_ENV"] != venv || env["R_LIBS"] != lib || env["LANG"] != "C.UTF-8" {
		t.Fatalf("commands' env = %v, want PATH %s, VIRTUAL_ENV, R_LIBS and LANG", env, want)
	}
	for _, k := range []string{"PATH", "VIRTUAL_ENV", "R_LIBS"} {
		if v, ok := defs.InitEnv()[k]; ok {
			t.Errorf("kernels' global env has %s=%s", k, v)
		}
	}

	t.Setenv(defaults.PythonVenvVar, lib) // a directory, not a venv
	_, err := newCodeExec(Config{NoJupyter: true}, log, defaults.New("root", nil), nil, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "ENVD_PYTHON_VENV="+lib+": not a virtual environment") {
		t.Fatalf("newCodeExec with a bad venv: %v", err)
	}
}
