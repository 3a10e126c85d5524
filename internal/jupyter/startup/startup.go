// Package startup installs the kernel-side files that envd's Jupyter server
// needs to be wire-compatible with E2B's code interpreter, and builds the small
// snippets envd injects into kernels (env vars, working directory).
//
// Install(dir) writes, under dir:
//
//	ipython/profile_default/ipython_kernel_config.py  NoColor tracebacks, no text/plain truncation
//	ipython/profile_default/startup/00-envd.py        loads envd_kernel into every IPython kernel
//	python/envd_kernel/                               e2b/data, e2b/chart, application/json formatters,
//	                                                  PIL patches, __envd_setenv/__envd_restoreenv
//	python/envd_bash_kernel/                          the bash kernel (ipykernel + pexpect)
//	kernels/bash/kernel.json                          its kernelspec (found through JUPYTER_PATH)
//	matplotlib/matplotlibrc                           sans-serif fonts
//
// The Jupyter server must then run with Layout.Environ(os.Environ()) so that
// every kernel it starts sees IPYTHONDIR, MATPLOTLIBRC and JUPYTER_PATH.
// The Python code runs with Debian's /usr/bin/python3 (IPython 8.5,
// ipykernel 6.17, matplotlib 3.6, pandas 1.5, pexpect); see the doc comments
// in the embedded files for the kernel-side behaviour.
//
// # Injected code
//
// The interpreter never pastes env values or paths into code as text; it
// asks this package for a snippet (values travel as JSON and are decoded in
// the kernel) and runs it as a silent execution (execute_request with
// silent:true, so the execution count does not move), waiting for its
// execute_reply / idle:
//
//	new context:            ChdirCode(lang, cwd)
//	first execution:        SetGlobalEnvCode(lang, globals from envd)   (stays set)
//	execution with env:     SetEnvCode(lang, envVars) ... user code ... RestoreEnvCode(lang)
//
// Run the restore after every execution that had env vars, also when it
// was interrupted or the client went away (it is idempotent). Every
// snippet is one line without indentation and prints nothing, so
// prepending it to the user's cell followed by "\n" also works (what E2B
// does; indent it like the cell's first line so IPython's dedent still
// applies), at the cost of shifting traceback line numbers. An unsupported
// language gives ErrUnsupportedLanguage: skip the step.
package startup

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

//go:embed all:files
var files embed.FS

// DefaultPython is the interpreter that runs the bash kernel. Debian's
// Jupyter, IPython and pexpect live there, not in the pyenv python3 on PATH.
const DefaultPython = "/usr/bin/python3"

// BashKernelName is the kernelspec name of envd's bash kernel
// (the name to send in POST /api/sessions for language "bash").
const BashKernelName = "bash"

// Layout tells where Install put things and what the Jupyter server's
// environment must contain.
type Layout struct {
	// Dir is the absolute install root.
	Dir string
	// IPythonDir is the value for IPYTHONDIR (profile_default with the
	// kernel config and the startup script).
	IPythonDir string
	// MatplotlibRC is the value for MATPLOTLIBRC (a file).
	MatplotlibRC string
	// JupyterPath is the directory to put first in JUPYTER_PATH; it holds
	// kernels/bash/kernel.json.
	JupyterPath string
	// PythonPath is the directory holding the envd_kernel and
	// envd_bash_kernel packages. The bash kernelspec already sets
	// PYTHONPATH to it; the server itself does not need it.
	PythonPath string
	// BashKernelSpec is the path of the bash kernel.json.
	BashKernelSpec string
}

// Env returns the variables the Jupyter server (and so its kernels) must
// get, as KEY=VALUE. JUPYTER_PATH holds only our directory; use Environ to
// keep an existing JUPYTER_PATH.
func (l Layout) Env() []string {
	return []string{
		"IPYTHONDIR=" + l.IPythonDir,
		"MATPLOTLIBRC=" + l.MatplotlibRC,
		"JUPYTER_PATH=" + l.JupyterPath,
	}
}

// Environ returns a copy of base (KEY=VALUE entries, e.g. os.Environ())
// with IPYTHONDIR and MATPLOTLIBRC set to the layout's and the layout's
// directory put first in JUPYTER_PATH.
func (l Layout) Environ(base []string) []string {
	out := make([]string, 0, len(base)+3)
	jupyterPath := l.JupyterPath
	for _, kv := range base {
		name, value, _ := strings.Cut(kv, "=")
		switch name {
		case "IPYTHONDIR", "MATPLOTLIBRC":
			continue
		case "JUPYTER_PATH":
			for _, p := range filepath.SplitList(value) {
				if p != "" && p != l.JupyterPath {
					jupyterPath += string(os.PathListSeparator) + p
				}
			}
			continue
		}
		out = append(out, kv)
	}
	return append(out,
		"IPYTHONDIR="+l.IPythonDir,
		"MATPLOTLIBRC="+l.MatplotlibRC,
		"JUPYTER_PATH="+jupyterPath,
	)
}

// Options tune Install. The zero value is what envd uses.
type Options struct {
	// Python is the interpreter in the bash kernelspec's argv;
	// "" means DefaultPython.
	Python string
}

// Install writes the kernel-side files under dir (created if needed) with
// the default options. See InstallWith.
func Install(dir string) (Layout, error) {
	return InstallWith(dir, Options{})
}

// InstallWith writes the kernel-side files under dir and returns where they
// are. It is idempotent: files whose content is already right are left
// alone, others are replaced atomically (temp file + rename), and stale
// files from older versions are removed from the directories envd owns, so
// it is safe to call on every start, even while kernels are running.
func InstallWith(dir string, opts Options) (Layout, error) {
	if dir == "" {
		return Layout{}, errors.New("startup: empty install dir")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Layout{}, fmt.Errorf("startup: resolve install dir: %w", err)
	}
	python := opts.Python
	if python == "" {
		python = DefaultPython
	}
	l := Layout{
		Dir:            abs,
		IPythonDir:     filepath.Join(abs, "ipython"),
		MatplotlibRC:   filepath.Join(abs, "matplotlib", "matplotlibrc"),
		JupyterPath:    abs,
		PythonPath:     filepath.Join(abs, "python"),
		BashKernelSpec: filepath.Join(abs, "kernels", BashKernelName, "kernel.json"),
	}

	want := map[string][]byte{} // path relative to abs (slash-separated) -> content
	err = fs.WalkDir(files, "files", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "__pycache__" {
				return fs.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".pyc") {
			return nil
		}
		data, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		want[strings.TrimPrefix(p, "files/")] = data
		return nil
	})
	if err != nil {
		return Layout{}, fmt.Errorf("startup: read embedded files: %w", err)
	}
	want["matplotlib/matplotlibrc"] = matplotlibrc()
	spec, err := bashKernelSpec(python, l.PythonPath)
	if err != nil {
		return Layout{}, err
	}
	want["kernels/"+BashKernelName+"/kernel.json"] = spec

	for rel, data := range want {
		if err := writeFile(filepath.Join(abs, filepath.FromSlash(rel)), data); err != nil {
			return Layout{}, fmt.Errorf("startup: install %s: %w", rel, err)
		}
	}
	if err := prune(abs, want); err != nil {
		return Layout{}, fmt.Errorf("startup: remove stale files: %w", err)
	}
	return l, nil
}

// ownedDirs are the directories whose every file comes from Install; files
// there that Install did not write are leftovers of an older version.
var ownedDirs = []string{
	"python/envd_kernel",
	"python/envd_bash_kernel",
	"kernels/" + BashKernelName,
}

func prune(root string, want map[string][]byte) error {
	for _, dir := range ownedDirs {
		entries, err := os.ReadDir(filepath.Join(root, filepath.FromSlash(dir)))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return err
		}
		for _, e := range entries {
			rel := path.Join(dir, e.Name())
			if _, ok := want[rel]; ok || isTemp(e.Name()) {
				continue
			}
			if err := os.RemoveAll(filepath.Join(root, filepath.FromSlash(rel))); err != nil {
				return err
			}
		}
	}
	// Startup scripts: only ours are named *envd*.py.
	startupDir := filepath.Join(root, "ipython", "profile_default", "startup")
	entries, err := os.ReadDir(startupDir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		rel := "ipython/profile_default/startup/" + e.Name()
		if _, ok := want[rel]; ok || isTemp(e.Name()) || !strings.Contains(e.Name(), "envd") {
			continue
		}
		if err := os.Remove(filepath.Join(startupDir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// isTemp reports whether name is a temp file of writeFile (maybe of a
// concurrent Install); leftovers are harmless: nothing loads dot-files.
func isTemp(name string) bool { return strings.HasPrefix(name, ".") }

// writeFile makes path hold data (mode 0644), replacing it atomically.
func writeFile(name string, data []byte) error {
	if old, err := os.ReadFile(name); err == nil && bytes.Equal(old, data) {
		if fi, err := os.Stat(name); err == nil && fi.Mode().Perm() == 0o644 {
			return nil
		}
	}
	dir := filepath.Dir(name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(name)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

// cjkFonts are files of Debian's fonts-noto-cjk; E2B's template adds
// "Noto Sans CJK JP" to font.family for CJK labels. matplotlib warns on
// every figure about a family it cannot find, so it is only listed when the
// font is installed.
var cjkFonts = []string{
	"/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
	"/usr/share/fonts/opentype/noto/NotoSansCJKjp-Regular.otf",
}

func matplotlibrc() []byte {
	family := "sans-serif"
	for _, f := range cjkFonts {
		if _, err := os.Stat(f); err == nil {
			family += ", Noto Sans CJK JP"
			break
		}
	}
	return []byte("# Installed by envd (internal/jupyter/startup); selected with MATPLOTLIBRC.\n" +
		"# The backend is left to ipykernel (inline).\n" +
		"font.family: " + family + "\n")
}

type kernelSpec struct {
	Argv          []string          `json:"argv"`
	DisplayName   string            `json:"display_name"`
	Language      string            `json:"language"`
	InterruptMode string            `json:"interrupt_mode"`
	Env           map[string]string `json:"env"`
}

func bashKernelSpec(python, pythonPath string) ([]byte, error) {
	b, err := json.MarshalIndent(kernelSpec{
		Argv:          []string{python, "-m", "envd_bash_kernel", "-f", "{connection_file}"},
		DisplayName:   "Bash",
		Language:      "bash",
		InterruptMode: "signal",
		Env:           map[string]string{"PYTHONPATH": pythonPath},
	}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("startup: encode bash kernelspec: %w", err)
	}
	return append(b, '\n'), nil
}
