package pkgconnect_test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/envd/packages/v1"
	"github.com/envd-dev/envd/gen/envd/packages/v1/packagesv1connect"
	"github.com/envd-dev/envd/internal/packages"
	"github.com/envd-dev/envd/internal/packages/pkgtest"
	"github.com/envd-dev/envd/internal/testutil"
)

// badCase is a request the service must refuse before running anything.
type badCase struct {
	name    string
	user    string // "": the default user
	install *pb.InstallRequest
	remove  *pb.RemoveRequest
	list    *pb.ListRequest
	code    connect.Code
	msg     string // in the error's message
}

func (bc badCase) run(t *testing.T, c packagesv1connect.PackageServiceClient) {
	t.Helper()
	var o *outcome
	switch {
	case bc.install != nil:
		o = install(t, c, bc.user, bc.install)
	case bc.remove != nil:
		o = remove(t, c, bc.user, bc.remove)
	default:
		ctx, cancel := context.WithTimeout(context.Background(), testutil.Wait)
		defer cancel()
		_, err := c.List(ctx, as(bc.user, bc.list))
		o = &outcome{err: err}
	}
	if got := connect.CodeOf(o.err); got != bc.code || !strings.Contains(o.err.Error(), bc.msg) {
		t.Fatalf("got %v (%v); want %v with %q", got, o.err, bc.code, bc.msg)
	}
	if o.events != 0 {
		t.Fatalf("%d events before the error (something ran): %s", o.events, o)
	}
}

func pip(names ...string) []*pb.PackageSpec {
	var out []*pb.PackageSpec
	for _, n := range names {
		name, version, _ := strings.Cut(n, "==")
		out = append(out, &pb.PackageSpec{Name: name, Version: version})
	}
	return out
}

// TestRefusedBeforeRunning: every kind of bad input is refused with its
// code and a message naming the field and the rule, before any command
// runs (the stream carries no event).
func TestRefusedBeforeRunning(t *testing.T) {
	t.Parallel()
	owner := pkgtest.Owner(t)
	dir := pkgtest.Dir(t, owner)
	wheel := pkgtest.Wheel(t, dir, "envd-pkgtest", "1.0.0", "envd_pkgtest")
	notR := filepath.Join(dir, "notR_1.0.tar.gz")
	writeTarGz(t, notR, "notR/README", "not an R package\n")
	file := filepath.Join(dir, "file.txt")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A real environment and library: only the checks may stop these.
	c := serve(t, owner, packages.Options{PythonVenv: "/nonexistent-venv", RLibrary: dir})
	many := make([]string, 101)
	for i := range many {
		many[i] = fmt.Sprintf("p%d", i)
	}
	const (
		PIP = pb.Manager_MANAGER_PIP
		NPM = pb.Manager_MANAGER_NPM
		R   = pb.Manager_MANAGER_R
		APT = pb.Manager_MANAGER_APT
	)
	inv := connect.CodeInvalidArgument
	cases := []badCase{
		{name: "no manager", list: &pb.ListRequest{}, code: inv, msg: "manager is missing: give one of MANAGER_PIP"},
		{name: "unknown manager", install: &pb.InstallRequest{Manager: 42, Packages: pip("x")}, code: inv, msg: "manager 42 is unknown"},
		{name: "unknown user", user: "nosuchuser", list: &pb.ListRequest{Manager: PIP}, code: connect.CodeUnauthenticated, msg: "invalid username: 'nosuchuser'"},
		// pip
		{name: "pip name with a space", install: &pb.InstallRequest{Manager: PIP, Packages: pip("Foo Bar")}, code: inv, msg: `packages[0].name "Foo Bar": not a PEP 508 name`},
		{name: "pip name like an option", install: &pb.InstallRequest{Manager: PIP, Packages: pip("ok", "-r")}, code: inv, msg: `packages[1].name "-r": must not start with '-'`},
		{name: "pip name with a shell", install: &pb.InstallRequest{Manager: PIP, Packages: pip("foo;rm")}, code: inv, msg: `packages[0].name "foo;rm": not a PEP 508 name`},
		{name: "pip empty name", install: &pb.InstallRequest{Manager: PIP, Packages: pip("")}, code: inv, msg: "packages[0].name is empty"},
		{name: "pip name ending in _", install: &pb.InstallRequest{Manager: PIP, Packages: pip("foo_")}, code: inv, msg: "starting and ending with a letter or digit"},
		{name: "pip unclosed extras", install: &pb.InstallRequest{Manager: PIP, Packages: pip("requests[socks")}, code: inv, msg: `"requests[socks": not a PEP 508 name`},
		{name: "pip name with a newline", install: &pb.InstallRequest{Manager: PIP, Packages: pip("a\nb")}, code: inv, msg: "must not hold a control character"},
		{name: "pip bad version", install: &pb.InstallRequest{Manager: PIP, Packages: pip("x==1.0 beta")}, code: inv, msg: `packages[0].version "1.0 beta": not a PEP 440 version`},
		{name: "pip range", install: &pb.InstallRequest{Manager: PIP, Packages: pip("x==>=1.0")}, code: inv, msg: "installed exactly"},
		{name: "pip version like an option", install: &pb.InstallRequest{Manager: PIP, Packages: pip("x==--pre")}, code: inv, msg: `packages[0].version "--pre": must not start with '-'`},
		{name: "pip twice", install: &pb.InstallRequest{Manager: PIP, Packages: pip("Foo.Bar", "foo-bar")}, code: inv, msg: `packages[1].name "foo-bar": the same package as packages[0]`},
		{name: "pip too many", install: &pb.InstallRequest{Manager: PIP, Packages: pip(many...)}, code: inv, msg: "101 of them: at most 100"},
		{name: "nothing to install", install: &pb.InstallRequest{Manager: PIP}, code: inv, msg: "packages is empty"},
		{name: "relative source", install: &pb.InstallRequest{Manager: PIP, Source: "wheels/x.whl"}, code: inv, msg: `source "wheels/x.whl": not an absolute path`},
		{name: "missing source", install: &pb.InstallRequest{Manager: PIP, Source: "/nonexistent/x.whl"}, code: inv, msg: "source /nonexistent/x.whl: no such file or directory"},
		{name: "pip source not a wheel", install: &pb.InstallRequest{Manager: PIP, Source: file}, code: inv, msg: "not a wheel (.whl) or an sdist"},
		{name: "pip directory without names", install: &pb.InstallRequest{Manager: PIP, Source: dir}, code: inv, msg: "with a directory as source"},
		{name: "pip file and two names", install: &pb.InstallRequest{Manager: PIP, Source: wheel, Packages: pip("a", "b")}, code: inv, msg: "name at most one, the package the file holds"},
		{name: "pip file of another package", install: &pb.InstallRequest{Manager: PIP, Source: wheel, Packages: pip("other")}, code: inv, msg: `packages[0].name "other": source ` + wheel + " holds envd_pkgtest"},
		{name: "pip file of another version", install: &pb.InstallRequest{Manager: PIP, Source: wheel, Packages: pip("envd-pkgtest==2.0")}, code: inv, msg: `packages[0].version "2.0": source ` + wheel + " holds version 1.0.0"},
		{name: "dir for pip", install: &pb.InstallRequest{Manager: PIP, Packages: pip("x"), Dir: dir}, code: inv, msg: "dir is for npm only"},
		{name: "purge for pip", remove: &pb.RemoveRequest{Manager: PIP, Names: []string{"x"}, Purge: true}, code: inv, msg: "purge is for apt only"},
		{name: "nothing to remove", remove: &pb.RemoveRequest{Manager: PIP}, code: inv, msg: "names is empty"},
		{name: "remove with extras", remove: &pb.RemoveRequest{Manager: PIP, Names: []string{"x[y]"}}, code: inv, msg: "give the name alone"},
		{name: "remove an option", remove: &pb.RemoveRequest{Manager: PIP, Names: []string{"-y"}}, code: inv, msg: `names[0] "-y": must not start with '-'`},
		{name: "pip without an environment", install: &pb.InstallRequest{Manager: PIP, Packages: pip("x")}, code: connect.CodeUnavailable, msg: "the virtual environment's python"},
		// npm
		{name: "npm dot name", install: &pb.InstallRequest{Manager: NPM, Packages: pip(".hidden")}, code: inv, msg: `".hidden": not an npm name`},
		{name: "npm underscore name", install: &pb.InstallRequest{Manager: NPM, Packages: pip("_under")}, code: inv, msg: "not an npm name"},
		{name: "npm empty scope name", install: &pb.InstallRequest{Manager: NPM, Packages: pip("@scope/")}, code: inv, msg: "not an npm name"},
		{name: "npm reserved name", install: &pb.InstallRequest{Manager: NPM, Packages: pip("node_modules")}, code: inv, msg: "not an npm name"},
		{name: "npm bad range", install: &pb.InstallRequest{Manager: NPM, Packages: pip("x==not a range!")}, code: inv, msg: `packages[0].version "not a range!": not a semver version`},
		{name: "npm relative dir", install: &pb.InstallRequest{Manager: NPM, Packages: pip("x"), Dir: "proj"}, code: inv, msg: `dir "proj": not an absolute path`},
		{name: "npm missing dir", list: &pb.ListRequest{Manager: NPM, Dir: "/nonexistent"}, code: inv, msg: "dir /nonexistent: no such directory"},
		{name: "npm file as dir", install: &pb.InstallRequest{Manager: NPM, Packages: pip("x"), Dir: file}, code: inv, msg: "not a directory"},
		{name: "npm source a wheel", install: &pb.InstallRequest{Manager: NPM, Source: wheel}, code: inv, msg: "not an npm tarball"},
		{name: "npm source a directory", install: &pb.InstallRequest{Manager: NPM, Source: dir}, code: inv, msg: "a directory: npm installs an npm tarball"},
		// R
		{name: "R name with a digit first", install: &pb.InstallRequest{Manager: R, Packages: pip("1abc")}, code: inv, msg: `"1abc": not an R package name`},
		{name: "R one-letter name", install: &pb.InstallRequest{Manager: R, Packages: pip("a")}, code: inv, msg: "at least two characters"},
		{name: "R name ending in a dot", install: &pb.InstallRequest{Manager: R, Packages: pip("abc.")}, code: inv, msg: "not an R package name"},
		{name: "R version from a repository", install: &pb.InstallRequest{Manager: R, Packages: pip("abc==1.0")}, code: inv, msg: "R installs a given version only from a local source"},
		{name: "R source without DESCRIPTION", install: &pb.InstallRequest{Manager: R, Source: notR}, code: inv, msg: "no DIR/DESCRIPTION in it: not an R source package"},
		// apt
		{name: "apt uppercase name", install: &pb.InstallRequest{Manager: APT, Packages: pip("Foo")}, code: inv, msg: `"Foo": not a Debian package name`},
		{name: "apt one-letter name", install: &pb.InstallRequest{Manager: APT, Packages: pip("a")}, code: inv, msg: "not a Debian package name"},
		{name: "apt version without a digit", install: &pb.InstallRequest{Manager: APT, Packages: pip("curl==abc")}, code: inv, msg: `"abc": not a Debian version`},
		{name: "apt version ending in -", install: &pb.InstallRequest{Manager: APT, Packages: pip("curl==1.0-")}, code: inv, msg: "not a Debian version"},
		{name: "apt source not a .deb", install: &pb.InstallRequest{Manager: APT, Source: file}, code: inv, msg: "not a Debian package (.deb)"},
		{name: "apt remove an option", remove: &pb.RemoveRequest{Manager: APT, Names: []string{"--purge"}}, code: inv, msg: "must not start with '-'"},
	}
	for _, bc := range cases {
		t.Run(bc.name, func(t *testing.T) { bc.run(t, c) })
	}

	t.Run("without R library", func(t *testing.T) {
		c := serve(t, owner, packages.Options{})
		badCase{install: &pb.InstallRequest{Manager: R, Packages: pip("abc")}, code: connect.CodeUnavailable, msg: "envd has no R library"}.run(t, c)
		badCase{install: &pb.InstallRequest{Manager: PIP, Packages: pip("abc")}, code: connect.CodeUnavailable, msg: "envd has no Python virtual environment"}.run(t, c)
	})
}

// TestStrictUsers: with strict users only root changes Debian packages,
// and root does not run pip, npm or R (what they run is the sandbox
// user's to write).
func TestStrictUsers(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: strict mode's requests as root and as user")
	}
	owner := testutil.User(t, "user")
	c := serve(t, owner, packages.Options{StrictUsers: true, RLibrary: t.TempDir()})
	perm := connect.CodePermissionDenied
	for _, bc := range []badCase{
		{name: "apt install as user", user: "user", install: &pb.InstallRequest{Manager: pb.Manager_MANAGER_APT, Packages: pip("curl")}, code: perm, msg: "apt: only root may install or remove Debian packages with -strict-users (the request runs as user)"},
		{name: "apt remove as user", remove: &pb.RemoveRequest{Manager: pb.Manager_MANAGER_APT, Names: []string{"curl"}}, code: perm, msg: "only root may install or remove"},
		{name: "pip as root", user: "root", install: &pb.InstallRequest{Manager: pb.Manager_MANAGER_PIP, Packages: pip("x")}, code: perm, msg: "pip: root does not run pip with -strict-users"},
		{name: "R list as root", user: "root", list: &pb.ListRequest{Manager: pb.Manager_MANAGER_R}, code: perm, msg: "r: root does not run r with -strict-users"},
		{name: "npm as root", user: "root", remove: &pb.RemoveRequest{Manager: pb.Manager_MANAGER_NPM, Names: []string{"x"}}, code: perm, msg: "root does not run npm"},
	} {
		t.Run(bc.name, func(t *testing.T) { bc.run(t, c) })
	}
	// Anyone may see what Debian installed.
	if l := list(t, c, "user", &pb.ListRequest{Manager: pb.Manager_MANAGER_APT}); len(find(l, "dpkg")) != 1 {
		t.Errorf("apt list as user has no dpkg: %d packages", len(l.GetPackages()))
	}
}

// writeTarGz writes a gzipped tar with one file.
func writeTarGz(t *testing.T, p, name, content string) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg})
	tw.Write([]byte(content))
	for _, c := range []interface{ Close() error }{tw, zw, f} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
