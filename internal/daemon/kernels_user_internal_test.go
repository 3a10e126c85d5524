package daemon

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/identity"
)

// TestChooseKernels: who the kernels run as, and whether they get the
// shared package environment, for each mode and template; whether an
// account can become root is asked only when it matters, once.
func TestChooseKernels(t *testing.T) {
	t.Parallel()
	root := &identity.User{Name: "root"}
	sudoer := &identity.User{Name: "user", UID: 1000, GID: 1000}
	guest := &identity.User{Name: "guest", UID: 54321, GID: 54321}
	other := &identity.User{Name: "other", UID: 2000, GID: 2000}
	equivalent := map[string]bool{"user": true}
	tests := []struct {
		name   string
		cfg    Config
		euid   int
		def    *identity.User
		owners []*identity.User
		want   string // the kernels' account; "" for envd's own
		shared bool
		asked  []string // whom rootEq was asked about, in order
	}{
		{name: "envd not root", euid: 1000, def: guest, shared: true},
		{name: "default user root", def: root, shared: true},
		{name: "default user with sudo", def: sudoer, shared: true, asked: []string{"user"}},
		{name: "default user without sudo", def: guest, want: "guest", shared: true, asked: []string{"guest"}},
		{name: "default user without sudo, owner with sudo", def: guest, owners: []*identity.User{sudoer}, want: "guest", shared: true, asked: []string{"guest"}},
		{name: "owner without sudo", def: sudoer, owners: []*identity.User{guest}, shared: false, asked: []string{"user", "guest"}},
		{name: "owner without an account", def: root, owners: []*identity.User{nil}, shared: false},
		{name: "default user root, owner without sudo", def: root, owners: []*identity.User{other}, shared: false, asked: []string{"other"}},
		{name: "jupyter as root, default user without sudo", cfg: Config{JupyterAsRoot: true}, def: guest, shared: false, asked: []string{"guest"}},
		{name: "jupyter as root, default user with sudo", cfg: Config{JupyterAsRoot: true}, def: sudoer, shared: true, asked: []string{"user"}},
		{name: "strict", cfg: Config{StrictUsers: true}, def: sudoer, want: "user", shared: true},
		{name: "strict, default user root", cfg: Config{StrictUsers: true}, def: root, want: "root", shared: false},
		{name: "strict, jupyter as root", cfg: Config{StrictUsers: true, JupyterAsRoot: true}, def: sudoer, shared: false},
		{name: "existing server", cfg: Config{JupyterURL: "http://127.0.0.1:1"}, def: guest, shared: true},
		{name: "existing server, strict", cfg: Config{JupyterURL: "http://127.0.0.1:1", StrictUsers: true}, def: guest, want: "guest", shared: true},
		{name: "existing server, strict, jupyter as root", cfg: Config{JupyterURL: "http://127.0.0.1:1", StrictUsers: true, JupyterAsRoot: true}, def: guest, shared: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var asked []string
			a := chooseKernels(tt.cfg, tt.euid, tt.def, tt.owners, func(u *identity.User) (bool, string) {
				asked = append(asked, u.Name)
				return equivalent[u.Name], "test"
			})
			got := ""
			if a.user != nil {
				got = a.user.Name
			}
			if got != tt.want || a.shared != tt.shared {
				t.Errorf("kernels as %q, shared %v (%s); want %q, shared %v", got, a.shared, a.why, tt.want, tt.shared)
			}
			if strings.Join(asked, " ") != strings.Join(tt.asked, " ") {
				t.Errorf("asked about %q, want %q", asked, tt.asked)
			}
			if a.why == "" {
				t.Error("no reason for the log")
			}
		})
	}
}

// TestPackageOwners: the owners of the shared environment's directories,
// other than root and the default user; nil for an owner without an
// account.
func TestPackageOwners(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root (chown)")
	}
	nobody, err := identity.Lookup("nobody")
	if err != nil {
		t.Skip("no account nobody")
	}
	dir := t.TempDir()
	mk := func(name string, uid int) string {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	def := &identity.User{Name: "def", UID: 54320}
	byNobody, byNone, byDef, byRoot := mk("nobody", int(nobody.UID)), mk("none", 54329), mk("def", 54320), mk("root", 0)
	names := func(us []*identity.User) string {
		var out []string
		for _, u := range us {
			if u == nil {
				out = append(out, "<none>")
			} else {
				out = append(out, u.Name)
			}
		}
		return strings.Join(out, " ")
	}
	for _, tt := range []struct {
		pkgs defaults.Packages
		want string
	}{
		{defaults.Packages{PythonVenv: byNobody, RLibrary: byNone}, "nobody <none>"},
		{defaults.Packages{PythonVenv: byNobody, RLibrary: byNobody}, "nobody"},
		{defaults.Packages{PythonVenv: byDef, RLibrary: byRoot}, ""},
		{defaults.Packages{}, ""},
	} {
		if got := names(packageOwners(tt.pkgs, def)); got != tt.want {
			t.Errorf("packageOwners(%+v) = %q, want %q", tt.pkgs, got, tt.want)
		}
	}
}

// TestRootEquivalent tries sudo for real: root is root-equivalent without
// it; without a setuid-root sudo nobody else is; the machine's sudo says
// no for nobody and yes for `user` when install-deps.sh gave it
// passwordless sudo; a stand-in sudo shows what it is run with (the
// account's ids, a minimal environment, its own session, -n -k) and that
// its exit status decides, and one that hangs is killed and says no.
func TestRootEquivalent(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root (runs sudo as other accounts)")
	}
	if ok, why := rootEquivalent(&identity.User{Name: "root"}, nil, time.Second); !ok || why != "root" {
		t.Errorf("root: %v %q", ok, why)
	}
	nobody, err := identity.Lookup("nobody")
	if err != nil {
		t.Skip("no account nobody")
	}
	if ok, why := rootEquivalent(nobody, []string{"/nonexistent/sudo"}, time.Second); ok || why != "no sudo" {
		t.Errorf("nobody without sudo: %v %q", ok, why)
	}

	t.Run("the machine's sudo", func(t *testing.T) {
		t.Parallel()
		if fi, err := os.Stat("/usr/bin/sudo"); err != nil || fi.Mode()&os.ModeSetuid == 0 {
			t.Skip("no setuid sudo in /usr/bin")
		}
		if ok, why := rootEquivalent(nobody, sudoPaths, rootCheckTimeout); ok || !strings.HasPrefix(why, "sudo: ") {
			t.Errorf("nobody: %v %q, want no, with sudo's reason", ok, why)
		}
		u, err := identity.Lookup("user")
		if err != nil {
			return
		}
		b, err := os.ReadFile("/etc/sudoers.d/user")
		if err != nil || !strings.Contains(string(b), "user ALL=(ALL:ALL) NOPASSWD: ALL") {
			return // not install-deps.sh's sudoers: no answer to expect
		}
		if ok, why := rootEquivalent(u, sudoPaths, rootCheckTimeout); !ok {
			t.Errorf("user, with passwordless sudo: %v %q", ok, why)
		}
	})

	// Stand-ins: root's setuid scripts (Linux ignores the bit on scripts:
	// they run as the account), in a directory nobody can reach, writing
	// where nobody can.
	dir, err := os.MkdirTemp("", "envd-sudo-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(out, 0o777); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex // the scripts are written by the subtests
	stand := func(name, body string, mode os.FileMode) string {
		mu.Lock()
		defer mu.Unlock()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}

	t.Run("not setuid root", func(t *testing.T) {
		t.Parallel()
		p := stand("plain", "exit 0\n", 0o755)
		if ok, why := rootEquivalent(nobody, []string{p}, time.Second); ok || why != "no sudo" {
			t.Errorf("a sudo without the setuid bit: %v %q", ok, why)
		}
	})
	t.Run("how it runs", func(t *testing.T) {
		t.Parallel()
		p := stand("yes", `{ id -u; id -G; echo "$*"; ps -o sid= -p $$; echo $$; env | sort; } > `+out+"/yes\nexit 0\n", 0o755|os.ModeSetuid)
		if ok, why := rootEquivalent(nobody, []string{"/nonexistent/sudo", p}, rootCheckTimeout); !ok || why != "sudo without a password" {
			t.Fatalf("a sudo that says yes: %v %q", ok, why)
		}
		b, err := os.ReadFile(filepath.Join(out, "yes"))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		id := strconv.Itoa(int(nobody.UID))
		if len(lines) < 5 || lines[0] != id || lines[2] != "-n -k -- /bin/sh -c true" || strings.TrimSpace(lines[3]) != lines[4] {
			t.Fatalf("ran as uid, groups, args, session, pid: %q", lines)
		}
		var env []string
		for _, l := range lines[5:] {
			if k, _, _ := strings.Cut(l, "="); k != "PWD" && k != "SHLVL" && k != "_" {
				env = append(env, l)
			}
		}
		if strings.Join(env, " ") != "LC_ALL=C PATH=/usr/sbin:/usr/bin:/sbin:/bin" {
			t.Errorf("environment %q", env)
		}
	})
	t.Run("says no", func(t *testing.T) {
		t.Parallel()
		p := stand("no", "echo 'sudo: a password is required' >&2\nexit 1\n", 0o755|os.ModeSetuid)
		if ok, why := rootEquivalent(nobody, []string{p}, rootCheckTimeout); ok || why != "sudo: a password is required" {
			t.Errorf("a sudo that says no: %v %q", ok, why)
		}
	})
	t.Run("hangs", func(t *testing.T) {
		t.Parallel()
		pidFile := filepath.Join(out, "hang")
		p := stand("hang", "echo $$ > "+pidFile+"\nexec sleep 60\n", 0o755|os.ModeSetuid)
		start := time.Now()
		ok, why := rootEquivalent(nobody, []string{p}, 300*time.Millisecond)
		if ok || !strings.Contains(why, "gave no answer within 300ms") || time.Since(start) > 10*time.Second {
			t.Errorf("a sudo that hangs: %v %q after %v", ok, why, time.Since(start))
		}
		b, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, 0); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("the sudo that hung (pid %d) still runs", pid)
		}
	})
}

// TestKeepHandedAccount: a live upgrade's Jupyter server keeps running as
// whoever it runs as, and so do its later starts: root without the shared
// environment, another account with it; the same account changes nothing.
func TestKeepHandedAccount(t *testing.T) {
	t.Parallel()
	guest := &identity.User{Name: "guest", UID: 54321}
	lookup := func(uid uint32) *identity.User {
		if uid == guest.UID {
			return guest
		}
		return nil
	}
	asGuest := kernelsAccount{user: guest, shared: true, why: "chosen"}
	asRoot := kernelsAccount{shared: true, why: "chosen"}
	for _, tt := range []struct {
		name   string
		a      kernelsAccount
		uid    uint32
		want   string
		shared bool
		kept   bool
	}{
		{name: "same user", a: asGuest, uid: guest.UID, want: "guest", shared: true},
		{name: "same root", a: asRoot, uid: 0, shared: true},
		{name: "root handed over", a: asGuest, uid: 0, kept: true},
		{name: "user handed over", a: asRoot, uid: guest.UID, want: "guest", shared: true, kept: true},
		{name: "no account", a: asRoot, uid: 999, shared: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := keepHandedAccount(tt.a, tt.uid, lookup)
			got := ""
			if a.user != nil {
				got = a.user.Name
			}
			if got != tt.want || a.shared != tt.shared || a.kept != tt.kept {
				t.Errorf("got %q shared %v kept %v (%s); want %q shared %v kept %v", got, a.shared, a.kept, a.why, tt.want, tt.shared, tt.kept)
			}
		})
	}
	if uid, ok := procUID(os.Getpid()); !ok || uid != uint32(os.Getuid()) {
		t.Errorf("procUID(self) = %d %v, want %d", uid, ok, os.Getuid())
	}
	if _, ok := procUID(1 << 30); ok {
		t.Error("procUID of a pid that does not exist")
	}
}
