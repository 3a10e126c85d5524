package identity

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// init keeps the main goroutine on the main thread for good (LockOSThread
// called from init does that for the whole program), so no other goroutine
// ever runs there. DoStrict's threads never come back to Go, and a thread
// that is not given back is only parked: had one been the main thread,
// whose credentials /proc and kill(2) take as the whole process's, envd
// would look like, and be signalable by, the user it acted for (seen in a
// test: /proc/PID/status said Uid 1001).
func init() { runtime.LockOSThread() }

// DoStrict runs fn with exactly u's rights, as a shell logged in as u would
// have them: the real, effective, saved and filesystem uid and gid and the
// supplementary groups are u's, and the thread holds no capability. Unlike
// Do, which switches only the filesystem ids and keeps root's other
// capabilities (CAP_SYS_PTRACE lets it read any /proc/PID/maps), nothing
// fn does on this thread is checked against anything but u.
//
// How: fn runs on a fresh goroutine locked to its OS thread, after that one
// thread switched with the raw per-thread system calls (setgroups,
// setresgid, setresuid). Dropping root this way cannot be undone (the
// capabilities are gone), so the thread is never unlocked: Go ends it with
// the goroutine, and no other goroutine ever runs on it.
//
// As with Do, fn must do its work on the calling goroutine, and a file
// descriptor it opens stays usable afterwards. When envd is not root, or u
// is envd's own account, fn runs directly. A panic in fn is re-raised on
// the calling goroutine.
func (u *User) DoStrict(fn func() error) error {
	if !mustSwitch(u) {
		return fn()
	}
	return onLockedThread(func() (result, bool) {
		// Never unlocked: this thread cannot become root again.
		if err := dropToUser(u); err != nil {
			return result{err: fmt.Errorf("act as user '%s': %w", u.Name, err)}, false
		}
		return catch(fn), false
	})
}

// dropToUser switches the calling thread, and only it, to u for good.
// Groups first, then the gid, the uid last: setting the uids to non-zero
// values clears the thread's capabilities, after which it could not change
// its groups.
func dropToUser(u *User) error {
	groups := u.Groups
	if len(groups) == 0 {
		groups = []uint32{u.GID}
	}
	// gid_t is 32 bits on every Linux Go supports, as is uint32.
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(unsafe.Pointer(&groups[0])), 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	gid := uintptr(u.GID)
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, gid, gid, gid); e != 0 {
		return fmt.Errorf("setresgid %d: %w", u.GID, e)
	}
	uid := uintptr(u.UID)
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uid, uid, uid); e != 0 {
		return fmt.Errorf("setresuid %d: %w", u.UID, e)
	}
	// Check what the kernel now holds for this thread.
	r, e, s := unix.Getresuid()
	if uint32(r) != u.UID || uint32(e) != u.UID || uint32(s) != u.UID {
		return fmt.Errorf("setresuid %d: uids are %d %d %d", u.UID, r, e, s)
	}
	if fsuid, _ := unix.SetfsuidRetUid(-1); uint32(fsuid) != u.UID {
		return fmt.Errorf("setresuid %d: filesystem uid is %d", u.UID, fsuid)
	}
	if u.UID != 0 {
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			return fmt.Errorf("capget: %w", err)
		}
		if data[0].Effective|data[1].Effective|data[0].Permitted|data[1].Permitted != 0 {
			return fmt.Errorf("setresuid %d: capabilities remain", u.UID)
		}
	}
	return nil
}
