package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/internal/identity"
)

// Who Jupyter and its kernels run as in the default mode (docs/security.md,
// "Who the kernels run as"): root, as upstream's, when the default user is
// root or may become root through sudo without a password; else the
// default user, so that what it plants in the shared package environment
// (a .pth file runs at every Python start) never runs as root. The
// attack: a default user without sudo plants a .pth in the virtual
// environment it owns, and waits for a root kernel to start (the warm
// pool starts one on its own).

// plantedVenv is a shared package environment as install-deps.sh makes
// one (Debian's python3, the system site packages; without pip, which
// these tests do not need), in a directory every account can reach,
// given to uid, with a .pth in its site-packages (site) that appends the
// uid of every python that starts from it to record.
type plantedVenv struct {
	dir, site, record string
}

// probeModule is a module "pip-installed" into a plantedVenv's
// site-packages; its PROBE is probeValue.
const (
	probeModule = "envd_kernels_probe"
	probeValue  = "probe 42"
)

func newPlantedVenv(t *testing.T, uid int) plantedVenv {
	t.Helper()
	base, err := os.MkdirTemp("", "envd-kernels-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	v := plantedVenv{dir: filepath.Join(base, "venv")}
	if out, err := exec.Command("/usr/bin/python3", "-m", "venv", "--system-site-packages", "--without-pip", v.dir).CombinedOutput(); err != nil {
		t.Fatalf("python3 -m venv: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(v.dir, "bin", "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").Output()
	if err != nil {
		t.Fatal(err)
	}
	v.site = strings.TrimSpace(string(out))
	v.record = filepath.Join(v.dir, "kernel-uids")
	pth := fmt.Sprintf("import os; open(%q, 'a').write('%%d\\n' %% os.getuid())\n", v.record)
	if err := os.WriteFile(filepath.Join(v.site, "envd-planted.pth"), []byte(pth), 0o644); err != nil {
		t.Fatal(err)
	}
	err = filepath.Walk(v.dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, uid)
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// uids are the uids the planted .pth recorded, one per python started
// from the environment.
func (v plantedVenv) uids(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(v.record)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// kernelsRun runs code in context id (the default Python context when
// ""), failing the test unless it ends well, and returns its stdout.
func kernelsRun(t *testing.T, ctx context.Context, e *envd, c *client.Client, id, code string) string {
	t.Helper()
	x, err := c.Execute(ctx, code, client.ExecOptions{ContextID: id})
	if err != nil {
		t.Fatalf("execute %q: %v\nenvd:\n%s", code, err, e.stderr)
	}
	res, err := x.Wait()
	if err != nil {
		t.Fatalf("execute %q: %v\nenvd:\n%s", code, err, e.stderr)
	}
	if res.Reason != client.EndOK {
		t.Fatalf("execute %q: %+v (error %v)\nenvd:\n%s", code, res, res.Error, e.stderr)
	}
	return res.Stdout
}

const (
	uidCode    = "import os\nprint(os.getuid(), os.geteuid())"
	importCode = "import importlib\nimportlib.invalidate_caches()\nimport " + probeModule + "\nprint(" + probeModule + ".PROBE)"
	envCode    = `import os, sys
print(sys.prefix)
print(os.environ.get('VIRTUAL_ENV', '-'))
print(os.environ.get('R_LIBS', '-'))
print(os.environ.get('R_LIBS_SITE', '-'))
print(os.environ['PATH'])`
)

// TestKernelsUserWithoutSudo is the attack, in the default mode, on a
// template whose default user (guest) has no sudo: guest's .pth must run
// as guest only, never as root, in every kernel (the early one, the warm
// pool's, a new context's), and the code runs as guest; what guest
// installs into the environment is importable in the contexts.
//
// On the code before the fix the kernels ran as root: the .pth recorded
// uid 0, and os.getuid() was 0.
func TestKernelsUserWithoutSudo(t *testing.T) {
	t.Parallel()
	v := newPlantedVenv(t, guestUID)
	e := startEnvd(t, startOptions{guest: true, jupyter: true,
		args: []string{"-default-user", guestName},
		env:  []string{"ENVD_PYTHON_VENV=" + v.dir}})
	c := client.New(client.Options{Addr: e.url})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), codeTimeout)
	defer cancel()

	id := strconv.Itoa(guestUID)
	if got := kernelsRun(t, ctx, e, c, "", uidCode); got != id+" "+id+"\n" {
		t.Errorf("the default context runs as %q, want guest's %s", got, id)
	}
	cc, err := c.CreateContext(ctx, client.ContextOptions{})
	if err != nil {
		t.Fatalf("create context: %v\nenvd:\n%s", err, e.stderr)
	}
	if got := kernelsRun(t, ctx, e, c, cc.ID, uidCode); got != id+" "+id+"\n" {
		t.Errorf("a new context runs as %q, want guest's %s", got, id)
	}
	// pip install, as guest: a module lands in the environment's
	// site-packages, and the running contexts import it.
	res, err := c.Run(ctx, client.Command{Name: "/bin/sh", Args: []string{"-c", `printf 'PROBE = "%s"\n' "$1" > "$2/$3.py"`, "sh", probeValue, v.site, probeModule}})
	if err != nil || res.Exit.Code != 0 {
		t.Fatalf("guest installs a module: %v %+v", err, res)
	}
	if fi, err := os.Stat(filepath.Join(v.site, probeModule+".py")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != guestUID {
		t.Fatalf("the module guest installed: %v", err)
	}
	for _, ctxID := range []string{"", cc.ID} {
		if got := kernelsRun(t, ctx, e, c, ctxID, importCode); got != probeValue+"\n" {
			t.Errorf("context %q imports guest's module: %q", ctxID, got)
		}
	}
	uids := v.uids(t)
	if len(uids) == 0 {
		t.Fatalf("the planted .pth never ran: the kernels do not use the shared environment\nenvd:\n%s", e.stderr)
	}
	if slices.ContainsFunc(uids, func(u string) bool { return u != id }) {
		t.Errorf("the .pth guest planted ran as uids %v: only guest's %s may run it", uids, id)
	}
	if log := e.stderr.String(); !strings.Contains(log, "kernels_user="+guestName) {
		t.Errorf("envd's log does not name guest as the kernels' user:\n%s", log)
	}
}

// TestKernelsUserWithSudo is the other template, E2B's own: the default
// user (the machine's `user`) may become root through sudo without a
// password, so the kernels run as root, as upstream's, from the shared
// environment (whatever user plants there runs as root, which user could
// do anyway). When the environment is owned by an account without sudo
// (guest), root kernels do not use it.
func TestKernelsUserWithSudo(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("kernels run as root only when envd is root")
	}
	u, err := identity.Lookup("user")
	if err != nil {
		t.Skip("no account user on this machine")
	}
	sudo := exec.Command("sudo", "-n", "-k", "--", "/bin/sh", "-c", "true")
	sudo.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	sudo.SysProcAttr = &syscall.SysProcAttr{Credential: u.Credential(), Setsid: true}
	if err := sudo.Run(); err != nil {
		t.Skipf("user has no passwordless sudo on this machine: %v", err)
	}
	for _, tt := range []struct {
		name   string
		owner  int
		shared bool
	}{
		{"owned by user", int(u.UID), true},
		{"owned by guest", guestUID, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := newPlantedVenv(t, tt.owner)
			e := startEnvd(t, startOptions{guest: true, jupyter: true, env: []string{"ENVD_PYTHON_VENV=" + v.dir}})
			c := client.New(client.Options{Addr: e.url})
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), codeTimeout)
			defer cancel()

			if got := kernelsRun(t, ctx, e, c, "", uidCode); got != "0 0\n" {
				t.Errorf("the default context runs as %q, want root", got)
			}
			cc, err := c.CreateContext(ctx, client.ContextOptions{})
			if err != nil {
				t.Fatalf("create context: %v\nenvd:\n%s", err, e.stderr)
			}
			if got := kernelsRun(t, ctx, e, c, cc.ID, uidCode); got != "0 0\n" {
				t.Errorf("a new context runs as %q, want root", got)
			}
			prefix := kernelsRun(t, ctx, e, c, cc.ID, "import sys\nprint(sys.prefix)")
			uids := v.uids(t)
			if tt.shared {
				if prefix != v.dir+"\n" {
					t.Errorf("root kernels' sys.prefix %q, want the shared environment %s", prefix, v.dir)
				}
				if len(uids) == 0 || slices.ContainsFunc(uids, func(u string) bool { return u != "0" }) {
					t.Errorf("the .pth ran as %v, want root only (kernels from the shared environment)", uids)
				}
			} else if prefix == v.dir+"\n" || len(uids) != 0 {
				t.Errorf("root kernels use an environment guest owns: sys.prefix %q, the .pth ran as %v", prefix, uids)
			}
			if log := e.stderr.String(); !strings.Contains(log, "kernels_user=root") {
				t.Errorf("envd's log does not name root as the kernels' user:\n%s", log)
			}
		})
	}
}

// TestKernelsUserJupyterAsRoot: -jupyter-as-root with a default user
// without sudo, in both modes: the kernels are root's, and use nothing
// that user can write: not the shared virtual environment (Debian's
// python3; the .pth never runs, the modules there are not importable, no
// VIRTUAL_ENV, its bin not on PATH) nor the R library (not in
// .libPaths()).
//
// On the code before the fix, root kernels ran the shared environment's
// python in the default mode whatever the flag (the .pth ran as root),
// and in strict mode they had the environment on PATH and VIRTUAL_ENV,
// and the R library first in .libPaths().
func TestKernelsUserJupyterAsRoot(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name string
		args []string
	}{
		{"default", nil},
		{"strict", []string{"-strict-users"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			testJupyterAsRoot(t, mode.args)
		})
	}
}

func testJupyterAsRoot(t *testing.T, args []string) {
	v := newPlantedVenv(t, guestUID)
	probe := filepath.Join(v.site, probeModule+".py")
	if err := os.WriteFile(probe, []byte("PROBE = 'planted'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(probe, guestUID, guestUID); err != nil {
		t.Fatal(err)
	}
	rlib := filepath.Join(filepath.Dir(v.dir), "rlib")
	if err := os.Mkdir(rlib, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(rlib, guestUID, guestUID); err != nil {
		t.Fatal(err)
	}
	e := startEnvd(t, startOptions{guest: true, jupyter: true,
		args: append([]string{"-default-user", guestName, "-jupyter-as-root"}, args...),
		env:  []string{"ENVD_PYTHON_VENV=" + v.dir, "ENVD_R_LIBRARY=" + rlib}})
	c := client.New(client.Options{Addr: e.url})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), codeTimeout)
	defer cancel()

	if got := kernelsRun(t, ctx, e, c, "", uidCode); got != "0 0\n" {
		t.Errorf("the default context runs as %q, want root (-jupyter-as-root)", got)
	}
	cc, err := c.CreateContext(ctx, client.ContextOptions{})
	if err != nil {
		t.Fatalf("create context: %v\nenvd:\n%s", err, e.stderr)
	}
	env := strings.Split(strings.TrimSpace(kernelsRun(t, ctx, e, c, cc.ID, envCode)), "\n")
	if len(env) != 5 || env[0] == v.dir || env[1] != "-" || env[2] != "-" || strings.Contains(env[3], "/usr/local/lib/R/site-library") || strings.Contains(env[4], v.dir) {
		t.Errorf("root kernel's sys.prefix, VIRTUAL_ENV, R_LIBS, R_LIBS_SITE, PATH: %q; want none from the shared environment", env)
	}
	x, err := c.Execute(ctx, "import "+probeModule, client.ExecOptions{ContextID: cc.ID})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := x.Wait(); err != nil || res.Error == nil || res.Error.Name != "ModuleNotFoundError" {
		t.Errorf("root kernel imports a module guest planted: %v %+v", err, res)
	}
	rc, err := c.CreateContext(ctx, client.ContextOptions{Language: "r"})
	if err != nil {
		t.Fatalf("create an R context: %v\nenvd:\n%s", err, e.stderr)
	}
	paths := kernelsRun(t, ctx, e, c, rc.ID, `cat(.libPaths(), sep = "\n")`)
	for _, bad := range []string{rlib, "/usr/local/lib/R/site-library"} {
		if strings.Contains(paths, bad) {
			t.Errorf("root R kernel's .libPaths() has %s, which a user can write:\n%s", bad, paths)
		}
	}
	if uids := v.uids(t); len(uids) != 0 {
		t.Errorf("the .pth guest planted ran as %v in root's kernels", uids)
	}
	if log := e.stderr.String(); !strings.Contains(log, "kernels_user=root") {
		t.Errorf("envd's log does not name root as the kernels' user:\n%s", log)
	}
}
