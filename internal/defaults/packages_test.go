package defaults_test

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envd-dev/envd/internal/defaults"
)

// fakeVenv makes the parts of a virtual environment FindPackages checks.
func fakeVenv(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pyvenv.cfg"), []byte("home = /usr/bin\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/bin/python3", filepath.Join(dir, "bin", "python")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestFindPackages reads the variables: set, they must name what exists;
// set but empty, the piece is off. (Not parallel: t.Setenv.)
func TestFindPackages(t *testing.T) {
	venv, lib := fakeVenv(t), t.TempDir()
	notVenv := t.TempDir()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		venv, lib string
		want      defaults.Packages
		wantErr   string // substring; "" for none
	}{
		{name: "both", venv: venv, lib: lib, want: defaults.Packages{PythonVenv: venv, RLibrary: lib}},
		{name: "off", venv: "", lib: "", want: defaults.Packages{}},
		{name: "missing venv", venv: filepath.Join(venv, "nope"), lib: "", wantErr: "ENVD_PYTHON_VENV=" + filepath.Join(venv, "nope") + ": no such file or directory"},
		{name: "not a venv", venv: notVenv, lib: "", wantErr: "ENVD_PYTHON_VENV=" + notVenv + ": not a virtual environment (pyvenv.cfg: no such file or directory)"},
		{name: "relative venv", venv: "venv", lib: "", wantErr: "ENVD_PYTHON_VENV=venv: not an absolute path"},
		{name: "library is a file", venv: "", lib: file, wantErr: "ENVD_R_LIBRARY=" + file + ": not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(defaults.PythonVenvVar, tt.venv)
			t.Setenv(defaults.RLibraryVar, tt.lib)
			got, err := defaults.FindPackages()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("FindPackages() = %+v, %v; want an error with %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("FindPackages() = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestPackagesEnv(t *testing.T) {
	t.Parallel()
	p := defaults.Packages{PythonVenv: "/v", RLibrary: "/r"}
	tests := []struct {
		name, path, want string
	}{
		{name: "prepended", path: "/usr/bin:/bin", want: "/v/bin:/usr/bin:/bin"},
		{name: "moved first, empty entries dropped", path: "/usr/bin::/v/bin:/bin", want: "/v/bin:/usr/bin:/bin"},
		{name: "empty is the standard path", path: "", want: "/v/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want := map[string]string{"PATH": tt.want, "VIRTUAL_ENV": "/v", "R_LIBS": "/r"}
			if got := p.Env(tt.path); !maps.Equal(got, want) {
				t.Fatalf("Env(%q) = %v, want %v", tt.path, got, want)
			}
		})
	}
	if got := (defaults.Packages{}).Env("/bin"); len(got) != 0 {
		t.Fatalf("zero Packages: Env = %v, want nothing", got)
	}
	if got := (defaults.Packages{}).Python(); got != "" {
		t.Fatalf("zero Packages: Python = %q", got)
	}
	if got := p.Python(); got != "/v/bin/python" {
		t.Fatalf("Python = %q", got)
	}
}

// TestBaseEnv: the base is under /init's variables and the fixed ones, and
// InitEnv leaves it out (kernels keep their own PATH).
func TestBaseEnv(t *testing.T) {
	t.Parallel()
	d := defaults.New("root", map[string]string{"E2B_SANDBOX": "true"})
	base := map[string]string{"PATH": "/v/bin:/bin", "VIRTUAL_ENV": "/v", "E2B_SANDBOX": "base"}
	d.SetBaseEnv(base)
	base["PATH"] = "changed" // SetBaseEnv copies
	d.SetEnv(map[string]string{"PATH": "/init", "A": "1"})
	want := map[string]string{"PATH": "/init", "VIRTUAL_ENV": "/v", "A": "1", "E2B_SANDBOX": "true"}
	if got := d.Env(); !maps.Equal(got, want) {
		t.Fatalf("Env() = %v, want %v", got, want)
	}
	if got, want := d.InitEnv(), map[string]string{"PATH": "/init", "A": "1", "E2B_SANDBOX": "true"}; !maps.Equal(got, want) {
		t.Fatalf("InitEnv() = %v, want %v", got, want)
	}
	d.SetEnv(nil)
	if got := d.Env()["PATH"]; got != "/v/bin:/bin" {
		t.Fatalf("PATH = %q without /init's, want the base's", got)
	}
}
