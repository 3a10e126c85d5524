package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/internal/packages/pkgtest"
	"github.com/envd-dev/envd/internal/testutil"
)

// TestPackages drives the packages service of a real envd through the Go
// client and envctl pkg: pip in a virtual environment of the test's
// (ENVD_PYTHON_VENV, as documented), wheels the test builds installed from
// a directory, upgraded, pinned back, removed; bad input refused; pip's
// own failure (an index that refuses connections, set with /init as any
// variable installers get) is exit 1 with its last lines.
func TestPackages(t *testing.T) {
	t.Parallel()
	owner := pkgtest.Owner(t)
	venv := pkgtest.Venv(t, owner)
	wheels := pkgtest.Dir(t, owner)
	const dist = "envd-e2e-pkg"
	pkgtest.Wheel(t, wheels, dist, "1.0.0", "envd_e2e_pkg")
	pkgtest.Wheel(t, wheels, dist, "2.0.0", "envd_e2e_pkg")
	e := startEnvd(t, startOptions{env: []string{"ENVD_PYTHON_VENV=" + venv}})
	c := client.New(client.Options{Addr: e.url, User: owner.Name})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	l, err := c.ListPackages(ctx, client.ManagerPip, client.PackageOptions{})
	if err != nil || l.Target != venv || !slices.ContainsFunc(l.Packages, func(p client.Package) bool { return p.Name == "pip" && !p.System }) {
		t.Fatalf("list: %v, %+v", err, l)
	}

	var out testutil.SyncBuffer
	op, err := c.InstallPackages(ctx, client.ManagerPip, []client.PackageSpec{{Name: dist, Version: "1.0.0"}}, client.InstallOptions{Source: wheels, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	res, err := op.Wait()
	if err != nil || !slices.Equal(res.Changes, []client.PackageChange{{Name: dist, New: "1.0.0"}}) || !strings.Contains(out.String(), "Successfully installed") {
		t.Fatalf("install: %v %+v\n%s\n%s", err, res, out.String(), e.stderr)
	}

	// Events: the command first, then its output.
	op, err = c.InstallPackages(ctx, client.ManagerPip, []client.PackageSpec{{Name: dist}}, client.InstallOptions{Source: wheels, Upgrade: true})
	if err != nil {
		t.Fatal(err)
	}
	var events []client.PackageEvent
	for ev, err := range op.Events() {
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, ev)
	}
	if len(events) < 2 || events[0].Command == nil || events[0].Command.Args[0] != filepath.Join(venv, "bin", "python") || events[0].Command.User != owner.Name {
		t.Errorf("upgrade events: %+v", events)
	}
	if res, err := op.Wait(); err != nil || !slices.Equal(res.Changes, []client.PackageChange{{Name: dist, Old: "1.0.0", New: "2.0.0"}}) {
		t.Errorf("upgrade: %v %+v", err, res)
	}

	op, err = c.InstallPackages(ctx, client.ManagerPip, []client.PackageSpec{{Name: "-r"}}, client.InstallOptions{})
	if err == nil {
		_, err = op.Wait()
	}
	if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), `packages[0].name "-r": must not start with '-'`) {
		t.Errorf("bad name: %v", err)
	}

	// envctl pkg, on the same envd.
	addr := "--addr=" + e.url
	r := envctl(t, nil, nil, addr, "pkg", "ls", "--json")
	var listed []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &listed); r.code != 0 || err != nil ||
		!slices.ContainsFunc(listed, func(p map[string]any) bool {
			return p["name"] == dist && p["version"] == "2.0.0" && p["system"] == false
		}) {
		t.Errorf("pkg ls --json: %+v %v", r, err)
	}
	r = envctl(t, nil, nil, addr, "pkg", "add", "--source", wheels, dist+"==1.0.0")
	if r.code != 0 || !strings.Contains(r.stdout, "changed "+dist+" 2.0.0 -> 1.0.0\n") || !strings.Contains(r.stderr, "+ "+filepath.Join(venv, "bin", "python")+" -m pip install") {
		t.Errorf("pkg add: %+v", r)
	}
	r = envctl(t, nil, nil, addr, "pkg", "rm", dist)
	if r.code != 0 || !strings.HasSuffix(r.stdout, "removed "+dist+" 1.0.0\n") || !strings.Contains(r.stdout, "Successfully uninstalled") {
		t.Errorf("pkg rm: %+v", r)
	}
	r = envctl(t, nil, nil, addr, "pkg", "rm", dist)
	errorLine(t, r, 1, "pip: "+dist+" is not installed")
	oneErrorLine(t, envctl(t, nil, nil, addr, "pkg", "add", "--manager", "apt", "Not_A_Debian_Name"), "not a Debian package name")
	errorLine(t, envctl(t, nil, nil, addr, "pkg", "add", "--manager", "cobol", "x"), exitUsage, `--manager "cobol": give pip, npm, r or apt`)
	errorLine(t, envctl(t, nil, nil, addr, "pkg", "ls", "--source", wheels), exitUsage, "--source is for pkg add")

	if err := c.Init(ctx, client.InitOptions{EnvVars: map[string]string{"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0"}}); err != nil {
		t.Fatal(err)
	}
	// No index answers: refused before pip runs, naming the index.
	r = envctl(t, nil, nil, addr, "pkg", "add", "envd-e2e-absent")
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if last := lines[len(lines)-1]; r.code != 1 || last != "envctl: install pip packages: failed precondition: no package index reachable at http://127.0.0.1:9/simple: connection refused; "+
		"pip install did not run (a wheel or sdist file, or a directory of them, as source needs no index)" {
		t.Errorf("pkg add without an index: %+v", r)
	}
}

// TestPackagesStaleContext: a package upgraded through the API after a
// context imported it: the result names the context, and the context's
// next execution begins with the notice (the Go client's Notices); a
// context that never imported it is not told.
func TestPackagesStaleContext(t *testing.T) {
	t.Parallel()
	owner := pkgtest.Owner(t)
	venv := pkgtest.Venv(t, owner)
	wheels := pkgtest.Dir(t, owner)
	const dist, module = "envd-e2e-stale", "envd_e2e_stale"
	pkgtest.Wheel(t, wheels, dist, "1.0.0", module)
	pkgtest.Wheel(t, wheels, dist, "2.0.0", module)
	e := startEnvd(t, startOptions{jupyter: true, env: []string{"ENVD_PYTHON_VENV=" + venv}})
	c := client.New(client.Options{Addr: e.url, User: owner.Name})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), codeTimeout)
	defer cancel()

	install := func(version string, upgrade bool) *client.PackageResult {
		t.Helper()
		op, err := c.InstallPackages(ctx, client.ManagerPip, []client.PackageSpec{{Name: dist, Version: version}}, client.InstallOptions{Source: wheels, Upgrade: upgrade})
		if err != nil {
			t.Fatal(err)
		}
		res, err := op.Wait()
		if err != nil {
			t.Fatalf("install %s: %v\n%s", version, err, e.stderr)
		}
		return res
	}
	exec := func(id, code string) *client.ExecResult {
		t.Helper()
		x, err := c.Execute(ctx, code, client.ExecOptions{ContextID: id})
		if err != nil {
			t.Fatal(err)
		}
		res, err := x.Wait()
		if err != nil || res.Reason != client.EndOK {
			t.Fatalf("%q: %+v, %v", code, res, err)
		}
		return res
	}
	install("1.0.0", false)
	user, err := c.CreateContext(ctx, client.ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.CreateContext(ctx, client.ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if out := exec(user.ID, "import "+module+"\nprint("+module+".VERSION)").Stdout; out != "1.0.0\n" {
		t.Fatalf("imported version %q", out)
	}
	exec(other.ID, "1")

	res := install("2.0.0", true)
	if len(res.Stale) != 1 || res.Stale[0].ContextID != user.ID || !slices.Equal(res.Stale[0].Modules, []string{module}) ||
		!strings.Contains(res.Stale[0].Message, dist+" changed from 1.0.0 to 2.0.0") {
		t.Fatalf("stale contexts %+v", res.Stale)
	}
	got := exec(user.ID, "print("+module+".VERSION)")
	if len(got.Notices) != 1 || got.Notices[0].Kind != client.NoticePackagesChanged || got.Notices[0].Text != res.Stale[0].Message {
		t.Errorf("notices %+v, want the stale message", got.Notices)
	}
	if got.Stdout != "1.0.0\n" { // until the context is restarted
		t.Errorf("stdout %q", got.Stdout)
	}
	if n := exec(other.ID, "1").Notices; len(n) != 0 {
		t.Errorf("a context that never imported it got %+v", n)
	}
	// Restarted, it loads the new version.
	if _, err := c.RestartContext(ctx, user.ID); err != nil {
		t.Fatal(err)
	}
	if out := exec(user.ID, "import "+module+"\nprint("+module+".VERSION)"); out.Stdout != "2.0.0\n" || len(out.Notices) != 0 {
		t.Errorf("after a restart: %+v", out)
	}
	// Pinned back: the notice also comes through Events, first.
	install("1.0.0", false)
	x, err := c.Execute(ctx, "1", client.ExecOptions{ContextID: user.ID})
	if err != nil {
		t.Fatal(err)
	}
	var first *client.ExecEvent
	for ev, err := range x.Events() {
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = &ev
		}
	}
	if first == nil || first.Notice == nil || !strings.Contains(first.Notice.Text, "changed from 2.0.0 to 1.0.0") {
		t.Errorf("first event through Events: %+v", first)
	}
}
