package identity_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/envd-dev/envd/internal/identity"
)

// TestMain checks for leaks: User.Do runs on goroutines of its own.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// sandboxUser is the account scripts/install-deps.sh creates on every
// machine the tests run on.
const sandboxUser = "user"

func TestLookup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		user      string
		wantUID   uint32
		wantHome  string
		wantErr   error
		anyUID    bool // the uid is whatever the machine gave it
		wantShell bool // the shell must be a real path, not empty
	}{
		{name: "root", user: "root", wantUID: 0, wantHome: "/root", wantShell: true},
		{name: "sandbox user", user: sandboxUser, anyUID: true, wantHome: "/home/user", wantShell: true},
		{name: "unknown", user: "no-such-user-envd-test", wantErr: identity.ErrUnknownUser},
		{name: "empty", user: "", wantErr: identity.ErrUnknownUser},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u, err := identity.Lookup(tt.user)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Lookup(%q) = %+v, %v; want %v", tt.user, u, err, tt.wantErr)
				}
				if tt.user != "" && !strings.Contains(err.Error(), tt.user) {
					t.Errorf("error %q does not name the user", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Lookup(%q): %v (scripts/install-deps.sh creates %q)", tt.user, err, sandboxUser)
			}
			if u.Name != tt.user {
				t.Errorf("Name = %q, want %q", u.Name, tt.user)
			}
			if !tt.anyUID && u.UID != tt.wantUID {
				t.Errorf("UID = %d, want %d", u.UID, tt.wantUID)
			}
			if tt.anyUID && u.UID == 0 {
				t.Errorf("UID = 0 for %q", tt.user)
			}
			if u.Home != tt.wantHome {
				t.Errorf("Home = %q, want %q", u.Home, tt.wantHome)
			}
			if tt.wantShell && !filepath.IsAbs(u.Shell) {
				t.Errorf("Shell = %q, want an absolute path", u.Shell)
			}
			checkGroups(t, u)
		})
	}
}

// checkGroups: the primary group comes first, and no group twice.
func checkGroups(t *testing.T, u *identity.User) {
	t.Helper()
	if len(u.Groups) == 0 {
		t.Fatalf("%s: Groups is empty, want at least the primary gid %d", u.Name, u.GID)
	}
	if u.Groups[0] != u.GID {
		t.Errorf("%s: Groups = %v, want the primary gid %d first", u.Name, u.Groups, u.GID)
	}
	seen := map[uint32]bool{}
	for _, g := range u.Groups {
		if seen[g] {
			t.Errorf("%s: Groups = %v holds %d twice", u.Name, u.Groups, g)
		}
		seen[g] = true
	}
}

// TestLookupGroups compares the groups with what /etc/group says, for every
// account that /etc/group lists as a member of some group.
func TestLookupGroups(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("/etc/group")
	if err != nil {
		t.Fatalf("read /etc/group: %v", err)
	}
	memberOf := map[string][]uint32{} // user -> gids of the groups naming it
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) != 4 || f[3] == "" {
			continue
		}
		gid, err := strconv.ParseUint(f[2], 10, 32)
		if err != nil {
			continue
		}
		for m := range strings.SplitSeq(f[3], ",") {
			memberOf[m] = append(memberOf[m], uint32(gid))
		}
	}
	for name, gids := range memberOf {
		u, err := identity.Lookup(name)
		if err != nil {
			continue // a group may name an account that no longer exists
		}
		checkGroups(t, u)
		for _, g := range gids {
			if !slices.Contains(u.Groups, g) {
				t.Errorf("%s: Groups = %v, want it to hold %d (/etc/group)", name, u.Groups, g)
			}
		}
	}
	t.Logf("checked the groups of %d accounts with supplementary groups", len(memberOf))
}

func TestCurrent(t *testing.T) {
	t.Parallel()
	u, err := identity.Current()
	if err != nil {
		t.Fatalf("Current: %v", err)
	}
	if u.UID != uint32(os.Getuid()) {
		t.Errorf("Current().UID = %d, want %d", u.UID, os.Getuid())
	}
	checkGroups(t, u)
}

func TestCredential(t *testing.T) {
	t.Parallel()
	u := &identity.User{Name: "x", UID: 1234, GID: 5678, Groups: []uint32{5678, 27}}
	c := u.Credential()
	if os.Geteuid() != 0 {
		if c != nil {
			t.Fatalf("Credential() = %+v as non-root, want nil", c)
		}
		return
	}
	if c == nil {
		t.Fatal("Credential() = nil as root")
	}
	if c.Uid != 1234 || c.Gid != 5678 || !slices.Equal(c.Groups, []uint32{5678, 27}) {
		t.Errorf("Credential() = %+v", c)
	}
	if c.NoSetGroups {
		t.Error("Credential().NoSetGroups is set: the children would keep root's groups")
	}
}

func TestLoginEnv(t *testing.T) {
	t.Parallel()
	u := &identity.User{Name: "alice", Home: "/home/alice", Shell: "/bin/zsh"}
	env := u.LoginEnv()
	got := map[string]string{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("LoginEnv entry %q has no '='", kv)
		}
		if _, dup := got[k]; dup {
			t.Errorf("LoginEnv sets %s twice", k)
		}
		got[k] = v
	}
	for k, want := range map[string]string{
		"HOME":    "/home/alice",
		"USER":    "alice",
		"LOGNAME": "alice",
		"SHELL":   "/bin/zsh",
	} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q", k, got[k], want)
		}
	}
	if wantPath := identity.SandboxPath(); got["PATH"] != wantPath {
		t.Errorf("PATH = %q, want %q", got["PATH"], wantPath)
	}
	if len(got) != 5 {
		t.Errorf("LoginEnv = %q: want exactly PATH, HOME, USER, LOGNAME and SHELL", env)
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	u := &identity.User{Name: "user", Home: "/home/user"}
	tests := []struct {
		name       string
		path       string
		defaultDir string
		want       string
		wantErr    bool
	}{
		{name: "empty is the home", path: "", want: "/home/user"},
		{name: "empty with default dir", path: "", defaultDir: "/srv/work", want: "/srv/work"},
		{name: "empty with unclean default dir", path: "", defaultDir: "/srv//work/../data/", want: "/srv/data"},
		{name: "empty with relative default dir is in the home", path: "", defaultDir: "work", want: "/home/user/work"},
		{name: "empty with ~ default dir", path: "", defaultDir: "~/proj", want: "/home/user/proj"},
		{name: "default dir ignored when a path is given", path: "/tmp", defaultDir: "/srv/work", want: "/tmp"},
		{name: "tilde", path: "~", want: "/home/user"},
		{name: "tilde slash", path: "~/", want: "/home/user"},
		{name: "tilde subdir", path: "~/x", want: "/home/user/x"},
		{name: "tilde nested", path: "~/a/b/../c", want: "/home/user/a/c"},
		{name: "tilde climbing out", path: "~/../other", want: "/home/other"},
		{name: "tilde climbing past root", path: "~/../../../..", want: "/"},
		{name: "other user's home refused", path: "~other", wantErr: true},
		{name: "other user's subdir refused", path: "~root/x", wantErr: true},
		{name: "relative", path: "x", want: "/home/user/x"},
		{name: "relative dot", path: ".", want: "/home/user"},
		{name: "relative nested", path: "a/./b/", want: "/home/user/a/b"},
		{name: "relative climbing out", path: "../../etc", want: "/etc"},
		{name: "relative with a tilde inside", path: "a/~/b", want: "/home/user/a/~/b"},
		{name: "absolute", path: "/etc/passwd", want: "/etc/passwd"},
		{name: "absolute with dotdot", path: "/a/b/../../c/./d/", want: "/c/d"},
		{name: "absolute climbing past root", path: "/../../x", want: "/x"},
		{name: "absolute double slashes", path: "//tmp///x", want: "/tmp/x"},
		{name: "root", path: "/", want: "/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := u.Resolve(tt.path, tt.defaultDir)
			if tt.wantErr {
				if !errors.Is(err, identity.ErrBadPath) {
					t.Fatalf("Resolve(%q, %q) = %q, %v; want ErrBadPath", tt.path, tt.defaultDir, got, err)
				}
				if !strings.Contains(err.Error(), tt.path) {
					t.Errorf("error %q does not name the path", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Resolve(%q, %q) = %q, %v; want %q", tt.path, tt.defaultDir, got, err, tt.want)
			}
		})
	}
}

func FuzzResolve(f *testing.F) {
	for _, s := range [][3]string{
		{"", "", "/home/user"},
		{"", "/srv", "/home/user"},
		{"", "rel", "/root"},
		{"~", "", "/home/user"},
		{"~/x/../y", "", "/home/user"},
		{"~other", "", "/home/user"},
		{"../../..", "", "/"},
		{"/a/./b//../c", "", "/home/user"},
		{"a\x00b", "", "/home/user"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, p, defaultDir, home string) {
		// Homes in /etc/passwd are absolute; keep the fuzzed one so.
		u := &identity.User{Name: "u", Home: "/" + home}
		got, err := u.Resolve(p, defaultDir)
		if err != nil {
			if !errors.Is(err, identity.ErrBadPath) {
				t.Fatalf("Resolve(%q, %q) error %v is not ErrBadPath", p, defaultDir, err)
			}
			return
		}
		if !filepath.IsAbs(got) {
			t.Fatalf("Resolve(%q, %q) = %q: not absolute", p, defaultDir, got)
		}
		if filepath.Clean(got) != got {
			t.Fatalf("Resolve(%q, %q) = %q: not clean", p, defaultDir, got)
		}
		if filepath.IsAbs(p) && got != filepath.Clean(p) {
			t.Fatalf("Resolve(%q, %q) = %q: an absolute path must only be cleaned", p, defaultDir, got)
		}
	})
}

func TestCleanPath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                                      identity.StandardPath,
		"/opt/x/bin:.::bin:/usr/bin:/opt/x/bin": "/opt/x/bin:/usr/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/sbin:/bin",
		identity.StandardPath:                   identity.StandardPath,
	} {
		if got := identity.CleanPath(in); got != want {
			t.Errorf("CleanPath(%q) = %q, want %q", in, got, want)
		}
	}
}
