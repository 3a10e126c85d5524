package daemon

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/reaper"
)

// Who Jupyter and its kernels run as (docs/security.md, "Who the kernels
// run as"). A Python kernel runs the shared virtual environment's python,
// which runs every .pth file in its site-packages, and an R kernel loads
// its packages from the shared R library: whoever can write those runs
// code as the kernels' account at their next start (the warm pool starts
// one on its own). Root kernels may use them only when everyone who owns
// them can become root anyway.
//
//   - Default mode: root, as upstream's, when the default user is root or
//     may become root through sudo without a password (E2B's `user`);
//     otherwise the default user, as in strict mode, so that what it
//     installs is importable in every context and what it plants runs as
//     itself only.
//   - -strict-users: the default user (root kernels never use the shared
//     environment).
//   - -jupyter-as-root: root in every mode.
//
// Root kernels get the shared environment only in the default mode, and
// only when the default user and the owners of the environment's
// directories are root or root-equivalent; otherwise they get Debian's
// python3 and R's own libraries, as strict mode's root processes do
// (strictRootEnv). The choice is made once, when envd starts.

// kernelsAccount is the account Jupyter and its kernels run as, and what
// they may load.
type kernelsAccount struct {
	user *identity.User // nil: envd's own account (root when envd is root)
	// shared: the kernels get the shared package environment (the
	// Python virtual environment and R library). Otherwise Debian's
	// python3 and R's own libraries.
	shared bool
	why    string // for the log
	// kept: the account of the Jupyter server a live upgrade handed
	// over, not the one chosen (keepHandedAccount).
	kept bool
}

// rootEquivalentFunc tells whether an account can become root without a
// password, and why not (or how), for the log.
type rootEquivalentFunc func(*identity.User) (bool, string)

// chooseKernels decides the kernels' account. def is the default user;
// owners are the accounts that own the shared environment's directories
// (defaults.Packages); euid is envd's. rootEq is asked at most once per
// account, and only when its answer matters.
func chooseKernels(cfg Config, euid int, def *identity.User, owners []*identity.User, rootEq rootEquivalentFunc) kernelsAccount {
	if euid != 0 {
		return kernelsAccount{shared: true, why: "envd is not root: the kernels run as its own account"}
	}
	if cfg.JupyterURL != "" {
		// envd starts no kernel: the server runs them as whoever
		// started it. runAs is only whose rights a context's cwd is
		// checked with.
		if cfg.StrictUsers && !cfg.JupyterAsRoot {
			return kernelsAccount{user: def, shared: true, why: "an existing Jupyter server (-jupyter-url), strict mode"}
		}
		return kernelsAccount{shared: !cfg.StrictUsers, why: "an existing Jupyter server (-jupyter-url)"}
	}
	asked := map[uint32]bool{}
	equivalent := func(u *identity.User) (bool, string) {
		if u.UID == 0 {
			return true, "root"
		}
		ok, why := rootEq(u)
		asked[u.UID] = ok
		return ok, why
	}
	// sharedForRoot: whether everyone who owns what root kernels would
	// load can become root anyway.
	sharedForRoot := func() (bool, string) {
		for _, u := range append([]*identity.User{def}, owners...) {
			if u == nil {
				return false, "the owner of the shared package environment has no account"
			}
			ok, known := asked[u.UID]
			if !known {
				ok, _ = equivalent(u)
			}
			if !ok {
				return false, fmt.Sprintf("%s (the default user, or an owner of the shared package environment) cannot become root without a password: root kernels use Debian's python3 and R's own libraries", u.Name)
			}
		}
		return true, ""
	}
	switch {
	case cfg.StrictUsers && !cfg.JupyterAsRoot:
		a := kernelsAccount{user: def, shared: def.UID != 0, why: "-strict-users: the default user"}
		if !a.shared {
			a.why += " (root: not from the shared package environment)"
		}
		return a
	case cfg.JupyterAsRoot:
		a := kernelsAccount{why: "-jupyter-as-root"}
		if cfg.StrictUsers {
			a.why += " with -strict-users: not from the shared package environment"
			return a
		}
		shared, why := sharedForRoot()
		a.shared = shared
		if why != "" {
			a.why += "; " + why
		}
		return a
	}
	ok, how := equivalent(def)
	if !ok {
		return kernelsAccount{user: def, shared: true,
			why: fmt.Sprintf("the default user %s cannot become root without a password (%s): root kernels would run what it can write", def.Name, how)}
	}
	a := kernelsAccount{why: fmt.Sprintf("the default user %s can become root (%s): root, as upstream's", def.Name, how)}
	if def.UID == 0 {
		a.why = "the default user is root: root, as upstream's"
	}
	shared, why := sharedForRoot()
	a.shared = shared
	if why != "" {
		a.why += "; " + why
	}
	return a
}

// handedServerUID is the uid of the Jupyter server a live upgrade handed
// over (which this envd adopts, running, with its kernels); false without
// one.
func handedServerUID(cfg Config) (uint32, bool) {
	if cfg.Handover == nil || cfg.Handover.Record == nil {
		return 0, false
	}
	pid := cfg.Handover.Record.GetJupyter().GetServer().GetPid()
	if pid == 0 {
		return 0, false
	}
	return procUID(int(pid))
}

// procUID is the real uid of process pid, from /proc/PID/status.
func procUID(pid int) (uint32, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0, false
			}
			uid, err := strconv.ParseUint(f[0], 10, 32)
			return uint32(uid), err == nil
		}
	}
	return 0, false
}

// keepHandedAccount keeps the account of the Jupyter server a live
// upgrade handed over (uid) when it differs from a's: this envd adopts
// that server as it runs, and every later start of it must work in the
// runtime directory made for that account. Root, then, without the shared
// environment (an envd before this choice existed ran every default-mode
// kernel as root); another account with it. The choice a made applies
// from envd's next start.
func keepHandedAccount(a kernelsAccount, uid uint32, lookup func(uint32) *identity.User) kernelsAccount {
	chosen := uint32(0)
	if a.user != nil {
		chosen = a.user.UID
	}
	if uid == chosen {
		return a
	}
	why := fmt.Sprintf("kept from the Jupyter server handed over by the live upgrade, until envd restarts (else: %s)", a.why)
	if uid == 0 {
		return kernelsAccount{why: why + "; not from the shared package environment", kept: true}
	}
	if u := lookup(uid); u != nil {
		return kernelsAccount{user: u, shared: true, why: why, kept: true}
	}
	return a
}

// lookupUID is the account of uid; nil when it has none.
func lookupUID(uid uint32) *identity.User {
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return nil
	}
	owner, err := identity.Lookup(u.Username)
	if err != nil {
		return nil
	}
	return owner
}

// packageOwners are the accounts that own the shared environment's
// directories, other than root and def; nil for a directory whose owner
// has no account.
func packageOwners(pkgs defaults.Packages, def *identity.User) []*identity.User {
	var out []*identity.User
	seen := map[uint32]bool{0: true, def.UID: true}
	for _, dir := range []string{pkgs.PythonVenv, pkgs.RLibrary} {
		if dir == "" {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(dir, &st); err != nil || seen[st.Uid] {
			continue // FindPackages checked it exists
		}
		seen[st.Uid] = true
		out = append(out, lookupUID(st.Uid))
	}
	return out
}

// sudoPaths are where rootEquivalent looks for sudo: never through a
// PATH, which could name a directory sandbox code can write.
var sudoPaths = []string{"/usr/bin/sudo", "/bin/sudo", "/usr/local/bin/sudo"}

// rootCheckTimeout bounds rootEquivalent's sudo: one that does not answer
// in time (a network account lookup that hangs) says no.
const rootCheckTimeout = 5 * time.Second

// rootEquivalent tells whether u can become root without a password,
// trying it for real: `sudo -n -k -- /bin/sh -c true` run as u (its ids,
// a minimal environment, a session of its own without a terminal, stdin
// /dev/null) must exit 0 within timeout. -n: sudo never asks for a
// password; -k: a password u typed earlier (sudo's cached credentials)
// does not count, only a rule that needs none. Without a setuid-root sudo
// in sudoPaths, no. The string says why, for the log. Its answer is only
// as good as sudo: a user who can become root another way (a setuid
// program of the template's, a group that can write /etc) is not
// detected, and then runs the kernels itself, which is the safe side.
func rootEquivalent(u *identity.User, paths []string, timeout time.Duration) (bool, string) {
	if u.UID == 0 {
		return true, "root"
	}
	sudo := ""
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode()&os.ModeSetuid == 0 {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == 0 {
			sudo = p
			break
		}
	}
	if sudo == "" {
		return false, "no sudo"
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return false, fmt.Sprintf("cannot run %s: %v", sudo, err)
	}
	defer errR.Close()
	cmd := &exec.Cmd{
		Path:   sudo,
		Args:   []string{sudo, "-n", "-k", "--", "/bin/sh", "-c", "true"},
		Env:    []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"},
		Dir:    "/",
		Stderr: errW,
		SysProcAttr: &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups},
			Setsid:     true,
		},
	}
	exitc, err := reaper.Start(cmd)
	errW.Close()
	if err != nil {
		return false, fmt.Sprintf("cannot run %s: %v", sudo, err)
	}
	stderr := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(errR, 512))
		stderr <- strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
	}()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var ex reaper.Exit
	select {
	case ex = <-exitc:
	case <-ctx.Done():
		reaper.SignalChild(cmd.Process.Pid, syscall.SIGKILL, true) // nothing once it is reaped
		<-exitc
		// What it started may hold the pipe: do not wait for its end.
		errR.SetReadDeadline(time.Now())
		return false, fmt.Sprintf("%s gave no answer within %v", sudo, timeout)
	}
	errR.SetReadDeadline(time.Now().Add(time.Second))
	msg := <-stderr
	if ex.Code() == 0 {
		return true, "sudo without a password"
	}
	if msg == "" {
		msg = ex.String()
	}
	return false, "sudo: " + strings.TrimPrefix(msg, "sudo: ")
}
