// Package identity describes the accounts envd acts as: who a request runs
// as (uid, gid, supplementary groups, home), the environment a login as that
// user starts with, and how a path a user typed resolves against their home.
//
// Lookups read /etc/passwd and /etc/group (os/user without cgo), and keep
// the answer while both files stay as they were (lookup.go), so accounts
// created or changed after envd started are seen at once.
//
// Two ways to act as a user, for the two modes of envd (see
// docs/security.md, "What each mode allows"). [User.Do] switches one thread's
// filesystem ids: the kernel checks paths as the user and new files are the
// user's, while the thread keeps root's other capabilities; it suits writes
// made on behalf of an API caller, who may act as anyone anyway.
// [User.DoStrict] gives a thread the user's effective and filesystem ids
// and groups and no effective capability, so that what it does through
// paths is checked as for a shell of that user (strict mode, and every
// check whose answer the user must not learn more from than a shell would
// tell); its real and saved uid stay root's, so that the user cannot
// signal or trace it, and it becomes root again afterwards.
package identity

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrUnknownUser is returned by Lookup for a name with no account.
var ErrUnknownUser = errors.New("unknown user")

// ErrBadPath is returned by Resolve for a path it cannot expand.
var ErrBadPath = errors.New("invalid path")

// User is one account as envd needs it.
type User struct {
	Name   string
	UID    uint32
	GID    uint32
	Groups []uint32 // supplementary groups, the primary gid first
	Home   string
	Shell  string
}

// Lookup finds the account called name.
func Lookup(name string) (*User, error) {
	return lookups.lookup(name)
}

// lookupFiles is Lookup without the cache.
func lookupFiles(name string) (*User, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: empty user name", ErrUnknownUser)
	}
	u, err := user.Lookup(name)
	if err != nil {
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) {
			return nil, fmt.Errorf("%w: %q", ErrUnknownUser, name)
		}
		return nil, fmt.Errorf("look up user %q: %w", name, err)
	}
	return fromOS(u)
}

// Current is the account envd itself runs as.
func Current() (*User, error) {
	u, err := user.LookupId(strconv.Itoa(os.Getuid()))
	if err != nil {
		return nil, fmt.Errorf("look up current user: %w", err)
	}
	return fromOS(u)
}

func fromOS(u *user.User) (*User, error) {
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parse uid of %q: %w", u.Username, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parse gid of %q: %w", u.Username, err)
	}
	out := &User{Name: u.Username, UID: uint32(uid), GID: uint32(gid), Home: u.HomeDir, Groups: []uint32{uint32(gid)}}
	// A missing /etc/group entry is not fatal: the user still has the primary group.
	if ids, err := u.GroupIds(); err == nil {
		for _, s := range ids {
			g, err := strconv.ParseUint(s, 10, 32)
			if err != nil || uint32(g) == out.GID {
				continue
			}
			out.Groups = append(out.Groups, uint32(g))
		}
	}
	out.Shell = loginShell(u.Username)
	return out, nil
}

// loginShell reads the user's shell from /etc/passwd (os/user does not expose
// it); /bin/sh when it cannot be found.
func loginShell(name string) string {
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return "/bin/sh"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) == 7 && f[0] == name && f[6] != "" {
			return f[6]
		}
	}
	return "/bin/sh"
}

// Credential is what to put in SysProcAttr so a child runs as u. It is nil
// when envd is not root: an unprivileged envd can only run children as itself,
// and asking the kernel for setgroups would fail.
func (u *User) Credential() *syscall.Credential {
	if os.Geteuid() != 0 {
		return nil
	}
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}
}

// StandardPath is the PATH of a login on Debian (root's, which has the
// sbin directories too).
const StandardPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// SandboxPath is the PATH commands and kernels share: envd's own (so the
// programs a sandbox image adds to it are found the same way by every
// user and every kernel), without relative or empty entries (the current
// directory must not decide which program runs) or repeats, and with the
// standard directories it lacks appended.
func SandboxPath() string {
	return CleanPath(os.Getenv("PATH"))
}

// CleanPath is SandboxPath for a given PATH.
func CleanPath(path string) string {
	var out []string
	seen := map[string]bool{}
	for _, dir := range append(filepath.SplitList(path), filepath.SplitList(StandardPath)...) {
		if dir == "" || !filepath.IsAbs(dir) || seen[dir] {
			continue
		}
		seen[dir] = true
		out = append(out, dir)
	}
	return strings.Join(out, string(os.PathListSeparator))
}

// LoginEnv is the environment a login as u starts with: HOME, USER, LOGNAME,
// SHELL, and PATH (SandboxPath).
func (u *User) LoginEnv() []string {
	return []string{
		"PATH=" + SandboxPath(),
		"HOME=" + u.Home,
		"USER=" + u.Name,
		"LOGNAME=" + u.Name,
		"SHELL=" + u.Shell,
	}
}

// Resolve turns a path as a user typed it into an absolute, cleaned path:
// empty is defaultDir (or the home when defaultDir is empty), "~" and "~/x"
// are in the home, relative paths are relative to the home. "~other" is
// refused: envd does not expand other users' homes. defaultDir follows the
// same rules, as upstream's.
func (u *User) Resolve(p, defaultDir string) (string, error) {
	if p == "" {
		p = defaultDir
	}
	switch {
	case p == "", p == "~":
		return filepath.Clean(u.Home), nil
	case strings.HasPrefix(p, "~/"):
		return filepath.Join(u.Home, p[2:]), nil
	case strings.HasPrefix(p, "~"):
		return "", fmt.Errorf("%w: %q: cannot expand another user's home directory", ErrBadPath, p)
	case filepath.IsAbs(p):
		return filepath.Clean(p), nil
	default:
		return filepath.Join(u.Home, p), nil
	}
}
