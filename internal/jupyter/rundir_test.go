package jupyter_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/testutil"
)

// kernelUser is the account `user`, which the kernels run as in these
// tests, as identity and as RunAs.
func kernelUser(t *testing.T) (*identity.User, *jupyter.User) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the kernels as another user")
	}
	u, err := identity.Lookup("user")
	if err != nil {
		t.Fatalf("the account user, which the kernels run as: %v", err)
	}
	return u, &jupyter.User{UID: u.UID, GID: u.GID, Groups: u.Groups, Home: u.Home, Name: u.Name}
}

// userKernel starts a python3 kernel on s's current server, in the
// kernels' user's home.
func userKernel(t *testing.T, s *jupyter.Supervisor, home string) *jupyter.Kernel {
	t.Helper()
	ctx := testutil.Context(t, kernelTimeout)
	c, err := s.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.StartKernel(ctx, "python3", home)
	if err != nil {
		t.Fatal(err)
	}
	k, err := c.Connect(ctx, m.ID, jupyter.KernelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close() }) // the server, and so the kernel, goes with s.Stop
	return k
}

// fileState is what a victim file must keep.
type fileState struct {
	uid, gid uint32
	mode     os.FileMode
	data     string
}

func stateOf(t *testing.T, name string) fileState {
	t.Helper()
	fi, err := os.Lstat(name)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return fileState{uid: st.Uid, gid: st.Gid, mode: fi.Mode(), data: string(data)}
}

// victims makes a root-owned directory holding a root-owned 0600 file,
// which the kernels' user must never get envd to write, chown or remove.
func victims(t *testing.T) (dir, file string) {
	t.Helper()
	dir = t.TempDir()
	file = filepath.Join(dir, "victim")
	if err := os.WriteFile(file, []byte("root's secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, file
}

func requireOwner(t *testing.T, name string, uid, gid uint32, mode os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(name)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	// Jupyter sets the sticky bit on its runtime dir (so that tmp cleaners
	// leave it alone), at some point: not compared.
	if st.Uid != uid || st.Gid != gid || fi.Mode()&^os.ModeSticky != mode {
		t.Errorf("%s: %d:%d %v, want %d:%d %v", name, st.Uid, st.Gid, fi.Mode(), uid, gid, mode)
	}
}

// A hole once open: the config dir was the kernels' user's, and envd,
// restarting a server the kernel had killed, wrote and chowned whatever a
// link planted at the config's temp name pointed to. Now the user cannot
// plant anything there, and a link planted there anyway (by root, here) is
// never followed.
func TestSupervisorConfigLinksNotFollowed(t *testing.T) {
	t.Parallel()
	id, runAs := kernelUser(t)
	s := startSupervisor(t, jupyter.Options{RunAs: runAs, MinBackoff: 10 * time.Millisecond})
	dir := jupyter.RuntimeDirForTest(s)
	cfg := filepath.Join(dir, "config")
	requireOwner(t, dir, 0, 0, os.ModeDir|0o755)
	requireOwner(t, cfg, 0, 0, os.ModeDir|0o755)
	requireOwner(t, filepath.Join(dir, "runtime"), id.UID, id.GID, os.ModeDir|0o700)
	requireOwner(t, filepath.Join(cfg, "jupyter_server_config.json"), 0, id.GID, 0o640)
	requireOwner(t, filepath.Join(cfg, "jupyter_server_config.py"), 0, 0, 0o644)

	vdir, victim := victims(t)
	before := stateOf(t, victim)
	links := map[string]string{
		"jupyter_server_config.json.tmp": victim,                         // an existing file
		"jupyter_server_config.py.tmp":   filepath.Join(vdir, "planted"), // a new file in a root-owned dir
	}

	// The kernel, as the user, tries to plant the links: refused.
	k := userKernel(t, s, runAs.Home)
	for name, target := range links {
		r := mustOK(t, execute(t, k, `
import os, errno
try:
    os.symlink(`+strconv.Quote(target)+`, `+strconv.Quote(filepath.Join(cfg, name))+`)
    print("planted")
except OSError as e:
    print(errno.errorcode[e.errno])`))
		if r.stdout != "EACCES\n" {
			t.Errorf("kernel planting %s: %q, want EACCES", name, r.stdout)
		}
	}
	// The test, as the user, too.
	for name, target := range links {
		err := id.DoStrict(func() error { return os.Symlink(target, filepath.Join(cfg, name)) })
		if !errors.Is(err, syscall.EACCES) {
			t.Errorf("user planting %s: %v, want EACCES", name, err)
		}
	}
	// Root plants them: envd must not follow them either.
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(cfg, name)); err != nil {
			t.Fatal(err)
		}
	}

	// The kernel kills its server; the supervisor starts a new one.
	gen := s.Status().Generation
	ctx := testutil.Context(t, 2*kernelTimeout)
	e, err := k.Execute(ctx, "import os, signal; os.kill(os.getppid(), signal.SIGKILL)", jupyter.ExecuteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = e.Wait(ctx) // ends with the connection
	for st := s.Status(); st.Generation == gen || st.State != jupyter.ServerReady; st = s.Status() {
		select {
		case <-st.Changed:
		case <-ctx.Done():
			t.Fatalf("server not restarted: %+v", st)
		}
	}

	if after := stateOf(t, victim); after != before {
		t.Errorf("victim changed: %+v, was %+v", after, before)
	}
	if ents, err := os.ReadDir(vdir); err != nil || len(ents) != 1 {
		t.Errorf("root-owned dir holds %v (%v), want only the victim", ents, err)
	}
	for name := range links {
		if _, err := os.Lstat(filepath.Join(cfg, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind: %v", name, err)
		}
	}
	requireOwner(t, filepath.Join(cfg, "jupyter_server_config.json"), 0, id.GID, 0o640)
	requireOwner(t, filepath.Join(cfg, "jupyter_server_config.py"), 0, 0, 0o644)
	k2 := userKernel(t, s, runAs.Home)
	if got := mustOK(t, execute(t, k2, "6 * 7")).text(); got != "42\n" {
		t.Errorf("new server's kernel: %q", got)
	}
}

// The token is for envd and the server: other users cannot read it, and
// the kernels' user cannot change, replace or chmod it.
func TestSupervisorTokenFilePrivate(t *testing.T) {
	t.Parallel()
	id, runAs := kernelUser(t)
	s := startSupervisor(t, jupyter.Options{RunAs: runAs})
	cfg := filepath.Join(jupyter.RuntimeDirForTest(s), "config")
	token := filepath.Join(cfg, "jupyter_server_config.json")

	other := &identity.User{UID: 54321, GID: 54321, Name: "nobody-test"}
	err := other.DoStrict(func() error {
		_, err := os.ReadFile(token)
		return err
	})
	if !errors.Is(err, syscall.EACCES) {
		t.Errorf("another user reading the token: %v, want EACCES", err)
	}

	err = id.DoStrict(func() error {
		data, err := os.ReadFile(token)
		if err != nil || !bytes.Contains(data, []byte(s.Token())) {
			t.Errorf("the server's user cannot read the token: %v", err)
		}
		for what, fn := range map[string]func() error{
			"open for writing": func() error {
				f, err := os.OpenFile(token, os.O_WRONLY, 0)
				if err == nil {
					f.Close()
				}
				return err
			},
			"chmod":            func() error { return os.Chmod(token, 0o666) },
			"remove":           func() error { return os.Remove(token) },
			"rename over":      func() error { return os.Rename(filepath.Join(cfg, "jupyter_server_config.py"), token) },
			"create beside it": func() error { return os.WriteFile(filepath.Join(cfg, "x"), nil, 0o600) },
		} {
			if err := fn(); !errors.Is(err, syscall.EACCES) && !errors.Is(err, syscall.EPERM) {
				t.Errorf("the server's user, %s: %v, want EACCES or EPERM", what, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if tok := s.Token(); tok == "" {
		t.Fatal("no token")
	}
}

// Stop removes the runtime dir, whatever the kernels' user left in it,
// without following the links they left there.
func TestSupervisorStopRemovesRuntimeDir(t *testing.T) {
	t.Parallel()
	_, runAs := kernelUser(t)
	s := jupyter.New(jupyter.Options{RunAs: runAs, Logger: testLogger()})
	ctx := testutil.Context(t, 2*kernelTimeout)
	if err := s.Start(ctx); err != nil {
		_ = s.Stop(ctx)
		t.Fatal(err)
	}
	dir := jupyter.RuntimeDirForTest(s)
	vdir, victim := victims(t)
	before := stateOf(t, victim)
	k := userKernel(t, s, runAs.Home)
	mustOK(t, execute(t, k, `
import os
rt = os.environ["JUPYTER_RUNTIME_DIR"]
os.makedirs(os.path.join(rt, "a/b/c"))
for d in ("", "a", "a/b", "a/b/c"):
    with open(os.path.join(rt, d, "f"), "w") as f: f.write("x")
os.symlink(`+strconv.Quote(victim)+`, os.path.join(rt, "a/to-victim"))
os.symlink(`+strconv.Quote(vdir)+`, os.path.join(rt, "a/b/to-dir"))
os.mkdir(os.path.join(rt, "locked")); open(os.path.join(rt, "locked/f"), "w").close()
os.chmod(os.path.join(rt, "locked"), 0o500)`))
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("runtime dir %s left behind: %v", dir, err)
	}
	if after := stateOf(t, victim); after != before {
		t.Errorf("victim changed: %+v, was %+v", after, before)
	}
	if ents, _ := os.ReadDir(vdir); len(ents) != 1 {
		t.Errorf("linked dir holds %v, want only the victim", ents)
	}
}

// A RuntimeDir from Options must be envd's and private; what an older
// layout (or anyone) left in its subdirectories is replaced without being
// followed; Stop leaves the directory but not the token nor runtime/.
func TestSupervisorGivenRuntimeDir(t *testing.T) {
	t.Parallel()
	id, runAs := kernelUser(t)
	base := t.TempDir()
	// Let the user reach it: t.TempDir's parent is 0700.
	for _, d := range []string{base, filepath.Dir(base)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	start := func(dir string) error {
		s := jupyter.New(jupyter.Options{RunAs: runAs, RuntimeDir: dir, Logger: testLogger()})
		defer s.Stop(context.Background())
		return s.Start(testutil.Context(t, kernelTimeout))
	}

	usersDir := filepath.Join(base, "users")
	if err := os.Mkdir(usersDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(usersDir, int(id.UID), int(id.GID)); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{usersDir, open, link} {
		if err := start(dir); err == nil {
			t.Errorf("runtime dir %s accepted", dir)
		}
	}

	// An older layout: config/ was the user's, with a link planted in it.
	dir := filepath.Join(base, "old")
	cfg := filepath.Join(dir, "config")
	if err := os.MkdirAll(cfg, 0o700); err != nil {
		t.Fatal(err)
	}
	vdir, victim := victims(t)
	before := stateOf(t, victim)
	if err := os.Symlink(victim, filepath.Join(cfg, "jupyter_server_config.json.tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(filepath.Join(cfg, "jupyter_server_config.json.tmp"), int(id.UID), int(id.GID)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(cfg, int(id.UID), int(id.GID)); err != nil {
		t.Fatal(err)
	}
	s := startSupervisor(t, jupyter.Options{RunAs: runAs, RuntimeDir: dir})
	requireOwner(t, cfg, 0, 0, os.ModeDir|0o755)
	requireOwner(t, filepath.Join(cfg, "jupyter_server_config.json"), 0, id.GID, 0o640)
	if err := s.Stop(testutil.Context(t, kernelTimeout)); err != nil {
		t.Fatal(err)
	}
	if after := stateOf(t, victim); after != before {
		t.Errorf("victim changed: %+v, was %+v", after, before)
	}
	if ents, _ := os.ReadDir(vdir); len(ents) != 1 {
		t.Errorf("victim's dir holds %v", ents)
	}
	var left []string
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if !slices.Equal(left, []string{"config"}) {
		t.Errorf("after stop the dir holds %v, want [config]", left)
	}
	if _, err := os.Lstat(filepath.Join(cfg, "jupyter_server_config.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("token left behind: %v", err)
	}
}

// A runtime dir whose envd was killed (so never stopped) is removed by the
// next Start; a look-alike someone else owns is left alone.
func TestSupervisorReclaimsStaleRuntimeDirs(t *testing.T) {
	t.Parallel()
	id, _ := kernelUser(t)
	// A pid that is not running: a child's, once reaped.
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := strconv.Itoa(cmd.Process.Pid)
	stale, err := os.MkdirTemp("", "envd-jupyter-"+dead+"-")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"config", "runtime/sub"} {
		if err := os.MkdirAll(filepath.Join(stale, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(stale, "runtime/sub/kernel.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	lookAlike, err := os.MkdirTemp("", "envd-jupyter-"+dead+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(lookAlike) })
	if err := os.Chown(lookAlike, int(id.UID), int(id.GID)); err != nil {
		t.Fatal(err)
	}

	s := startSupervisor(t, jupyter.Options{})
	if _, err := os.Lstat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale dir %s not removed: %v", stale, err)
		os.RemoveAll(stale)
	}
	if _, err := os.Lstat(lookAlike); err != nil {
		t.Errorf("someone else's look-alike removed: %v", err)
	}
	// Ours, in use, is not stale.
	if !strings.Contains(filepath.Base(jupyter.RuntimeDirForTest(s)), strconv.Itoa(os.Getpid())) {
		t.Errorf("runtime dir %s does not name its pid", jupyter.RuntimeDirForTest(s))
	}
}
