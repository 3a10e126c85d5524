package packages

import (
	"context"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// checkTimeout bounds the checks of a request (reading a .deb's fields).
const checkTimeout = 30 * time.Second

// planInstall checks req, and returns what installing takes.
func (in *Installer) planInstall(ctx context.Context, req InstallRequest) (*plan, error) {
	m := req.Manager
	if err := validateManager(m); err != nil {
		return nil, err
	}
	if err := in.checkUser(m, req.User, true); err != nil {
		return nil, err
	}
	if len(req.Packages) > maxPackages {
		return nil, errorf(ErrInvalid, "packages: %d of them: at most %d a request", len(req.Packages), maxPackages)
	}
	if len(req.Packages) == 0 && req.Source == "" {
		return nil, errorf(ErrInvalid, "packages is empty: name at least one package, or give a file as source")
	}
	seen := map[string]int{}
	for i, s := range req.Packages {
		if err := validateName(m, field("packages", i, "name"), s.Name, true); err != nil {
			return nil, err
		}
		if j, dup := seen[nameKey(m, s.Name)]; dup {
			return nil, errorf(ErrInvalid, "%s %q: the same package as packages[%d]", field("packages", i, "name"), s.Name, j)
		}
		seen[nameKey(m, s.Name)] = i
		if s.Version != "" {
			if err := validateVersion(m, field("packages", i, "version"), s.Version, req.Source != ""); err != nil {
				return nil, err
			}
		}
	}
	var src *source
	if req.Source != "" {
		ctx, cancel := context.WithTimeout(ctx, checkTimeout)
		defer cancel()
		var err error
		if src, err = in.checkSource(ctx, m, req.User, req.Source); err != nil {
			return nil, err
		}
		switch {
		case src.dir && len(req.Packages) == 0:
			return nil, errorf(ErrInvalid, "packages is empty: with a directory as source (%s), name the packages to install from it", src.path)
		case !src.dir && len(req.Packages) > 1:
			return nil, errorf(ErrInvalid, "packages: %d of them, with the file %s as source: name at most one, the package the file holds", len(req.Packages), src.path)
		case !src.dir && len(req.Packages) == 1:
			if err := src.check(m, 0, req.Packages[0]); err != nil {
				return nil, err
			}
		}
	}
	t, err := in.target(m, req.User, req.Dir, true)
	if err != nil {
		return nil, err
	}
	p := &plan{m: m, verb: "install", t: t, fetches: req.Source == ""}
	switch m {
	case PIP:
		in.planPipInstall(p, req, src)
	case NPM:
		in.planNpmInstall(p, req, src)
	case R:
		in.planRInstall(p, req, src)
	case APT:
		in.planAptInstall(p, req, src)
	}
	return p, nil
}

// planRemove checks req, and returns what removing takes.
func (in *Installer) planRemove(req RemoveRequest) (*plan, error) {
	m := req.Manager
	if err := validateManager(m); err != nil {
		return nil, err
	}
	if err := in.checkUser(m, req.User, true); err != nil {
		return nil, err
	}
	switch {
	case len(req.Names) == 0:
		return nil, errorf(ErrInvalid, "names is empty: name at least one package to remove")
	case len(req.Names) > maxPackages:
		return nil, errorf(ErrInvalid, "names: %d of them: at most %d a request", len(req.Names), maxPackages)
	case req.Purge && m != APT:
		return nil, errorf(ErrInvalid, "purge is for apt only (it removes a Debian package's configuration files too)")
	}
	seen := map[string]int{}
	for i, n := range req.Names {
		if err := validateName(m, field("names", i, ""), n, false); err != nil {
			return nil, err
		}
		if j, dup := seen[nameKey(m, n)]; dup {
			return nil, errorf(ErrInvalid, "%s %q: the same package as names[%d]", field("names", i, ""), n, j)
		}
		seen[nameKey(m, n)] = i
	}
	t, err := in.target(m, req.User, req.Dir, true)
	if err != nil {
		return nil, err
	}
	p := &plan{m: m, verb: "removal", t: t}
	names := slices.Clone(req.Names)
	switch m {
	case PIP:
		p.probes = []probe{{lang: "python", own: true}}
		p.commands = func(before []Package) ([]command, error) {
			for _, n := range names {
				if err := checkPipRemovable(t.where, n, before); err != nil {
					return nil, err
				}
			}
			return []command{t.command("/", nil, append([]string{t.exe, "-m", "pip", "uninstall", "--yes"}, names...)...)}, nil
		}
	case NPM:
		p.commands = func(before []Package) ([]command, error) {
			if err := checkInstalled(NPM, names, before, "npm ls"); err != nil {
				return nil, err
			}
			args := append([]string{t.exe, "uninstall", "--prefix", t.where, "--no-audit", "--no-fund"}, names...)
			return []command{t.command(t.where, nil, args...)}, nil
		}
	case R:
		p.probes = []probe{{lang: "r", own: true}}
		p.commands = func(before []Package) ([]command, error) {
			for _, n := range names {
				if err := checkRRemovable(t.where, n, before); err != nil {
					return nil, err
				}
			}
			return []command{t.command("/", nil, append([]string{t.exe, "--no-init-file", "-e", rRemove, t.where}, names...)...)}, nil
		}
	case APT:
		p.probes = in.aptProbes()
		verb := "remove"
		if req.Purge {
			verb = "purge"
		}
		p.commands = func(before []Package) ([]command, error) {
			if err := checkInstalled(APT, names, before, "dpkg-query -W"); err != nil {
				return nil, err
			}
			args := append(append([]string{aptGet(), verb}, aptOptions...), names...)
			return []command{t.command("/", nil, args...)}, nil
		}
	}
	return p, nil
}

// checkInstalled fails with ErrNotFound for the first of names the
// listing does not have. how says where the user sees the list.
func checkInstalled(m Manager, names []string, pkgs []Package, how string) error {
	for _, n := range names {
		if len(installedAs(m, n, pkgs)) == 0 {
			return errorf(ErrNotFound, "%s: %s is not installed (%s lists what is)", m, n, how)
		}
	}
	return nil
}

// installedAs returns the copies of name in a listing. A Debian name
// without an architecture also matches name:arch.
func installedAs(m Manager, name string, pkgs []Package) []Package {
	k := nameKey(m, name)
	var out []Package
	for _, p := range pkgs {
		pk := nameKey(m, p.Name)
		if m == APT && !strings.Contains(name, ":") {
			pk, _, _ = strings.Cut(pk, ":")
		}
		if pk == k {
			out = append(out, p)
		}
	}
	return out
}

// checkPipRemovable: pip in the environment removes only what is
// installed into it; Debian's copies in the system site are apt's.
func checkPipRemovable(venv, name string, before []Package) error {
	copies := installedAs(PIP, name, before)
	if len(copies) == 0 {
		return errorf(ErrNotFound, "pip: %s is not installed (List shows what the environment sees)", name)
	}
	for _, c := range copies {
		if !c.System {
			return nil
		}
	}
	c := copies[0]
	return errorf(ErrFailed, "pip: %s %s is in the system site packages (%s), not in the environment %s: pip there removes only what was installed into it, and Debian's copy is apt's to remove (the Debian package that ships it, with the apt manager)", c.Name, c.Version, c.Location, venv)
}

// checkRRemovable: remove.packages removes from the target library only.
func checkRRemovable(lib, name string, before []Package) error {
	copies := installedAs(R, name, before)
	if len(copies) == 0 {
		return errorf(ErrNotFound, "r: %s is not installed in any library", name)
	}
	for _, c := range copies {
		if !c.System {
			return nil
		}
	}
	c := copies[0]
	return errorf(ErrFailed, "r: %s %s is in %s, not in the library %s that envd installs into and removes from (a Debian r-cran-* package is apt's to remove)", c.Name, c.Version, c.Location, lib)
}

func (in *Installer) planPipInstall(p *plan, req InstallRequest, src *source) {
	t := p.t
	args := []string{t.exe, "-m", "pip", "install", "--progress-bar", "off"}
	if req.Upgrade {
		args = append(args, "--upgrade")
	}
	if src != nil && src.dir {
		args = append(args, "--no-index", "--find-links", src.path)
	}
	switch {
	case src != nil && !src.dir:
		spec := src.path
		if len(req.Packages) == 1 && strings.Contains(req.Packages[0].Name, "[") {
			// Extras of a file: a direct reference, which pip checks
			// against the file's name.
			spec = req.Packages[0].Name + " @ " + (&url.URL{Scheme: "file", Path: src.path}).String()
		}
		args = append(args, spec)
	default:
		for _, s := range req.Packages {
			spec := s.Name
			if s.Version != "" {
				spec += "==" + s.Version
			}
			args = append(args, spec)
		}
	}
	c := t.command("/", nil, args...)
	p.probes = []probe{{lang: "python", own: true}}
	p.commands = func([]Package) ([]command, error) { return []command{c}, nil }
	switch {
	case src != nil && src.dir:
		// --no-index: the directory is the only source.
	case src != nil:
		p.network = func([]Package) netNeed { return netMaybe }
	default:
		specs := slices.Clone(req.Packages)
		p.network = func(before []Package) netNeed {
			if !req.Upgrade && satisfied(PIP, specs, before) {
				return netNone // pip finds every requirement installed
			}
			return netNeeded
		}
	}
	p.indexes = t.pipIndexes
}

// satisfied tells whether every spec is installed, at its version when
// it names one, as the copy the manager uses: then installing it without
// an upgrade changes nothing and fetches nothing. A name with extras may
// need more: not satisfied.
func satisfied(m Manager, specs []Spec, before []Package) bool {
	used := effective(m, before)
	for _, s := range specs {
		if strings.Contains(s.Name, "[") {
			return false
		}
		got, ok := used[nameKey(m, s.Name)]
		if !ok || (s.Version != "" && normVersion(m, s.Version) != normVersion(m, got.Version)) {
			return false
		}
	}
	return true
}

func (in *Installer) planNpmInstall(p *plan, req InstallRequest, src *source) {
	t := p.t
	args := []string{t.exe, "install", "--prefix", t.where, "--no-audit", "--no-fund"}
	specs := slices.Clone(req.Packages)
	p.commands = func(before []Package) ([]command, error) {
		var todo []string
		if src != nil {
			todo = []string{src.path}
		}
		for _, s := range specs {
			if src != nil {
				break
			}
			if s.Version == "" && !req.Upgrade && len(installedAs(NPM, s.Name, before)) > 0 {
				continue // installed, and no upgrade asked
			}
			spec := s.Name
			if s.Version != "" {
				spec += "@" + s.Version
			}
			todo = append(todo, spec)
		}
		if len(todo) == 0 {
			return nil, nil
		}
		return []command{t.command(t.where, nil, append(args, todo...)...)}, nil
	}
	// Only what is to be installed runs: a name left alone is not
	// fetched, so it is never what is checked.
	var names []string
	if src != nil {
		p.network = func([]Package) netNeed { return netMaybe }
		names = []string{src.name}
	} else {
		p.network = func([]Package) netNeed { return netNeeded }
		for _, s := range specs {
			names = append(names, s.Name)
		}
	}
	p.indexes = func(ctx context.Context) ([]index, error) { return t.npmIndexes(ctx, names) }
}

// rInstall installs packages into a library, from a repository (see
// rRepos) or a local source package, and fails (exit 1) unless each is
// then installed: install.packages only warns when one fails. Its last
// line, "envd: ...", says why for envd's error (see lastError): R's
// warning or error on one line (that it could not reach a repository's
// index, the root of the others, first), else what is not installed.
// Without upgrade, a package installed in any library is left as it is.
//
// It is passed in the variable rInstallVar, so that the command the
// operation shows is one line: Rscript -e rEval LIB UPGRADE SOURCE
// NAMES..., with the library, "1" to upgrade, the source ("" for none),
// and the package names (the source's own with a source).
const rInstall = `args <- commandArgs(trailingOnly = TRUE)
lib <- args[[1]]; upgrade <- args[[2]] == "1"; src <- args[[3]]; pkgs <- args[-(1:3)]
options(warn = 1)
installed <- function(p, where = NULL) nzchar(system.file(package = p, lib.loc = where))
failures <- character()
note <- function(w) failures <<- c(failures, conditionMessage(w))
install <- function(...) tryCatch(withCallingHandlers(install.packages(...), warning = note),
  error = function(e) { message("Error: ", conditionMessage(e)); note(e) })
if (nzchar(src)) {
  install(src, lib = lib, repos = NULL, type = "source")
} else {
  todo <- if (upgrade) pkgs else pkgs[!vapply(pkgs, installed, TRUE)]
  if (length(todo)) install(todo, lib = lib, repos = ` + rRepos + `)
}
missing <- pkgs[!vapply(pkgs, function(p) installed(p, lib) || (!upgrade && !nzchar(src) && installed(p)), TRUE)]
if (length(failures)) {
  first <- failures[grepl("^unable to access index", failures)]
  why <- if (length(first)) first[[1]] else failures[[length(failures)]]
  message("envd: ", gsub("\\s*\n\\s*", " ", sub("\n\n.*", "", why)))
} else if (length(missing)) {
  message("envd: not installed in ", lib, ": ", paste(missing, collapse = ", "))
}
if (length(failures) || length(missing)) quit(status = 1)
`

// rRemove removes packages from a library. Arguments: the library, the
// names.
const rRemove = `args <- commandArgs(trailingOnly = TRUE); remove.packages(args[-1], lib = args[[1]])`

// rInstallVar holds rInstall for the command, which rEval runs.
const rInstallVar = "ENVD_R_INSTALL"

// rEval is the expression Rscript runs: the script in rInstallVar.
const rEval = `eval(parse(text = Sys.getenv("` + rInstallVar + `")))`

func (in *Installer) planRInstall(p *plan, req InstallRequest, src *source) {
	t := p.t
	up := "0"
	if req.Upgrade {
		up = "1"
	}
	args := []string{t.exe, "--no-init-file", "-e", rEval, t.where, up}
	if src != nil {
		args = append(args, src.path, src.name)
	} else {
		args = append(args, "")
		for _, s := range req.Packages {
			args = append(args, s.Name)
		}
	}
	c := t.command("/", map[string]string{rInstallVar: rInstall}, args...)
	p.probes = []probe{{lang: "r", own: true}}
	p.commands = func([]Package) ([]command, error) { return []command{c}, nil }
	if src == nil {
		// install.packages with repos = NULL takes nothing from a
		// repository: only names do.
		specs := slices.Clone(req.Packages)
		p.network = func(before []Package) netNeed {
			if !req.Upgrade && satisfied(R, specs, before) {
				return netNone // the script leaves installed packages alone
			}
			return netNeeded
		}
		p.indexes = t.rIndexes
	}
}

// aptOptions are the options of every apt-get that changes packages: no
// question, wait for dpkg's lock (a command may be running apt), keep
// configuration files as they are, and a name is a name: apt-get would
// otherwise read one that no package has, holding '.' or '+', as a regular
// expression over every package's name (python3.+).
var aptOptions = []string{
	"--yes", "-q",
	"-o", "APT::Cmd::Pattern-Only=true",
	"-o", "DPkg::Lock::Timeout=300",
	"-o", "Dpkg::Options::=--force-confdef",
	"-o", "Dpkg::Options::=--force-confold",
}

// aptGet is apt-get's path.
func aptGet() string {
	if p, err := lookPath(APT, "apt-get"); err == nil {
		return p
	}
	return "/usr/bin/apt-get"
}

// aptLists is where apt keeps the package lists apt-get update fetches.
var aptLists = "/var/lib/apt/lists"

// haveAptLists tells whether apt has package lists (images often delete
// them to save space; then no package can be installed by name).
func haveAptLists() bool {
	m, _ := filepath.Glob(filepath.Join(aptLists, "*_Packages*"))
	return len(m) > 0
}

func (in *Installer) planAptInstall(p *plan, req InstallRequest, src *source) {
	t := p.t
	apt := aptGet()
	args := append([]string{apt, "install"}, aptOptions...)
	pinned := slices.ContainsFunc(req.Packages, func(s Spec) bool { return s.Version != "" })
	if !req.Upgrade && !pinned && src == nil {
		args = append(args, "--no-upgrade")
	}
	if pinned || src != nil {
		// A pin or a file the request chose may be older than what is
		// installed.
		args = append(args, "--allow-downgrades")
	}
	if src != nil {
		args = append(args, src.path)
	} else {
		for _, s := range req.Packages {
			spec := s.Name
			if s.Version != "" {
				spec += "=" + s.Version
			}
			args = append(args, spec)
		}
	}
	install := t.command("/", nil, args...)
	p.probes = in.aptProbes()
	p.commands = func([]Package) ([]command, error) {
		if src == nil && !haveAptLists() {
			return []command{t.command("/", nil, apt, "update", "-q"), install}, nil
		}
		return []command{install}, nil
	}
	specs := slices.Clone(req.Packages)
	p.network = func(before []Package) netNeed {
		switch {
		case src == nil && !haveAptLists():
			return netNeeded // apt-get update fetches the lists
		case src == nil && !req.Upgrade && !pinned && satisfied(APT, specs, before):
			return netNone // --no-upgrade of what is installed
		}
		// The .debs may be in apt's cache, and a file's dependencies may
		// be installed: checked only to explain a failure.
		return netMaybe
	}
	p.indexes = t.aptIndexes
}

// aptProbes are the listings of Python and R packages, as the default
// user sees them, that an apt operation may change (python3-*, r-cran-*).
func (in *Installer) aptProbes() []probe {
	if in.opts.Kernels == nil {
		return nil
	}
	u, err := in.defaultUser()
	if err != nil || (in.opts.StrictUsers && u.UID == 0) {
		return nil
	}
	var out []probe
	py := &target{in: in, m: PIP, user: u}
	if in.opts.PythonVenv != "" && py.pip(in.opts.PythonVenv) == nil {
		out = append(out, probe{lang: "python", list: func(ctx context.Context) ([]Package, error) { return py.listPip(ctx, true) }})
	}
	if rscript, err := lookPath(R, "Rscript"); err == nil {
		r := &target{in: in, m: R, user: u, exe: rscript, where: in.opts.RLibrary}
		out = append(out, probe{lang: "r", list: r.listR})
	}
	return out
}
