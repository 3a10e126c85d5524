package identity

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// init keeps the main goroutine on the main thread for good (LockOSThread
// called from init does that for the whole program), so no other goroutine
// ever runs there: Do and DoStrict never act as a user on the thread whose
// credentials /proc/PID/status and kill(2) take as the whole process's,
// and a thread whose credentials could not be restored can always be ended
// (Go cannot end the main thread, only park it).
func init() { runtime.LockOSThread() }

// DoStrict runs fn with exactly u's rights on files, as a shell logged in
// as u has them: every path fn opens, lists, creates, renames or removes
// is checked by the kernel as if u did it, what fn creates is u's, and no
// capability is effective, so nothing fn does through a path is checked
// against anything but u (unlike Do, which keeps root's other capabilities:
// CAP_SYS_PTRACE reads any /proc/PID/maps).
//
// How: fn runs on a fresh goroutine locked to its OS thread, after that one
// thread switched with the raw per-thread system calls: setgroups to u's
// groups, setresgid(-1, gid, -1) and setresuid(-1, uid, -1). Only the
// effective ids change, and the filesystem ids follow them; the real and
// saved ids stay root's. That is what keeps envd safe from u: the kernel
// lets a process signal a thread (kill, tgkill, sigqueue, pidfd, SIGIO) only
// if the sender's real or effective uid is the thread's real or saved uid,
// and SIGSTOP or SIGKILL sent to one thread stops or kills all of envd; it
// lets it ptrace a thread, read its /proc/PID/task/TID or change its
// limits (prlimit) only if the thread's real, effective and saved uids are
// all the sender's; and it lets it renice or reschedule a thread only if
// the thread's permitted capabilities are within the sender's. None holds
// for a thread whose real and saved uid are root's and whose permitted
// capabilities are root's (and envd is not dumpable, see below), so u
// cannot reach the thread while it acts for u, nor leave anything on it
// for later.
//
// The rights fn gets are u's all the same: a change of the effective uid
// from 0 clears the thread's effective capabilities (the permitted ones
// stay, which is how the thread becomes root again; DoStrict also clears
// the effective set itself and checks that it is empty), file permission
// checks use the filesystem ids, u's supplementary groups and the
// effective capabilities, and /proc's access checks (ptrace_may_access with
// PTRACE_MODE_FSCREDS, which every /proc file uses) the filesystem ids and
// the effective capabilities. The one exemption the kernel makes is for
// the caller's own thread group: envd's own /proc/PID (and /proc/self) is
// readable from a thread acting as u; internal/filesystem refuses it.
//
// So fn may do anything through paths and descriptors, and nothing else:
// a call the kernel checks against the real ids or the permitted
// capabilities sees root. That is access(2) and faccessat(2) without
// AT_EACCESS (they check as the real uid, with the permitted capabilities:
// use faccessat with AT_EACCESS), and signals, ptrace, process_vm_readv and
// prlimit of other processes. fn must not start processes either: a child
// forked from this thread would inherit root's real uid and capabilities.
//
// Changing the effective uid also makes envd non-dumpable (as Do's change
// of the filesystem uid does): the files of envd's /proc/PID then belong
// to root whatever its threads' ids, and what /proc guards there (maps,
// environ, fd, and every thread's) only a process with CAP_SYS_PTRACE may
// read. envd never needs to be dumpable: nothing traces it but root.
//
// Afterwards the thread becomes root again (setresuid to 0 is allowed by
// the saved uid and gives back the effective capabilities, then the gid
// and groups are restored) and is given back to Go once every id, group
// and capability is checked to be what it was; if anything is not, the
// thread stays locked and Go ends it with the goroutine, so no other
// goroutine ever runs with u's credentials.
//
// As with Do, fn must do its work on the calling goroutine, and a file
// descriptor it opens stays usable afterwards. When envd is not root, or u
// is envd's own account, fn runs directly. A panic in fn is re-raised on
// the calling goroutine, after the thread's credentials were restored.
func (u *User) DoStrict(fn func() error) error {
	if !mustSwitch(u) {
		return fn()
	}
	return onLockedThread(func() (result, bool) {
		orig, err := strictThreadCreds()
		if err != nil {
			return result{err: fmt.Errorf("act as user '%s': %w", u.Name, err)}, true
		}
		var res result
		if err := actAs(u, orig); err != nil {
			res.err = fmt.Errorf("act as user '%s': %w", u.Name, err)
		} else {
			res = catch(fn)
		}
		if err := restoreStrict(orig); err != nil {
			// Not root as before: leave the thread locked so the
			// runtime ends it with this goroutine instead of reusing it.
			if res.panic == nil && res.err == nil {
				res.err = fmt.Errorf("restore envd's credentials after acting as user '%s': %w", u.Name, err)
			}
			return res, false
		}
		return res, true
	})
}

// strictCreds is everything DoStrict changes on a thread, and restores.
type strictCreds struct {
	ruid, euid, suid, fsuid int
	rgid, egid, sgid, fsgid int
	groups                  []uint32
	caps                    [2]unix.CapUserData
}

// strictThreadCreds reads the calling thread's credentials. Getresuid,
// Getresgid and Getgroups are raw system calls: this thread's.
func strictThreadCreds() (strictCreds, error) {
	var c strictCreds
	c.ruid, c.euid, c.suid = unix.Getresuid()
	c.rgid, c.egid, c.sgid = unix.Getresgid()
	c.fsuid, _ = unix.SetfsuidRetUid(-1) // an invalid id changes nothing
	c.fsgid, _ = unix.SetfsgidRetGid(-1)
	gs, err := unix.Getgroups()
	if err != nil {
		return c, fmt.Errorf("read supplementary groups: %w", err)
	}
	for _, g := range gs {
		c.groups = append(c.groups, uint32(g))
	}
	if err := capget(&c.caps); err != nil {
		return c, err
	}
	return c, nil
}

func (c *strictCreds) equal(o *strictCreds) bool {
	return c.ruid == o.ruid && c.euid == o.euid && c.suid == o.suid && c.fsuid == o.fsuid &&
		c.rgid == o.rgid && c.egid == o.egid && c.sgid == o.sgid && c.fsgid == o.fsgid &&
		slices.Equal(sorted(c.groups), sorted(o.groups)) && c.caps == o.caps
}

// sorted is a sorted copy of groups: the kernel keeps a thread's groups
// sorted, whatever order setgroups gave them in.
func sorted(groups []uint32) []uint32 {
	return slices.Sorted(slices.Values(groups))
}

// keepID is -1 as a uid_t or gid_t: setres[ug]id leaves that id as it is.
const keepID = ^uintptr(0)

// actAs switches the calling thread, and only it, to u's effective and
// filesystem ids and groups, with no effective capability. Groups first,
// then the gid, the uid last: once the effective uid is not root, the
// thread may no longer change its groups or gid.
func actAs(u *User, orig strictCreds) error {
	// The real and saved uid are what keeps u from signalling the
	// thread: they must be root's, never u's.
	if orig.ruid != 0 || orig.suid != 0 {
		return fmt.Errorf("envd's real and saved uids are %d and %d, not root's: a thread acting as a user could be signalled", orig.ruid, orig.suid)
	}
	groups := u.Groups
	if len(groups) == 0 {
		groups = []uint32{u.GID}
	}
	if err := setgroups(groups); err != nil {
		return err
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, keepID, uintptr(u.GID), keepID); e != 0 {
		return fmt.Errorf("setresgid -1 %d -1: %w", u.GID, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keepID, uintptr(u.UID), keepID); e != 0 {
		return fmt.Errorf("setresuid -1 %d -1: %w", u.UID, e)
	}
	if u.UID != 0 {
		// The kernel cleared the effective set as the euid left 0, unless
		// a securebit (SECBIT_NO_SETUID_FIXUP) says otherwise: clear it
		// in any case.
		caps := orig.caps
		caps[0].Effective, caps[1].Effective = 0, 0
		if err := capset(&caps); err != nil {
			return err
		}
	}
	// Check what the kernel now holds for this thread.
	now, err := strictThreadCreds()
	if err != nil {
		return err
	}
	want := orig
	want.euid, want.fsuid = int(u.UID), int(u.UID)
	want.egid, want.fsgid = int(u.GID), int(u.GID)
	want.groups = groups
	if u.UID != 0 {
		want.caps[0].Effective, want.caps[1].Effective = 0, 0
	}
	if !now.equal(&want) {
		return fmt.Errorf("the thread holds %+v, want %+v", now, want)
	}
	return nil
}

// restoreStrict makes the calling thread what it was before actAs: the
// effective uid first (the saved uid, root, allows it, and the permitted
// capabilities become effective again), then the capabilities, the gid and
// the groups, which need CAP_SETGID. It checks the result.
func restoreStrict(orig strictCreds) error {
	var errs []error
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keepID, uintptr(orig.euid), keepID); e != 0 {
		errs = append(errs, fmt.Errorf("setresuid -1 %d -1: %w", orig.euid, e))
	}
	caps := orig.caps
	if err := capset(&caps); err != nil {
		errs = append(errs, err)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, keepID, uintptr(orig.egid), keepID); e != 0 {
		errs = append(errs, fmt.Errorf("setresgid -1 %d -1: %w", orig.egid, e))
	}
	if err := setgroups(orig.groups); err != nil {
		errs = append(errs, err)
	}
	now, err := strictThreadCreds()
	switch {
	case err != nil:
		errs = append(errs, err)
	case !now.equal(&orig):
		errs = append(errs, fmt.Errorf("the thread holds %+v, want %+v", now, orig))
	}
	return errors.Join(errs...)
}

// setgroups sets the calling thread's supplementary groups only.
func setgroups(groups []uint32) error {
	var p unsafe.Pointer
	if len(groups) > 0 {
		p = unsafe.Pointer(&groups[0])
	}
	// gid_t is 32 bits on every Linux Go supports, as is uint32.
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(p), 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	return nil
}

// capget reads the calling thread's capability sets (pid 0: this thread).
func capget(data *[2]unix.CapUserData) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	return nil
}

// capset sets the calling thread's capability sets.
func capset(data *[2]unix.CapUserData) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}
