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
//	python/envd_java_kernel/                          the Java kernel (ipykernel + an agent on the
//	                                                  JDK's jdk.jshell API, EnvdJShell.java)
//	kernels/java/kernel.json                          its kernelspec, only when a JDK's jshell is
//	                                                  installed (Options.JShell: on PATH or
//	                                                  /usr/bin/jshell; Debian: openjdk-17-jdk-headless)
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
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

//go:embed all:files
var files embed.FS

// DefaultPython is the interpreter that runs the bash kernel. Debian's
// Jupyter, IPython and pexpect live there, not in the pyenv python3 on PATH.
const DefaultPython = "/usr/bin/python3"

// BashKernelName is the kernelspec name of envd's bash kernel
// (the name to send in POST /api/sessions for language "bash").
const BashKernelName = "bash"

// JavaKernelName is the kernelspec name of envd's Java kernel (language
// "java"), installed only where a JDK's jshell is.
const JavaKernelName = "java"

// DefaultJShell is where Install looks for jshell when it is not on PATH.
const DefaultJShell = "/usr/bin/jshell"

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
	// kernels/bash/kernel.json (and kernels/java/kernel.json).
	JupyterPath string
	// PythonPath is the directory holding the envd_kernel,
	// envd_bash_kernel and envd_java_kernel packages. Their kernelspecs
	// already set PYTHONPATH to it; the server itself does not need it.
	PythonPath string
	// BashKernelSpec is the path of the bash kernel.json.
	BashKernelSpec string
	// JavaKernelSpec is the path of the Java kernel.json; "" when no JDK
	// with jshell was found (no Java kernel).
	JavaKernelSpec string
	// Java is the java launcher the Java kernel runs (the one beside
	// jshell, links resolved); "" without a Java kernel.
	Java string
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
	// JShell is the jshell whose JDK runs the Java kernel; "" looks for
	// "jshell" on PATH, then DefaultJShell. When it does not exist (or
	// has no java launcher beside it), no Java kernelspec is installed and
	// an old one is removed.
	JShell string
	// Owner, if set, gets IPythonDir and every directory and file Install
	// creates or replaces in it: IPython ignores a profile its user cannot
	// write (history, caches), and with it our startup files. The rest of
	// the tree stays envd's, read-only for everyone else. nil: envd's
	// account.
	Owner *Owner
	// PythonVenv, if set, is a virtual environment whose python runs the
	// python3 kernel (see PythonKernelName); "": Debian's.
	PythonVenv string
	// Logger tells of stale installs removed (InstallTemp); nil:
	// slog.Default().
	Logger *slog.Logger
}

// Owner is the account that owns an install.
type Owner struct{ UID, GID uint32 }

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
//
// Part of the tree may belong to the kernels' user (Options.Owner), whose
// code can plant links and rename directories in it while Install runs. Install
// works on it only through an os.Root opened on dir itself (dir must not
// be a link): every path is resolved below that descriptor, so no link nor
// rename takes root's writes, chowns or removals out of the tree, and the
// files it creates are new (O_EXCL) and chowned through their descriptor.
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
		IPythonDir:     filepath.Join(abs, ipythonDir),
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
	if java := findJava(opts.JShell); java != "" {
		spec, err := javaKernelSpec(python, l.PythonPath, java)
		if err != nil {
			return Layout{}, err
		}
		want["kernels/"+JavaKernelName+"/kernel.json"] = spec
		l.JavaKernelSpec = filepath.Join(abs, "kernels", JavaKernelName, "kernel.json")
		l.Java = java
	}
	if err := addRKernel(want); err != nil {
		return Layout{}, err
	}
	if err := addPythonKernel(want, opts); err != nil {
		return Layout{}, err
	}

	root, err := openInstallRoot(abs)
	if err != nil {
		return Layout{}, err
	}
	defer root.Close()
	w := writer{root: root, owner: opts.Owner}
	for rel, data := range want {
		if err := w.writeFile(filepath.FromSlash(rel), data); err != nil {
			return Layout{}, fmt.Errorf("startup: install %s: %w", rel, err)
		}
	}
	if l.JavaKernelSpec == "" {
		if err := root.RemoveAll(filepath.Join("kernels", JavaKernelName)); err != nil {
			return Layout{}, fmt.Errorf("startup: remove java kernelspec: %w", err)
		}
	}
	if err := prune(root, want); err != nil {
		return Layout{}, fmt.Errorf("startup: remove stale files: %w", err)
	}
	// Last, the root: everyone may traverse it (the kernels' user must).
	if err := w.setDir("."); err != nil {
		return Layout{}, fmt.Errorf("startup: install dir: %w", err)
	}
	return l, nil
}

// openInstallRoot creates dir if missing and opens it as an os.Root,
// making sure that what was opened is dir itself and not where a link
// planted at its name points.
func openInstallRoot(dir string) (*os.Root, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("startup: create install dir: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("startup: install dir: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("startup: install dir %s is not a directory (%v)", dir, fi.Mode().Type())
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("startup: open install dir: %w", err)
	}
	if rfi, err := root.Stat("."); err != nil || !os.SameFile(fi, rfi) {
		root.Close()
		return nil, fmt.Errorf("startup: install dir %s was replaced while opening it", dir)
	}
	return root, nil
}

// ownedDirs are the directories whose every file comes from Install; files
// there that Install did not write are leftovers of an older version.
var ownedDirs = []string{
	"kernels/" + PythonKernelName,
	"kernels/" + RKernelName,
	"python/envd_kernel",
	"python/envd_bash_kernel",
	"python/envd_java_kernel",
	"kernels/" + BashKernelName,
	"kernels/" + JavaKernelName,
}

func prune(root *os.Root, want map[string][]byte) error {
	for _, dir := range ownedDirs {
		entries, err := readDir(root, filepath.FromSlash(dir))
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
			if err := root.RemoveAll(filepath.FromSlash(rel)); err != nil {
				return err
			}
		}
	}
	// Startup scripts: only ours are named *envd*.py.
	const startupDir = "ipython/profile_default/startup"
	entries, err := readDir(root, filepath.FromSlash(startupDir))
	if err != nil {
		return err
	}
	for _, e := range entries {
		rel := startupDir + "/" + e.Name()
		if _, ok := want[rel]; ok || isTemp(e.Name()) || !strings.Contains(e.Name(), "envd") {
			continue
		}
		if err := root.Remove(filepath.FromSlash(rel)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

func readDir(root *os.Root, name string) ([]fs.DirEntry, error) {
	d, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.ReadDir(-1)
}

// isTemp reports whether name is a temp file of writeFile (maybe of a
// concurrent Install); leftovers are harmless: nothing loads dot-files.
func isTemp(name string) bool { return strings.HasPrefix(name, ".") }

// writer writes files in an install tree.
type writer struct {
	root  *os.Root
	owner *Owner
}

// writeFile makes name (relative to the root) hold data, mode 0644 and
// the owner's, replacing it atomically: a new temp file (O_EXCL: never an
// existing file or link), owner and mode set through its descriptor, then
// renamed over name.
func (w writer) writeFile(name string, data []byte) error {
	if old, err := w.root.ReadFile(name); err == nil && bytes.Equal(old, data) {
		if fi, err := w.root.Lstat(name); err == nil && fi.Mode() == 0o644 && owns(w.ownerOf(name), fi) {
			return nil
		}
	}
	dir := filepath.Dir(name)
	if err := w.mkdirAll(dir); err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+filepath.Base(name)+".tmp"+randomSuffix())
	f, err := w.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer w.root.Remove(tmp) // no-op after a successful rename
	_, err = f.Write(data)
	if o := w.ownerOf(name); err == nil && o != nil {
		err = f.Chown(int(o.UID), int(o.GID))
	}
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return w.root.Rename(tmp, name)
}

// mkdirAll creates dir and its missing parents below the root, each 0755
// and the owner's.
func (w writer) mkdirAll(dir string) error {
	if dir == "." {
		return nil
	}
	if err := w.mkdirAll(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := w.root.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return w.setDir(dir)
}

// setDir makes the directory dir 0755 and the owner's, through a
// descriptor of it.
func (w writer) setDir(dir string) error {
	d, err := w.root.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	fi, err := d.Stat()
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if o := w.ownerOf(dir); !owns(o, fi) {
		if err := d.Chown(int(o.UID), int(o.GID)); err != nil {
			return err
		}
	}
	if fi.Mode().Perm() != 0o755 {
		return d.Chmod(0o755)
	}
	return nil
}

// ownerOf returns the owner that name (relative to the root) should have;
// nil: envd's account, which created it.
func (w writer) ownerOf(name string) *Owner {
	if name == ipythonDir || strings.HasPrefix(name, ipythonDir+string(filepath.Separator)) {
		return w.owner
	}
	return nil
}

// ipythonDir is IPythonDir relative to the install root.
const ipythonDir = "ipython"

// owns reports whether fi has owner o (nil: anyone, as envd created it).
func owns(o *Owner, fi fs.FileInfo) bool {
	if o == nil {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Uid == o.UID && st.Gid == o.GID
}

func randomSuffix() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails on Linux
	return hex.EncodeToString(b)
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
		Argv:          []string{python, safePath, "-m", "envd_bash_kernel", "-f", "{connection_file}"},
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

// findJava returns the java launcher of the JDK that jshell (see
// Options.JShell) belongs to, links resolved, or "" if there is none.
func findJava(jshell string) string {
	if jshell == "" {
		if p, err := exec.LookPath("jshell"); err == nil {
			jshell = p
		} else {
			jshell = DefaultJShell
		}
	}
	real, err := filepath.EvalSymlinks(jshell)
	if err != nil {
		return ""
	}
	java := filepath.Join(filepath.Dir(real), "java")
	if fi, err := os.Stat(java); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return ""
	}
	return java
}

func javaKernelSpec(python, pythonPath, java string) ([]byte, error) {
	b, err := json.MarshalIndent(kernelSpec{
		Argv:          []string{python, safePath, "-m", "envd_java_kernel", "-f", "{connection_file}"},
		DisplayName:   "Java",
		Language:      "java",
		InterruptMode: "signal",
		Env:           map[string]string{"PYTHONPATH": pythonPath, "ENVD_JAVA": java},
	}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("startup: encode java kernelspec: %w", err)
	}
	return append(b, '\n'), nil
}
