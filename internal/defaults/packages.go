package defaults

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Where code installs packages. scripts/install-deps.sh creates both and
// gives them to the sandbox account (see docs/packages.md, "Installing
// packages from code"); envd only points kernels and commands at them.
const (
	// PythonVenv is the Python virtual environment that kernels and
	// commands share: built from Debian's /usr/bin/python3 with
	// --system-site-packages, so Debian's Jupyter, numpy, pandas and
	// matplotlib stay visible, and `pip install` lands in it (a venv is
	// exempt from PEP 668's "externally managed" refusal).
	PythonVenv = "/opt/envd-python"
	// RLibrary is the library install.packages writes to: Debian's site
	// library for local installs, already first in every R's .libPaths().
	RLibrary = "/usr/local/lib/R/site-library"

	// PythonVenvVar names the variable that points envd at another
	// virtual environment (tests use a temporary one); set but empty, no
	// virtual environment is used.
	PythonVenvVar = "ENVD_PYTHON_VENV"
	// RLibraryVar names the variable that points envd at another R
	// library; set but empty, R keeps its own library paths.
	RLibraryVar = "ENVD_R_LIBRARY"
)

// Packages says where packages installed from code land. The zero value
// changes nothing: kernels use Debian's python3, R its own libraries.
type Packages struct {
	// PythonVenv is the virtual environment's directory ("": none).
	PythonVenv string
	// RLibrary is the R library put first in .libPaths() ("": none).
	RLibrary string
}

// FindPackages returns the package locations from PythonVenvVar and
// RLibraryVar, or the defaults when those are unset. A default that does
// not exist (a machine without scripts/install-deps.sh, or without R) is
// left out; one named by a variable must exist, or FindPackages says
// precisely what is wrong with it.
func FindPackages() (Packages, error) {
	var p Packages
	venv, explicit := os.LookupEnv(PythonVenvVar)
	if !explicit {
		venv = PythonVenv
	}
	if venv != "" {
		if err := checkVenv(venv); err == nil {
			p.PythonVenv = venv
		} else if explicit || !errors.Is(err, fs.ErrNotExist) {
			return Packages{}, fmt.Errorf("%s=%s: %w", PythonVenvVar, venv, err)
		}
	}
	lib, explicit := os.LookupEnv(RLibraryVar)
	if !explicit {
		lib = RLibrary
	}
	if lib != "" {
		if err := checkDir(lib); err == nil {
			p.RLibrary = lib
		} else if explicit || !errors.Is(err, fs.ErrNotExist) {
			return Packages{}, fmt.Errorf("%s=%s: %w", RLibraryVar, lib, err)
		}
	}
	return p, nil
}

func checkDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("not an absolute path")
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return bare(err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("not a directory")
	}
	return nil
}

// checkVenv checks that dir is a virtual environment with a python.
func checkVenv(dir string) error {
	if err := checkDir(dir); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "pyvenv.cfg")); err != nil {
		return fmt.Errorf("not a virtual environment (pyvenv.cfg: %w)", bare(err))
	}
	fi, err := os.Stat(filepath.Join(dir, "bin", "python"))
	if err != nil {
		return fmt.Errorf("bin/python: %w", bare(err))
	}
	if fi.Mode()&0o111 == 0 {
		return fmt.Errorf("bin/python is not executable")
	}
	return nil
}

// bare drops the path from a *fs.PathError: the callers name it already.
func bare(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}

// Python is the virtual environment's interpreter ("" without one).
func (p Packages) Python() string {
	if p.PythonVenv == "" {
		return ""
	}
	return filepath.Join(p.PythonVenv, "bin", "python")
}

// Env is what a process needs to install into and use these locations,
// given the PATH it would have had: the environment's bin first on PATH
// (so python, pip and the scripts packages install are found),
// VIRTUAL_ENV, and R_LIBS (R puts its entries first in .libPaths(), and
// install.packages writes to the first). An empty path is taken as the
// standard directories, as identity.User.LoginEnv does.
func (p Packages) Env(path string) map[string]string {
	env := map[string]string{}
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	if p.PythonVenv != "" {
		bin := filepath.Join(p.PythonVenv, "bin")
		parts := []string{bin}
		for _, dir := range filepath.SplitList(path) {
			if dir != "" && dir != bin {
				parts = append(parts, dir)
			}
		}
		env["PATH"] = strings.Join(parts, string(os.PathListSeparator))
		env["VIRTUAL_ENV"] = p.PythonVenv
	}
	if p.RLibrary != "" {
		env["R_LIBS"] = p.RLibrary
	}
	return env
}
