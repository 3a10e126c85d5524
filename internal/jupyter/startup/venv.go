package startup

import (
	"encoding/json"
	"fmt"
	"path/filepath"
)

// PythonKernelName is the kernelspec name of the Python kernel. With
// Options.PythonVenv, Install writes a kernelspec of that name first in
// JUPYTER_PATH, which hides Debian's (/usr/share/jupyter/kernels/python3).
const PythonKernelName = "python3"

// pythonKernelSpec is Debian's python3 kernelspec with the virtual
// environment's python in argv: Debian's ipykernel stays visible through
// the environment's system site packages, and what `pip install` puts in
// the environment is importable at once. interrupt_mode and env are left
// unset, as in Debian's (Jupyter's defaults: signal, the server's env).
func pythonKernelSpec(venv string) ([]byte, error) {
	if !filepath.IsAbs(venv) {
		return nil, fmt.Errorf("startup: python venv %q is not an absolute path", venv)
	}
	spec := struct {
		Argv        []string        `json:"argv"`
		DisplayName string          `json:"display_name"`
		Language    string          `json:"language"`
		Metadata    map[string]bool `json:"metadata"`
	}{
		Argv:        []string{filepath.Join(venv, "bin", "python"), "-m", "ipykernel_launcher", "-f", "{connection_file}"},
		DisplayName: "Python 3 (ipykernel)",
		Language:    "python",
		Metadata:    map[string]bool{"debugger": true},
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("startup: encode python kernelspec: %w", err)
	}
	return append(b, '\n'), nil
}

// addPythonKernel adds the python3 kernelspec to want when opts name a
// virtual environment; without one the kernelspec directory is pruned
// (it is in ownedDirs) and Debian's is used.
func addPythonKernel(want map[string][]byte, opts Options) error {
	if opts.PythonVenv == "" {
		return nil
	}
	spec, err := pythonKernelSpec(opts.PythonVenv)
	if err != nil {
		return err
	}
	want["kernels/"+PythonKernelName+"/kernel.json"] = spec
	return nil
}
