package startup_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/jupyter/startup"
)

// An install for the kernels' user is theirs, all of it; a later Install
// (envd restarting) never follows what their code planted in it out of
// the tree.
func TestInstallOwnedByKernelUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the tree away")
	}
	u, err := identity.Lookup("user")
	if err != nil {
		t.Fatalf("the account user, which the kernels run as: %v", err)
	}
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
		if st.Uid != u.UID || st.Gid != u.GID || fi.Mode() != want {
			t.Errorf("%s: %d:%d %v, want %d:%d %v", p, st.Uid, st.Gid, fi.Mode(), u.UID, u.GID, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Root's files, which the user's links point at.
	vdir := t.TempDir()
	victim := filepath.Join(vdir, "victim")
	if err := os.WriteFile(victim, []byte("root's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vdir, "old_module.py"), []byte("root's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	snap := snapshotOwners(t, vdir)

	plant := func(links map[string]string) {
		t.Helper()
		err := u.DoStrict(func() error {
			for name, target := range links {
				p := filepath.Join(dir, filepath.FromSlash(name))
				if err := os.RemoveAll(p); err != nil {
					return err
				}
				if err := os.Symlink(target, p); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("plant links as the user: %v", err)
		}
	}
	// Links in place of files: replaced, never followed.
	plant(map[string]string{
		"matplotlib/matplotlibrc":                         victim,
		"kernels/bash/kernel.json":                        victim,
		"python/envd_kernel/old_module.py":                victim, // stale: pruned
		"ipython/profile_default/startup/01-envd-old.py":  victim, // stale: pruned
		"ipython/profile_default/startup/00-envd.py":      filepath.Join(vdir, "new"),
		"python/envd_bash_kernel/.kernel.json.tmp-leftov": victim,
	})
	if _, err := startup.InstallWith(dir, opts); err != nil {
		t.Errorf("install over planted file links: %v", err)
	}
	if fi, err := os.Lstat(l.MatplotlibRC); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("matplotlibrc not replaced: %v %v", fi, err)
	}
	// Links in place of directories: Install fails or stays in the tree.
	plant(map[string]string{
		"python/envd_kernel": vdir,
		"kernels/bash":       vdir,
		"matplotlib":         vdir,
	})
	_, err = startup.InstallWith(dir, opts)
	t.Logf("install over planted directory links: %v", err)

	if after := snapshotOwners(t, vdir); len(after) != len(snap) {
		t.Errorf("root's dir changed: %v, was %v", after, snap)
	} else {
		for k, v := range snap {
			if after[k] != v {
				t.Errorf("%s changed: %v, was %v", k, after[k], v)
			}
		}
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
