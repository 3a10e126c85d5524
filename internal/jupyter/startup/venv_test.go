package startup_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/envd-dev/envd/internal/jupyter/startup"
)

// resolvePython3 asks Debian's jupyter_client which kernelspec the server
// would start for "python3" with JUPYTER_PATH=jupyterPath.
func resolvePython3(t *testing.T, jupyterPath string) (dir string, argv []string) {
	t.Helper()
	cmd := exec.Command(python, "-c", `
import json
from jupyter_client.kernelspec import KernelSpecManager
s = KernelSpecManager().get_kernel_spec("python3")
print(json.dumps({"dir": s.resource_dir, "argv": s.argv, "language": s.language}))`)
	cmd.Env = append(os.Environ(), "JUPYTER_PATH="+jupyterPath)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("resolve the python3 kernelspec: %v", err)
	}
	var got struct {
		Dir      string   `json:"dir"`
		Argv     []string `json:"argv"`
		Language string   `json:"language"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	if got.Language != "python" {
		t.Errorf("python3 kernelspec language = %q", got.Language)
	}
	return got.Dir, got.Argv
}

// TestPythonVenvKernelSpec: with a venv, the python3 kernelspec Jupyter
// resolves is ours and runs the venv's python; installing again without
// one, it runs Debian's (still ours: -P, see rkernel.go).
func TestPythonVenvKernelSpec(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	venv := "/opt/envd-test-venv"
	l, err := startup.InstallWith(dir, startup.Options{PythonVenv: venv})
	if err != nil {
		t.Fatal(err)
	}
	specDir := filepath.Join(dir, "kernels", startup.PythonKernelName)
	gotDir, argv := resolvePython3(t, l.JupyterPath)
	if want := []string{venv + "/bin/python", "-P", "-m", "ipykernel_launcher", "-f", "{connection_file}"}; gotDir != specDir || !slices.Equal(argv, want) {
		t.Fatalf("python3 kernelspec: %s %q, want %s %q", gotDir, argv, specDir, want)
	}

	if _, err := startup.InstallWith(dir, startup.Options{}); err != nil {
		t.Fatal(err)
	}
	gotDir, argv = resolvePython3(t, l.JupyterPath)
	if want := []string{startup.DefaultPython, "-P", "-m", "ipykernel_launcher", "-f", "{connection_file}"}; gotDir != specDir || !slices.Equal(argv, want) {
		t.Fatalf("without venv: python3 kernelspec %s %q, want %s %q", gotDir, argv, specDir, want)
	}
}

func TestPythonVenvRelative(t *testing.T) {
	t.Parallel()
	if _, err := startup.InstallWith(t.TempDir(), startup.Options{PythonVenv: "venv"}); err == nil {
		t.Fatal("a relative venv was accepted")
	}
}
