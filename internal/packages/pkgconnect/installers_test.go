package pkgconnect_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/envd/packages/v1"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/packages"
	"github.com/envd-dev/envd/internal/packages/pkgtest"
	"github.com/envd-dev/envd/internal/testutil"
)

// TestPip: in a virtual environment made as the sandbox's is, wheels the
// test builds are installed as the sandbox user from a directory (pip
// --no-index --find-links), listed, upgraded (a context that imported the
// old version is told), pinned back from a file, removed; a Debian package
// the environment sees is overridden by a newer copy and that copy
// removed, Debian's untouched; an unreachable index is pip's own error.
func TestPip(t *testing.T) {
	t.Parallel()
	owner := pkgtest.Owner(t)
	venv := pkgtest.Venv(t, owner)
	wheels := pkgtest.Dir(t, owner)
	w1 := pkgtest.Wheel(t, wheels, "envd-pkgtest", "1.0.0", "envd_pkgtest")
	pkgtest.Wheel(t, wheels, "envd-pkgtest", "2.0.0", "envd_pkgtest")
	kernels := &pkgtest.Kernels{}
	kernels.Set("python", "ctx-py", "envd_pkgtest", "os")
	kernels.Set("python", "ctx-other", "json")
	c := serve(t, owner, packages.Options{
		PythonVenv: venv, Kernels: kernels,
		// An index that refuses connections at once: no network.
		Env: func() map[string]string {
			return map[string]string{"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0"}
		},
	})
	const PIP = pb.Manager_MANAGER_PIP
	site := filepath.Join(venv, "lib", pythonVersion(t), "site-packages")

	o := install(t, c, owner.Name, &pb.InstallRequest{Manager: PIP, Source: wheels, Packages: pip("envd_pkgtest==1.0.0")})
	ok(t, "install 1.0.0", o)
	if want := []string{"envd-pkgtest ->1.0.0"}; !slices.Equal(o.changes(), want) || len(o.done.GetStaleContexts()) != 0 {
		t.Errorf("install 1.0.0: changes %v, stale %v; want %v and none", o.changes(), o.done.GetStaleContexts(), want)
	}
	if len(o.started) != 1 || !slices.Equal(o.started[0][:4], []string{filepath.Join(venv, "bin", "python"), "-m", "pip", "install"}) ||
		!slices.Contains(o.started[0], "--find-links") || o.users[0] != owner.Name {
		t.Errorf("started %v as %v", o.started, o.users)
	}
	if !strings.Contains(o.stdout.String(), "Successfully installed envd_pkgtest-1.0.0") {
		t.Errorf("install output: %s", o)
	}
	if uid := testutil.Owner(t, filepath.Join(site, "envd_pkgtest", "__init__.py")); uid != owner.UID {
		t.Errorf("installed as uid %d, want %s's %d", uid, owner.Name, owner.UID)
	}
	if got := kernels.Notices("ctx-py"); len(got) != 0 {
		t.Errorf("a new package made a context stale: %v", got)
	}

	l := list(t, c, "", &pb.ListRequest{Manager: PIP})
	if got := find(l, "envd-pkgtest"); l.GetTarget() != venv || len(got) != 1 || got[0].GetVersion() != "1.0.0" || got[0].GetLocation() != site || got[0].GetSystem() || got[0].GetShadowed() {
		t.Errorf("list: target %s, envd-pkgtest %v", l.GetTarget(), got)
	}

	// Upgrade: the context that imported it is stale, and told so.
	o = install(t, c, owner.Name, &pb.InstallRequest{Manager: PIP, Source: wheels, Packages: pip("envd-pkgtest"), Upgrade: true})
	ok(t, "upgrade", o)
	wantMsg := "package envd-pkgtest changed from 1.0.0 to 2.0.0 after this context imported it; restart the context to use the new version"
	if want := []string{"envd-pkgtest 1.0.0->2.0.0"}; !slices.Equal(o.changes(), want) {
		t.Errorf("upgrade: changes %v, want %v", o.changes(), want)
	}
	if st := o.done.GetStaleContexts(); len(st) != 1 || st[0].GetContextId() != "ctx-py" || !slices.Equal(st[0].GetModules(), []string{"envd_pkgtest"}) || st[0].GetMessage() != wantMsg {
		t.Errorf("upgrade: stale %v", st)
	}
	if got := kernels.Notices("ctx-py"); !slices.Equal(got, []string{wantMsg}) {
		t.Errorf("upgrade: notices %q", got)
	}
	if asked := kernels.Asked("python"); len(asked) != 1 || !slices.Equal(asked[0], []string{"envd_pkgtest"}) {
		t.Errorf("upgrade: asked the engine about %v", asked)
	}

	// Without upgrade, an installed package is left alone.
	o = install(t, c, owner.Name, &pb.InstallRequest{Manager: PIP, Source: wheels, Packages: pip("envd-pkgtest")})
	ok(t, "install again", o)
	if len(o.done.GetChanges()) != 0 || !strings.Contains(o.stdout.String(), "Requirement already satisfied") {
		t.Errorf("install again: %v\n%s", o.changes(), o)
	}

	// A pin back, from a file.
	o = install(t, c, owner.Name, &pb.InstallRequest{Manager: PIP, Source: w1, Packages: pip("envd-pkgtest==1.0.0")})
	ok(t, "pin 1.0.0 from a file", o)
	if want := []string{"envd-pkgtest 2.0.0->1.0.0"}; !slices.Equal(o.changes(), want) {
		t.Errorf("pin: changes %v, want %v", o.changes(), want)
	}
	kernels.Notices("ctx-py")

	// Removed: the context is told.
	o = remove(t, c, owner.Name, &pb.RemoveRequest{Manager: PIP, Names: []string{"ENVD_PKGTEST"}})
	ok(t, "remove", o)
	if want := []string{"envd-pkgtest 1.0.0->"}; !slices.Equal(o.changes(), want) || !strings.Contains(o.stdout.String(), "Successfully uninstalled envd-pkgtest-1.0.0") {
		t.Errorf("remove: changes %v, want %v\n%s", o.changes(), want, o)
	}
	if got := kernels.Notices("ctx-py"); len(got) != 1 || !strings.Contains(got[0], "package envd-pkgtest 1.0.0 was removed after this context imported it") {
		t.Errorf("remove: notices %q", got)
	}
	if o := remove(t, c, owner.Name, &pb.RemoveRequest{Manager: PIP, Names: []string{"envd-pkgtest"}}); connect.CodeOf(o.err) != connect.CodeNotFound ||
		!strings.Contains(o.err.Error(), "pip: envd-pkgtest is not installed") || len(o.started) != 0 {
		t.Errorf("remove again: %s", o)
	}

	t.Run("override a Debian package", func(t *testing.T) {
		deb := systemPackage(t, list(t, c, "", &pb.ListRequest{Manager: PIP}))
		before := debianFiles(t, deb)
		wheel := pkgtest.Wheel(t, pkgtest.Dir(t, owner), deb.GetName(), "9999.0.0", "envd_override_probe")
		o := install(t, c, owner.Name, &pb.InstallRequest{Manager: PIP, Source: wheel})
		ok(t, "override", o)
		if want := []string{fmt.Sprintf("%s %s->9999.0.0", deb.GetName(), deb.GetVersion())}; !slices.Equal(o.changes(), want) {
			t.Errorf("override: changes %v, want %v\n%s", o.changes(), want, o)
		}
		copies := find(list(t, c, "", &pb.ListRequest{Manager: PIP}), deb.GetName())
		if len(copies) != 2 || copies[0].GetVersion() != "9999.0.0" || copies[0].GetSystem() || copies[0].GetShadowed() ||
			copies[1].GetVersion() != deb.GetVersion() || !copies[1].GetSystem() || !copies[1].GetShadowed() {
			t.Errorf("override: listed %v", copies)
		}
		o = remove(t, c, owner.Name, &pb.RemoveRequest{Manager: PIP, Names: []string{deb.GetName()}})
		ok(t, "remove the override", o)
		if want := []string{fmt.Sprintf("%s 9999.0.0->%s", deb.GetName(), deb.GetVersion())}; !slices.Equal(o.changes(), want) {
			t.Errorf("remove the override: changes %v, want %v", o.changes(), want)
		}
		if after := debianFiles(t, deb); !slices.Equal(before, after) {
			t.Errorf("Debian's copy changed: %d files before, %d after", len(before), len(after))
		}
		o = remove(t, c, owner.Name, &pb.RemoveRequest{Manager: PIP, Names: []string{deb.GetName()}})
		if connect.CodeOf(o.err) != connect.CodeFailedPrecondition || len(o.started) != 0 ||
			!strings.Contains(o.err.Error(), fmt.Sprintf("pip: %s %s is in the system site packages (%s), not in the environment %s", deb.GetName(), deb.GetVersion(), deb.GetLocation(), venv)) {
			t.Errorf("remove Debian's: %s", o)
		}
	})

	// Offline: no index answers. A name fails at once, before pip runs,
	// saying which index and why; a name installed already, a directory
	// or a file need no index up front; a file whose dependency pip cannot
	// fetch fails with pip's own line and the index's state.
	const noIndex = "no package index reachable at http://127.0.0.1:9/simple: connection refused"
	t.Run("no index", func(t *testing.T) {
		o := install(t, c, owner.Name, &pb.InstallRequest{Manager: PIP, Packages: pip("envd-pkgtest-absent")})
		if want := noIndex + "; pip install did not run"; connect.CodeOf(o.err) != connect.CodeFailedPrecondition ||
			!strings.Contains(o.err.Error(), want) || strings.Contains(o.err.Error(), "\n") {
			t.Errorf("no index: %s\nwant %q, on one line", o, want)
		}
		if len(o.started) != 0 || o.stderr.Len() != 0 {
			t.Errorf("no index: pip ran: %s", o)
		}
		deb := systemPackage(t, list(t, c, "", &pb.ListRequest{Manager: PIP}))
		o = install(t, c, owner.Name, &pb.InstallRequest{Manager: PIP, Packages: pip(deb.GetName())})
		ok(t, "no index, installed already", o)
		if !strings.Contains(o.stdout.String(), "Requirement already satisfied") {
			t.Errorf("no index, installed already: %s", o)
		}
	})
	t.Run("not in the directory", func(t *testing.T) {
		o := install(t, c, owner.Name, &pb.InstallRequest{Manager: PIP, Source: wheels, Packages: pip("envd-pkgtest-absent")})
		if want := "pip install failed (exit status 1): ERROR: No matching distribution found for envd-pkgtest-absent"; connect.CodeOf(o.err) != connect.CodeFailedPrecondition ||
			!strings.HasSuffix(o.err.Error(), want) || strings.Contains(o.err.Error(), "\n") || strings.Contains(o.err.Error(), "reachable") {
			t.Errorf("not in the directory: %s\nwant %q", o, want)
		}
		if !strings.Contains(o.stderr.String(), "No matching distribution") {
			t.Errorf("not in the directory: stderr not streamed: %s", o)
		}
	})
	t.Run("a file's dependency", func(t *testing.T) {
		w := pkgtest.WheelRequiring(t, pkgtest.Dir(t, owner), "envd-pkgtest-needy", "1.0.0", "envd_pkgtest_needy", "envd-pkgtest-dep")
		o := install(t, c, owner.Name, &pb.InstallRequest{Manager: PIP, Source: w})
		if want := noIndex + "; pip install failed (exit status 1): ERROR: No matching distribution found for envd-pkgtest-dep"; connect.CodeOf(o.err) != connect.CodeFailedPrecondition ||
			!strings.HasSuffix(o.err.Error(), want) {
			t.Errorf("a file's dependency: %s\nwant %q", o, want)
		}
		if len(o.started) != 1 {
			t.Errorf("a file's dependency: pip did not run: %s", o)
		}
	})
}

// systemPackage is a package of Debian's that the environment sees:
// traitlets (Jupyter needs it), else the first one listed.
func systemPackage(t *testing.T, l *pb.ListResponse) *pb.Package {
	t.Helper()
	var first *pb.Package
	for _, p := range l.GetPackages() {
		if !p.GetSystem() || p.GetShadowed() || !strings.HasPrefix(p.GetLocation(), "/usr/lib/python3/") {
			continue
		}
		if p.GetName() == "traitlets" {
			return p
		}
		if first == nil {
			first = p
		}
	}
	if first == nil {
		t.Fatal("the environment sees no Debian package (is python3-jupyter-server installed? scripts/install-deps.sh)")
	}
	return first
}

// debianFiles lists the dist-info or egg-info of Debian's copy of p, with
// their sizes and times: what pip would change if it touched it.
func debianFiles(t *testing.T, p *pb.Package) []string {
	t.Helper()
	key := strings.ToLower(strings.NewReplacer("-", "_", ".", "_").Replace(p.GetName()))
	var out []string
	entries, err := os.ReadDir(p.GetLocation())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		n := strings.ToLower(e.Name())
		if !strings.HasPrefix(n, key+"-") {
			continue
		}
		filepath.Walk(filepath.Join(p.GetLocation(), e.Name()), func(f string, fi os.FileInfo, err error) error {
			if err == nil {
				out = append(out, fmt.Sprintf("%s %d %s", f, fi.Size(), fi.ModTime()))
			}
			return nil
		})
	}
	if len(out) == 0 {
		t.Fatalf("no metadata of %s in %s", p.GetName(), p.GetLocation())
	}
	return out
}

// pythonVersion is Debian's python's "python3.X".
func pythonVersion(t *testing.T) string {
	out, err := exec.Command(pkgtest.Python, "-c", "import sys; print(f'python{sys.version_info[0]}.{sys.version_info[1]}')").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// TestR: local R source packages, built by the test, are installed into a
// library of the test's as the sandbox user, listed, upgraded (an R
// context that loaded the namespace is told), and removed; a package of
// R's own library is not envd's to remove.
func TestR(t *testing.T) {
	t.Parallel()
	owner := pkgtest.Owner(t)
	lib := pkgtest.Dir(t, owner)
	srcs := pkgtest.Dir(t, owner)
	const name = "envdPkgTest"
	r1 := pkgtest.RPackage(t, srcs, name, "1.0.0")
	r2 := pkgtest.RPackage(t, srcs, name, "2.0.0")
	kernels := &pkgtest.Kernels{}
	kernels.Set("r", "ctx-r", name, "stats")
	// The repository is one of the test's, which has no packages.
	cran := emptyCRAN(t)
	c := serve(t, owner, packages.Options{RLibrary: lib, Kernels: kernels, Env: rRepos(t, owner, cran)})
	const R = pb.Manager_MANAGER_R

	o := install(t, c, owner.Name, &pb.InstallRequest{Manager: R, Source: r1, Packages: pip(name + "==1.0.0")})
	ok(t, "install 1.0.0", o)
	if cmd := strings.Join(o.started[0], " "); strings.Contains(cmd, "\n") || strings.Contains(cmd, "install.packages") {
		t.Errorf("the command shown is envd's script: %q", cmd)
	}
	if want := []string{name + " ->1.0.0"}; !slices.Equal(o.changes(), want) {
		t.Errorf("install: changes %v, want %v\n%s", o.changes(), want, o)
	}
	if uid := testutil.Owner(t, filepath.Join(lib, name, "DESCRIPTION")); uid != owner.UID {
		t.Errorf("installed as uid %d, want %d", uid, owner.UID)
	}
	l := list(t, c, "", &pb.ListRequest{Manager: R})
	if got := find(l, name); l.GetTarget() != lib || len(got) != 1 || got[0].GetVersion() != "1.0.0" || got[0].GetLocation() != lib || got[0].GetSystem() {
		t.Errorf("list: target %s, %s %v", l.GetTarget(), name, got)
	}
	if got := find(l, "stats"); len(got) != 1 || !got[0].GetSystem() {
		t.Errorf("list: stats %v", got)
	}

	o = install(t, c, owner.Name, &pb.InstallRequest{Manager: R, Source: r2, Upgrade: true})
	ok(t, "upgrade", o)
	wantMsg := "package " + name + " changed from 1.0.0 to 2.0.0 after this context loaded it; restart the context to use the new version"
	if want := []string{name + " 1.0.0->2.0.0"}; !slices.Equal(o.changes(), want) {
		t.Errorf("upgrade: changes %v, want %v", o.changes(), want)
	}
	if st := o.done.GetStaleContexts(); len(st) != 1 || st[0].GetContextId() != "ctx-r" || st[0].GetMessage() != wantMsg {
		t.Errorf("upgrade: stale %v", st)
	}
	if got := kernels.Notices("ctx-r"); !slices.Equal(got, []string{wantMsg}) {
		t.Errorf("upgrade: notices %q", got)
	}

	o = remove(t, c, owner.Name, &pb.RemoveRequest{Manager: R, Names: []string{name}})
	ok(t, "remove", o)
	if want := []string{name + " 2.0.0->"}; !slices.Equal(o.changes(), want) {
		t.Errorf("remove: changes %v, want %v\n%s", o.changes(), want, o)
	}
	if _, err := os.Stat(filepath.Join(lib, name)); !os.IsNotExist(err) {
		t.Errorf("removed, yet %s/%s: %v", lib, name, err)
	}
	if o := remove(t, c, owner.Name, &pb.RemoveRequest{Manager: R, Names: []string{"stats"}}); connect.CodeOf(o.err) != connect.CodeFailedPrecondition ||
		!strings.Contains(o.err.Error(), "not in the library "+lib) || len(o.started) != 0 {
		t.Errorf("remove stats: %s", o)
	}
	if o := remove(t, c, owner.Name, &pb.RemoveRequest{Manager: R, Names: []string{name}}); connect.CodeOf(o.err) != connect.CodeNotFound {
		t.Errorf("remove again: %s", o)
	}

	// A package the repository does not have: install.packages only
	// warns; envd fails with R's warning, on one line.
	o = install(t, c, owner.Name, &pb.InstallRequest{Manager: R, Packages: pip("envdNoSuchPkg")})
	if want := "Rscript failed (exit status 1): package ‘envdNoSuchPkg’ is not available for this version of R"; connect.CodeOf(o.err) != connect.CodeFailedPrecondition ||
		!strings.HasSuffix(o.err.Error(), want) {
		t.Errorf("no such package: %s\nwant %q", o, want)
	}
	if !strings.Contains(o.stderr.String(), "is not available") {
		t.Errorf("no such package: R's warning not streamed: %s", o)
	}
	// No repository reachable: envd says so before R runs.
	down := "http://" + testutil.ClosedAddr(t)
	offline := serve(t, owner, packages.Options{RLibrary: lib, Env: rRepos(t, owner, down)})
	o = install(t, offline, owner.Name, &pb.InstallRequest{Manager: R, Packages: pip("envdNoSuchPkg")})
	if want := "no package index reachable at " + down + ": connection refused; Rscript did not run"; connect.CodeOf(o.err) != connect.CodeFailedPrecondition ||
		!strings.Contains(o.err.Error(), want) || len(o.started) != 0 {
		t.Errorf("no repository: %s\nwant %q", o, want)
	}
	// Installed already, without upgrade: no repository needed.
	o = install(t, offline, owner.Name, &pb.InstallRequest{Manager: R, Packages: pip("stats")})
	ok(t, "install stats offline", o)
	// Installed already (R's own), without upgrade: nothing to do.
	o = install(t, c, owner.Name, &pb.InstallRequest{Manager: R, Packages: pip("stats")})
	ok(t, "install stats", o)
	if len(o.done.GetChanges()) != 0 {
		t.Errorf("install stats: %v", o.changes())
	}
}

// emptyCRAN serves an R repository that has no packages.
func emptyCRAN(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/src/contrib/PACKAGES" {
			return // no package
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// rRepos is the environment that makes R's repos option repo: a site
// profile of the test's (R_PROFILE), read by Rscript --no-init-file.
func rRepos(t *testing.T, owner *identity.User, repo string) func() map[string]string {
	t.Helper()
	p := filepath.Join(pkgtest.Dir(t, owner), "Rprofile.site")
	if err := os.WriteFile(p, []byte(fmt.Sprintf("options(repos = c(CRAN = %q))\n", repo)), 0o644); err != nil {
		t.Fatal(err)
	}
	return func() map[string]string { return map[string]string{"R_PROFILE": p} }
}

// TestNpmOffline: with no registry reachable, a name fails at once,
// naming the registry, and npm does not run; a tarball needs none.
func TestNpmOffline(t *testing.T) {
	t.Parallel()
	owner := pkgtest.Owner(t)
	proj := pkgtest.Dir(t, owner)
	registry := "http://" + testutil.ClosedAddr(t) + "/"
	c := serve(t, owner, packages.Options{Env: func() map[string]string {
		return map[string]string{"npm_config_registry": registry}
	}})
	const NPM = pb.Manager_MANAGER_NPM
	o := install(t, c, owner.Name, &pb.InstallRequest{Manager: NPM, Dir: proj, Packages: pip("left-pad")})
	if want := "no package index reachable at " + registry + ": connection refused; npm install did not run"; connect.CodeOf(o.err) != connect.CodeFailedPrecondition ||
		!strings.Contains(o.err.Error(), want) || strings.Contains(o.err.Error(), "\n") || len(o.started) != 0 {
		t.Errorf("offline: %s\nwant %q", o, want)
	}
	tgz := pkgtest.NpmTarball(t, pkgtest.Dir(t, owner), "envd-pkgtest-offline", "1.0.0")
	ok(t, "offline, a tarball", install(t, c, owner.Name, &pb.InstallRequest{Manager: NPM, Dir: proj, Source: tgz}))
}

// TestNpm: local npm tarballs, packed by the test, are installed into a
// project directory as the sandbox user, listed, upgraded and removed.
func TestNpm(t *testing.T) {
	t.Parallel()
	owner := pkgtest.Owner(t)
	proj := pkgtest.Dir(t, owner)
	tarballs := pkgtest.Dir(t, owner)
	const name = "envd-pkgtest-npm"
	n1 := pkgtest.NpmTarball(t, tarballs, name, "1.0.0")
	n2 := pkgtest.NpmTarball(t, tarballs, name, "2.0.0")
	c := serve(t, owner, packages.Options{})
	const NPM = pb.Manager_MANAGER_NPM

	o := install(t, c, owner.Name, &pb.InstallRequest{Manager: NPM, Source: n1, Dir: proj})
	ok(t, "install", o)
	if want := []string{name + " ->1.0.0"}; !slices.Equal(o.changes(), want) {
		t.Errorf("install: changes %v, want %v\n%s", o.changes(), want, o)
	}
	nm := filepath.Join(proj, "node_modules")
	if uid := testutil.Owner(t, filepath.Join(nm, name, "package.json")); uid != owner.UID {
		t.Errorf("installed as uid %d, want %d", uid, owner.UID)
	}
	l := list(t, c, "", &pb.ListRequest{Manager: NPM, Dir: proj})
	if got := find(l, name); l.GetTarget() != proj || len(got) != 1 || got[0].GetVersion() != "1.0.0" || got[0].GetLocation() != nm {
		t.Errorf("list: target %s, %v", l.GetTarget(), got)
	}
	o = install(t, c, owner.Name, &pb.InstallRequest{Manager: NPM, Source: n2, Dir: proj, Packages: pip(name + "==2.0.0")})
	ok(t, "upgrade", o)
	if want := []string{name + " 1.0.0->2.0.0"}; !slices.Equal(o.changes(), want) {
		t.Errorf("upgrade: changes %v, want %v\n%s", o.changes(), want, o)
	}
	// Named without a version or upgrade, an installed package is left
	// alone: npm does not even run.
	o = install(t, c, owner.Name, &pb.InstallRequest{Manager: NPM, Dir: proj, Packages: pip(name)})
	ok(t, "install again", o)
	if len(o.started) != 0 || len(o.done.GetChanges()) != 0 {
		t.Errorf("install again: %s", o)
	}
	o = remove(t, c, owner.Name, &pb.RemoveRequest{Manager: NPM, Dir: proj, Names: []string{name}})
	ok(t, "remove", o)
	if want := []string{name + " 2.0.0->"}; !slices.Equal(o.changes(), want) {
		t.Errorf("remove: changes %v, want %v\n%s", o.changes(), want, o)
	}
	if l := list(t, c, "", &pb.ListRequest{Manager: NPM, Dir: proj}); len(find(l, name)) != 0 {
		t.Errorf("still listed after removal: %v", l.GetPackages())
	}
	if o := remove(t, c, owner.Name, &pb.RemoveRequest{Manager: NPM, Dir: proj, Names: []string{name}}); connect.CodeOf(o.err) != connect.CodeNotFound {
		t.Errorf("remove again: %s", o)
	}
}

// TestApt: a Debian package the test builds (dpkg-deb --build) is
// installed from its file, listed, and purged, as root.
func TestApt(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: apt-get installs as root")
	}
	owner := pkgtest.Owner(t)
	name := fmt.Sprintf("envd-test-%d", os.Getpid())
	deb := pkgtest.Deb(t, pkgtest.Dir(t, owner), name, "1.0")
	t.Cleanup(func() {
		// Whatever happened, leave no package behind.
		if out, err := exec.Command("dpkg-query", "-W", "-f=${db:Status-Abbrev}", name).Output(); err == nil && strings.HasPrefix(string(out), "i") {
			exec.Command("dpkg", "--purge", name).Run()
		}
	})
	c := serve(t, owner, packages.Options{})
	const APT = pb.Manager_MANAGER_APT

	o := install(t, c, "", &pb.InstallRequest{Manager: APT, Source: deb, Packages: pip(name + "==1.0")})
	ok(t, "install", o)
	if want := []string{name + " ->1.0"}; !slices.Equal(o.changes(), want) {
		t.Errorf("install: changes %v, want %v\n%s", o.changes(), want, o)
	}
	if len(o.started) != 1 || o.users[0] != "root" || !slices.Contains(o.started[0], deb) {
		t.Errorf("started %v as %v", o.started, o.users)
	}
	if b, err := os.ReadFile(filepath.Join("/usr/share", name, "version")); err != nil || string(b) != "1.0\n" {
		t.Errorf("installed file: %q %v", b, err)
	}
	if got := find(list(t, c, "", &pb.ListRequest{Manager: APT}), name); len(got) != 1 || got[0].GetVersion() != "1.0" {
		t.Errorf("list: %v", got)
	}
	o = remove(t, c, "", &pb.RemoveRequest{Manager: APT, Names: []string{name}, Purge: true})
	ok(t, "purge", o)
	if want := []string{name + " 1.0->"}; !slices.Equal(o.changes(), want) || !slices.Contains(o.started[0], "purge") {
		t.Errorf("purge: changes %v, want %v\n%s", o.changes(), want, o)
	}
	if out, _ := exec.Command("dpkg-query", "-W", "-f=${db:Status-Abbrev}", name).Output(); strings.HasPrefix(string(out), "i") || strings.HasPrefix(string(out), "r") {
		t.Errorf("dpkg still knows %s: %q", name, out)
	}
	if o := remove(t, c, "", &pb.RemoveRequest{Manager: APT, Names: []string{name}}); connect.CodeOf(o.err) != connect.CodeNotFound || !strings.Contains(o.err.Error(), "apt: "+name+" is not installed") {
		t.Errorf("remove again: %s", o)
	}
}

// TestNpmNameIsNotAFile: a package name is looked up by name, never read as
// a file: npm reads a name ending in .tgz, .tar or .tar.gz as the path of a
// tarball in the project directory (which the sandbox user writes), so that
// "left-pad.tgz" installs whatever was left there under that name.
func TestNpmNameIsNotAFile(t *testing.T) {
	t.Parallel()
	owner := pkgtest.Owner(t)
	proj := pkgtest.Dir(t, owner)
	planted := pkgtest.NpmTarball(t, pkgtest.Dir(t, owner), "envd-pkgtest-planted", "6.6.6")
	if err := os.Rename(planted, filepath.Join(proj, "left-pad.tgz")); err != nil {
		t.Fatal(err)
	}
	pkgtest.Chown(t, proj, owner)
	registry := "http://" + testutil.ClosedAddr(t) + "/"
	c := serve(t, owner, packages.Options{Env: func() map[string]string {
		// Offline: npm runs without envd checking the registry.
		return map[string]string{"npm_config_registry": registry, "npm_config_offline": "true"}
	}})
	o := install(t, c, owner.Name, &pb.InstallRequest{Manager: pb.Manager_MANAGER_NPM, Dir: proj, Packages: pip("left-pad.tgz")})
	if o.err == nil {
		t.Errorf("the name left-pad.tgz installed the file %s: changes %v\n%s", filepath.Join(proj, "left-pad.tgz"), o.changes(), o)
	}
}
