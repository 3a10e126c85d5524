package daemon

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/jupyter/startup"
)

// TestKernelsUser: the kernels run as root (nil: envd's own account) by
// default, as upstream's; as the default user with StrictUsers, unless
// JupyterAsRoot.
func TestKernelsUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the kernels' user is chosen only when envd is root")
	}
	defs := defaults.New("user", nil)
	tests := []struct {
		name string
		cfg  Config
		want string // "" for nil
	}{
		{name: "default", cfg: Config{}},
		{name: "jupyter as root", cfg: Config{JupyterAsRoot: true}},
		{name: "strict", cfg: Config{StrictUsers: true}, want: "user"},
		{name: "strict, jupyter as root", cfg: Config{StrictUsers: true, JupyterAsRoot: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u, err := kernelsUser(tt.cfg, defs)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if u != nil {
				got = u.Name
			}
			if got != tt.want {
				t.Errorf("kernels run as %q, want %q", got, tt.want)
			}
		})
	}
}

// TestShareStartup: the kernels' user gets the IPython profile and nothing
// else; the tree's root stays envd's, so that user can neither rename nor
// replace it. Without a user nothing changes hands.
func TestShareStartup(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("giving files away needs root")
	}
	u, err := identity.Lookup("user")
	if err != nil {
		t.Fatal(err)
	}
	for _, runAs := range []*identity.User{nil, u} {
		dir, err := os.MkdirTemp("", "envd-kernel-startup-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		l, err := startup.Install(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := shareStartup(l, runAs); err != nil {
			t.Fatal(err)
		}
		err = filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			st := fi.Sys().(*syscall.Stat_t)
			want := uint32(0)
			inProfile := p == l.IPythonDir || strings.HasPrefix(p, l.IPythonDir+"/")
			if runAs != nil && inProfile {
				want = runAs.UID
			}
			if st.Uid != want {
				t.Errorf("run as %v: %s belongs to uid %d, want %d", runAs, p, st.Uid, want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("the tree's root: %v, %v; want 0755 so that every user can traverse it", fi.Mode(), err)
		}
	}
}
