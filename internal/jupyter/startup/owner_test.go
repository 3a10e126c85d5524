package startup_test

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/jupyter/startup"
)

// kernelUser is the account `user`, which the kernels run as.
func kernelUser(t *testing.T) *identity.User {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files away")
	}
	u, err := identity.Lookup("user")
	if err != nil {
		t.Fatalf("the account user, which the kernels run as: %v", err)
	}
	return u
}

// victimDir makes a directory of root's files, which the kernels' user
// must never get envd to change, and returns it with a snapshot.
func victimDir(t *testing.T) (dir, file string, snap map[string]owned) {
	t.Helper()
	dir = t.TempDir()
	file = filepath.Join(dir, "victim")
	for _, name := range []string{"victim", "old_module.py"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("root's\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir, file, snapshotOwners(t, dir)
}

func requireSame(t *testing.T, dir string, before map[string]owned) {
	t.Helper()
	after := snapshotOwners(t, dir)
	if len(after) != len(before) {
		t.Errorf("root's dir changed: %v, was %v", after, before)
	}
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s changed: %v, was %v", k, after[k], v)
		}
	}
}

// With an Owner, IPythonDir is the kernels' user's and the rest root's;
// a later Install (envd restarting) never follows what their code planted
// out of the tree.
func TestInstallOwnedByKernelUser(t *testing.T) {
	t.Parallel()
	u := kernelUser(t)
	// Not t.TempDir: its parent is 0700, and the user must reach the tree.
	dir, err := os.MkdirTemp("", "envd-startup-owner-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	opts := startup.Options{Owner: &startup.Owner{UID: u.UID, GID: u.GID}}
	l, err := startup.InstallWith(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		want := os.FileMode(0o644)
		if d.IsDir() {
			want = os.ModeDir | 0o755
		}
		uid, gid := uint32(0), uint32(0)
		if p == l.IPythonDir || strings.HasPrefix(p, l.IPythonDir+"/") {
			uid, gid = u.UID, u.GID
		}
		if st.Uid != uid || st.Gid != gid || fi.Mode() != want {
			t.Errorf("%s: %d:%d %v, want %d:%d %v", p, st.Uid, st.Gid, fi.Mode(), uid, gid, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	vdir, victim, snap := victimDir(t)
	asUser := func(fn func() error) error { return u.DoStrict(fn) }
	// The rest of the tree is not the user's to change.
	for _, name := range []string{"kernels/bash/kernel.json", "python/envd_kernel/x.py", "matplotlib/matplotlibrc"} {
		err := asUser(func() error { return os.Symlink(victim, filepath.Join(dir, name)) })
		if !errors.Is(err, syscall.EACCES) && !errors.Is(err, syscall.EEXIST) {
			t.Errorf("user planting %s: %v", name, err)
		}
	}
	// In IPythonDir, links in place of files: replaced or pruned, never
	// followed.
	startupDir := filepath.Join(l.IPythonDir, "profile_default", "startup")
	err = asUser(func() error {
		for name, target := range map[string]string{
			"00-envd.py":     filepath.Join(vdir, "new"),
			"01-envd-old.py": victim,
		} {
			os.Remove(filepath.Join(startupDir, name))
			if err := os.Symlink(target, filepath.Join(startupDir, name)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := startup.InstallWith(dir, opts); err != nil {
		t.Errorf("install over planted file links: %v", err)
	}
	if fi, err := os.Lstat(filepath.Join(startupDir, "00-envd.py")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("00-envd.py not replaced: %v %v", fi, err)
	}
	if _, err := os.Lstat(filepath.Join(startupDir, "01-envd-old.py")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale 01-envd-old.py not pruned: %v", err)
	}
	// A link in place of a directory: Install fails or stays in the tree.
	err = asUser(func() error {
		p := filepath.Join(l.IPythonDir, "profile_default")
		if err := os.Rename(p, p+".moved"); err != nil {
			return err
		}
		return os.Symlink(vdir, p)
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = startup.InstallWith(dir, opts)
	t.Logf("install over a planted directory link: %v", err)
	requireSame(t, vdir, snap)
}

// A temporary install is removed by Remove, whatever the kernels' user
// left in IPythonDir, without following their links; one whose envd was
// killed is removed by the next InstallTemp.
func TestInstallTemp(t *testing.T) {
	t.Parallel()
	u := kernelUser(t)
	vdir, victim, snap := victimDir(t)
	tmp, err := startup.InstallTemp(startup.Options{Owner: &startup.Owner{UID: u.UID, GID: u.GID}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(tmp.Dir), "envd-kernel-startup-"+strconv.Itoa(os.Getpid())+"-") {
		t.Errorf("install dir %s", tmp.Dir)
	}
	err = u.DoStrict(func() error {
		p := filepath.Join(tmp.IPythonDir, "profile_default")
		for _, link := range [][2]string{{victim, "to-victim"}, {vdir, "to-dir"}} {
			if err := os.Symlink(link[0], filepath.Join(p, link[1])); err != nil {
				return err
			}
		}
		if err := os.MkdirAll(filepath.Join(p, "locked", "sub"), 0o755); err != nil {
			return err
		}
		return os.Chmod(filepath.Join(p, "locked"), 0o500)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tmp.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(tmp.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left behind: %v", tmp.Dir, err)
	}
	requireSame(t, vdir, snap)

	// A stale one: its pid is gone.
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	stale, err := os.MkdirTemp("", "envd-kernel-startup-"+strconv.Itoa(cmd.Process.Pid)+"-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(stale, "ipython", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp2, err := startup.InstallTemp(startup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tmp2.Remove()
	if _, err := os.Lstat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale install %s not removed: %v", stale, err)
		os.RemoveAll(stale)
	}
}

type owned struct {
	uid, gid uint32
	mode     os.FileMode
	data     string
}

func snapshotOwners(t *testing.T, dir string) map[string]owned {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]owned{}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(p)
		st := fi.Sys().(*syscall.Stat_t)
		m[e.Name()] = owned{st.Uid, st.Gid, fi.Mode(), string(data)}
	}
	return m
}
