package startup

import (
	"encoding/json"
	"fmt"
	"path/filepath"
)

// PythonKernelName is the kernelspec name of the Python kernel. Install
// writes a kernelspec of that name first in JUPYTER_PATH, which hides
// Debian's (/usr/share/jupyter/kernels/python3).
const PythonKernelName = "python3"

// pythonKernelSpec is Debian's python3 kernelspec with python in argv
// (with Options.PythonVenv the virtual environment's: Debian's ipykernel
// stays visible through the environment's system site packages, and what
// `pip install` puts in the environment is importable at once) and -P
// (see safePath). interrupt_mode and env are left unset, as in Debian's
// (Jupyter's defaults: signal, the server's env).
func pythonKernelSpec(python string) ([]byte, error) {
	spec := struct {
		Argv        []string        `json:"argv"`
		DisplayName string          `json:"display_name"`
		Language    string          `json:"language"`
		Metadata    map[string]bool `json:"metadata"`
	}{
		Argv:        []string{python, safePath, "-m", "ipykernel_launcher", "-f", "{connection_file}"},
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

// addPythonKernel adds the python3 kernelspec to want: the virtual
// environment's python when opts name one, else Debian's python3 when a
// python3 kernelspec is installed (ipykernel is there); without either
// the kernelspec directory is pruned (it is in ownedDirs).
func addPythonKernel(want map[string][]byte, opts Options) error {
	python := ""
	switch {
	case opts.PythonVenv != "":
		if !filepath.IsAbs(opts.PythonVenv) {
			return fmt.Errorf("startup: python venv %q is not an absolute path", opts.PythonVenv)
		}
		python = filepath.Join(opts.PythonVenv, "bin", "python")
	case systemKernelSpec(PythonKernelName) != nil:
		python = opts.Python
		if python == "" {
			python = DefaultPython
		}
	default:
		return nil
	}
	spec, err := pythonKernelSpec(python)
	if err != nil {
		return err
	}
	want["kernels/"+PythonKernelName+"/kernel.json"] = spec
	return nil
}
