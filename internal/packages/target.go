package packages

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/identity"
)

// target is where a manager's commands run: who runs them, where the
// manager installs, and its program.
type target struct {
	in    *Installer
	m     Manager
	user  *identity.User // who runs the manager's commands
	where string         // the venv, the R library, the npm project; "" for apt
	exe   string         // python (of the venv), npm, Rscript, dpkg-query
}

// listLimit bounds what a listing may print.
const listLimit = 32 << 20

// target checks that u may use m (to change packages, or only to list
// them) and that m is set up here, and returns where its commands run.
// dir is npm's project directory.
func (in *Installer) target(m Manager, u *identity.User, dir string, change bool) (*target, error) {
	if err := in.checkUser(m, u, change); err != nil {
		return nil, err
	}
	if dir != "" && m != NPM {
		return nil, errorf(ErrInvalid, "dir is for npm only (its project directory); %s installs into one place", m)
	}
	t := &target{in: in, m: m, user: u}
	switch m {
	case PIP:
		return t, t.pip(in.opts.PythonVenv)
	case NPM:
		npm, err := lookPath(NPM, "npm")
		if err != nil {
			return nil, err
		}
		t.exe = npm
		what := "dir " + dir
		if dir == "" {
			du, err := in.defaultUser()
			if err != nil {
				return nil, err
			}
			dir, what = du.Home, "the default user's home "+du.Home+" (npm's default dir)"
		} else if dir, err = validatePath("dir", dir); err != nil {
			return nil, err
		}
		fi, err := in.stat(u, dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, errorf(ErrInvalid, "%s: no such directory", what)
		case err != nil:
			return nil, errorf(ErrInvalid, "%s: %v", what, bare(err))
		case !fi.IsDir():
			return nil, errorf(ErrInvalid, "%s: not a directory", what)
		}
		t.where = dir
	case R:
		if in.opts.RLibrary == "" {
			return nil, errorf(ErrUnavailable, "r: envd has no R library to install into (%s, made by scripts/install-deps.sh; %s names another)", defaults.RLibrary, defaults.RLibraryVar)
		}
		rscript, err := lookPath(R, "Rscript")
		if err != nil {
			return nil, err
		}
		t.exe, t.where = rscript, in.opts.RLibrary
	case APT:
		q, err := lookPath(APT, "dpkg-query")
		if err != nil {
			return nil, err
		}
		t.exe = q
		if change {
			if !envdIsRoot() {
				return nil, errorf(ErrUnavailable, "apt: envd does not run as root, and apt-get must")
			}
			if t.user, err = identity.Lookup("root"); err != nil {
				return nil, errorf(ErrInternal, "apt: %v", err)
			}
		}
	}
	return t, nil
}

// pip sets t up for the virtual environment venv.
func (t *target) pip(venv string) error {
	if venv == "" {
		return errorf(ErrUnavailable, "pip: envd has no Python virtual environment to install into (%s, made by scripts/install-deps.sh; %s names another), and Debian's own python3 is externally managed (PEP 668)", defaults.PythonVenv, defaults.PythonVenvVar)
	}
	t.where = venv
	t.exe = filepath.Join(venv, "bin", "python")
	if _, err := os.Stat(t.exe); err != nil {
		return errorf(ErrUnavailable, "pip: the virtual environment's python: %v", err)
	}
	return nil
}

func (in *Installer) defaultUser() (*identity.User, error) {
	if in.opts.DefaultUser == nil {
		return nil, errorf(ErrInternal, "no default user configured")
	}
	u, err := in.opts.DefaultUser()
	if err != nil {
		return nil, errorf(ErrUnavailable, "the default user: %v", err)
	}
	return u, nil
}

// lookPath finds a manager's program on envd's PATH.
func lookPath(m Manager, name string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", errorf(ErrUnavailable, "%s: %s is not installed (not on envd's PATH)", m, name)
	}
	if !filepath.IsAbs(p) {
		if p, err = filepath.Abs(p); err != nil {
			return "", errorf(ErrUnavailable, "%s: %s: %v", m, name, err)
		}
	}
	return p, nil
}

// command returns a command of t's user in dir.
func (t *target) command(dir string, extra map[string]string, argv ...string) command {
	return command{argv: argv, dir: dir, user: t.user, env: t.env(extra), m: t.m}
}

// env is the environment of t's commands: the user's login environment,
// then the installer's variables (Options.Env, or RootEnv for root), then
// the manager's own, then extra.
func (t *target) env(extra map[string]string) []string {
	env := append([]string{"LANG=C.UTF-8"}, t.user.LoginEnv()...)
	base := t.in.opts.Env
	if t.user.UID == 0 && t.in.opts.RootEnv != nil {
		base = t.in.opts.RootEnv
	}
	vars := maps.Clone(base())
	if vars == nil {
		vars = map[string]string{}
	}
	path := vars["PATH"]
	if path == "" {
		path = os.Getenv("PATH")
	}
	switch t.m {
	case PIP:
		maps.Copy(vars, defaults.Packages{PythonVenv: t.where}.Env(path))
		// Output as it is printed, not in blocks when the pipe fills.
		vars["PYTHONUNBUFFERED"] = "1"
		vars["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
		vars["PIP_NO_INPUT"] = "1"
	case R:
		vars["R_LIBS"] = t.where
	case NPM:
		vars["npm_config_update_notifier"] = "false"
		vars["npm_config_fund"] = "false"
		vars["npm_config_audit"] = "false"
	case APT:
		vars["DEBIAN_FRONTEND"] = "noninteractive"
		vars["APT_LISTCHANGES_FRONTEND"] = "none"
	}
	maps.Copy(vars, extra)
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		env = append(env, k+"="+vars[k])
	}
	return env // exec.Cmd keeps the last value of a duplicated name
}

// list lists what t's manager sees; with modules, what kernels load of
// each package too.
func (t *target) list(ctx context.Context, modules bool) ([]Package, error) {
	switch t.m {
	case PIP:
		return t.listPip(ctx, modules)
	case NPM:
		return t.listNpm(ctx)
	case R:
		return t.listR(ctx)
	case APT:
		return t.listApt(ctx)
	}
	return nil, errorf(ErrInternal, "no listing for %s", t.m)
}

// pyList lists the distributions the environment's python sees, on every
// entry of sys.path in order (-I: not the current directory nor the user's
// site), with whether each is outside the environment (system) or shadowed
// by an earlier one of the same name, and with its top-level modules
// (top_level.txt, else what its files hold, as importlib.metadata's
// packages_distributions does).
const pyList = `
import json, os, re, sys
from importlib import metadata

def top_level(dist):
    text = dist.read_text("top_level.txt")
    if text:
        return sorted({l.strip() for l in text.splitlines() if l.strip()})
    mods = set()
    for f in dist.files or ():
        parts = f.parts
        if not parts or parts[0] in ("..", "__pycache__") or parts[0].startswith("."):
            continue
        first = parts[0]
        if len(parts) == 1:
            name, dot, ext = first.partition(".")
            if dot and (ext in ("py", "pyc", "so", "pyd") or ext.endswith((".so", ".pyd"))):
                mods.add(name)
        elif not first.endswith((".dist-info", ".egg-info", ".data")) and "." not in first:
            mods.add(first)
    return sorted(mods)

want = sys.argv[1] == "1"
prefix = os.path.realpath(sys.prefix) + os.sep
seen, out = set(), []
for path in sys.path:
    if not os.path.isdir(path):
        continue
    for dist in metadata.distributions(path=[path]):
        name = dist.metadata["Name"]
        if not name:
            continue
        key = re.sub(r"[-_.]+", "-", name).lower()
        entry = {"name": name, "version": dist.version or "", "location": path,
                 "system": not (os.path.realpath(path) + os.sep).startswith(prefix),
                 "shadowed": key in seen}
        if want:
            try:
                entry["modules"] = top_level(dist)
            except Exception:
                entry["modules"] = []
            entry["modules"] = entry["modules"] or [key.replace("-", "_")]
        seen.add(key)
        out.append(entry)
json.dump(out, sys.stdout)
`

type pyDist struct {
	Name     string   `json:"name"`
	Version  string   `json:"version"`
	Location string   `json:"location"`
	System   bool     `json:"system"`
	Shadowed bool     `json:"shadowed"`
	Modules  []string `json:"modules"`
}

func (t *target) listPip(ctx context.Context, modules bool) ([]Package, error) {
	arg := "0"
	if modules {
		arg = "1"
	}
	out, err := capture(ctx, "listing pip packages", t.command("/", nil, t.exe, "-I", "-c", pyList, arg), listLimit)
	if err != nil {
		return nil, err
	}
	var dists []pyDist
	if err := json.Unmarshal(out, &dists); err != nil {
		return nil, errorf(ErrInternal, "listing pip packages: %v", err)
	}
	pkgs := make([]Package, len(dists))
	for i, d := range dists {
		pkgs[i] = Package{Name: d.Name, Version: d.Version, Location: d.Location, System: d.System, Shadowed: d.Shadowed, modules: d.Modules}
	}
	return pkgs, nil
}

// rList prints every package of every library of .libPaths(), in order.
const rList = `ip <- installed.packages()
cat(sprintf("%s\t%s\t%s\n", ip[, "Package"], ip[, "Version"], ip[, "LibPath"]), sep = "")
`

func (t *target) listR(ctx context.Context) ([]Package, error) {
	out, err := capture(ctx, "listing R packages", t.command("/", nil, t.exe, "--no-init-file", "-e", rList), listLimit)
	if err != nil {
		return nil, err
	}
	lib := canonical(t.where)
	seen := map[string]bool{}
	var pkgs []Package
	for line := range strings.Lines(string(out)) {
		f := strings.Split(strings.TrimRight(line, "\n"), "\t")
		if len(f) != 3 {
			continue
		}
		pkgs = append(pkgs, Package{Name: f[0], Version: f[1], Location: f[2], System: canonical(f[2]) != lib, Shadowed: seen[f[0]], modules: []string{f[0]}})
		seen[f[0]] = true
	}
	return pkgs, nil
}

// canonical is p with its links resolved, as R reports library paths.
func canonical(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return filepath.Clean(p)
}

type npmLs struct {
	Dependencies map[string]struct {
		Version string `json:"version"`
	} `json:"dependencies"`
}

func (t *target) listNpm(ctx context.Context) ([]Package, error) {
	out, err := capture(ctx, "npm ls", t.command(t.where, nil, t.exe, "ls", "--json", "--depth=0", "--prefix", t.where), listLimit)
	var ls npmLs
	// npm ls exits 1 when it sees a problem (a dependency missing, one not
	// in package.json), and still lists.
	if jerr := json.Unmarshal(out, &ls); jerr != nil {
		if err != nil {
			return nil, err
		}
		return nil, errorf(ErrInternal, "npm ls: %v", jerr)
	}
	nm := filepath.Join(t.where, "node_modules")
	var pkgs []Package
	for name, d := range ls.Dependencies {
		if d.Version == "" {
			continue // in package.json, not installed
		}
		pkgs = append(pkgs, Package{Name: name, Version: d.Version, Location: nm, modules: []string{name}})
	}
	return pkgs, nil
}

func (t *target) listApt(ctx context.Context) ([]Package, error) {
	out, err := capture(ctx, "dpkg-query", t.command("/", nil, t.exe, "-W", "-f=${binary:Package}\t${Version}\t${db:Status-Abbrev}\n"), listLimit)
	if err != nil {
		return nil, err
	}
	var pkgs []Package
	for line := range strings.Lines(string(out)) {
		f := strings.Split(strings.TrimRight(line, "\n"), "\t")
		// The status's second letter: installed, or waiting for triggers.
		if len(f) != 3 || len(f[2]) < 2 || !strings.ContainsRune("iWt", rune(f[2][1])) {
			continue
		}
		pkgs = append(pkgs, Package{Name: f[0], Version: f[1]})
	}
	return pkgs, nil
}

// sortPackages sorts by name (case-insensitively), then by location in
// search order (kept: the sort is stable).
func sortPackages(pkgs []Package) {
	slices.SortStableFunc(pkgs, func(a, b Package) int {
		return cmp.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name))
	})
}

// bare drops the path from a *fs.PathError: the messages name it already.
func bare(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}

// effective is, by name, the copy of each package that is used: the first
// on the search path.
func effective(m Manager, pkgs []Package) map[string]Package {
	out := make(map[string]Package, len(pkgs))
	for _, p := range pkgs {
		k := nameKey(m, p.Name)
		if _, ok := out[k]; !ok && !p.Shadowed {
			out[k] = p
		}
	}
	return out
}

// changes is what differs between two listings of m, sorted by name.
func changes(m Manager, before, after []Package) []Change {
	b, a := effective(m, before), effective(m, after)
	var out []Change
	for k := range joinKeys(b, a) {
		was, now := b[k], a[k]
		if was.Version == now.Version {
			continue
		}
		name := cmp.Or(now.Name, was.Name)
		out = append(out, Change{Name: name, Old: was.Version, New: now.Version})
	}
	slices.SortFunc(out, func(x, y Change) int { return cmp.Compare(strings.ToLower(x.Name), strings.ToLower(y.Name)) })
	return out
}

func joinKeys(a, b map[string]Package) map[string]struct{} {
	out := make(map[string]struct{}, len(a)+len(b))
	for k := range a {
		out[k] = struct{}{}
	}
	for k := range b {
		out[k] = struct{}{}
	}
	return out
}

// String reads "name 1.0 -> 2.0", "name 2.0 (new)", "name 1.0 (removed)".
func (c Change) String() string {
	switch {
	case c.Old == "":
		return fmt.Sprintf("%s %s (new)", c.Name, c.New)
	case c.New == "":
		return fmt.Sprintf("%s %s (removed)", c.Name, c.Old)
	}
	return fmt.Sprintf("%s %s -> %s", c.Name, c.Old, c.New)
}
