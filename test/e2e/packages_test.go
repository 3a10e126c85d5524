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
	oneErrorLine(t, envctl(t, nil, nil, addr, "pkg", "add", "--manager", "cobol", "x"), `--manager "cobol": give pip, npm, r or apt`)
	oneErrorLine(t, envctl(t, nil, nil, addr, "pkg", "ls", "--source", wheels), "--source is for pkg add")

	if err := c.Init(ctx, client.InitOptions{EnvVars: map[string]string{"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0"}}); err != nil {
		t.Fatal(err)
	}
	r = envctl(t, nil, nil, addr, "pkg", "add", "envd-e2e-absent")
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if last := lines[len(lines)-1]; r.code != 1 || !strings.HasPrefix(last, "envctl: install pip packages: failed precondition: pip install failed (exit status 1):") ||
		!strings.Contains(last, "No matching distribution found for envd-e2e-absent") {
		t.Errorf("pkg add without an index: %+v", r)
	}
}
