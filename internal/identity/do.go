package identity

import (
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Do runs fn with u's filesystem permissions: every path fn opens, creates,
// renames or removes is checked by the kernel as if u did it, and what fn
// creates belongs to u (and to u's primary group).
//
// How: fn runs on a fresh goroutine locked to its OS thread, after that one
// thread's filesystem uid, gid and supplementary groups were switched with the
// raw per-thread system calls (setfsuid, setfsgid, setgroups). Go's own
// syscall.Setuid and Setgroups would change every thread of envd, so they
// must never be used here. The thread's credentials are restored afterwards;
// if that fails the thread stays locked and Go discards it when the goroutine
// ends, so no other goroutine ever runs with u's credentials.
//
// fn must do its work on the calling goroutine: a goroutine it starts runs on
// another thread, with envd's own credentials. A file descriptor fn opens can
// be read and written anywhere afterwards: the kernel checked the permission
// when it was opened.
//
// When envd is not root it cannot switch, and fn runs as envd itself. When u
// is the account envd runs as, fn runs directly too.
//
// A panic in fn is re-raised on the calling goroutine, after the thread's
// credentials were restored.
func (u *User) Do(fn func() error) error {
	if !mustSwitch(u) {
		return fn()
	}
	return onLockedThread(func() (result, bool) {
		orig, err := threadCreds()
		if err != nil {
			return result{err: err}, true
		}
		var res result
		if err := setThreadCreds(creds{uid: u.UID, gid: u.GID, groups: u.Groups}); err != nil {
			res.err = fmt.Errorf("act as user '%s': %w", u.Name, err)
		} else {
			res = catch(fn)
		}
		if err := setThreadCreds(orig); err != nil {
			// The thread keeps u's credentials: leave it locked so the
			// runtime ends it with this goroutine instead of reusing it.
			if res.panic == nil && res.err == nil {
				res.err = fmt.Errorf("restore envd's credentials after acting as user '%s': %w", u.Name, err)
			}
			return res, false
		}
		return res, true
	})
}

// result is what fn did on its locked thread: its error, or its panic.
type result struct {
	err   error
	panic any
}

// catch runs fn, turning a panic into a result.
func catch(fn func() error) (r result) {
	defer func() { r.panic = recover() }()
	return result{err: fn()}
}

// onLockedThread runs body on a fresh goroutine locked to its OS thread,
// and gives the thread back to Go only if body says it may (its
// credentials are envd's again); else Go ends the thread with the
// goroutine. A panic body caught is re-raised here, on the caller's
// goroutine.
func onLockedThread(body func() (res result, unlock bool)) error {
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		res, unlock := body()
		if unlock {
			runtime.UnlockOSThread()
		}
		done <- res
	}()
	res := <-done
	if res.panic != nil {
		panic(res.panic)
	}
	return res.err
}

// mustSwitch tells whether acting as u needs other credentials than envd's.
func mustSwitch(u *User) bool {
	if os.Geteuid() != 0 {
		return false
	}
	return u.UID != uint32(os.Geteuid()) || u.GID != uint32(os.Getegid())
}

type creds struct {
	uid, gid uint32
	groups   []uint32
}

// threadCreds reads the calling thread's filesystem uid and gid (setfsuid
// with an invalid id changes nothing and returns the current one) and its
// supplementary groups.
func threadCreds() (creds, error) {
	uid, _ := unix.SetfsuidRetUid(-1)
	gid, _ := unix.SetfsgidRetGid(-1)
	gs, err := unix.Getgroups()
	if err != nil {
		return creds{}, fmt.Errorf("read supplementary groups: %w", err)
	}
	c := creds{uid: uint32(uid), gid: uint32(gid), groups: make([]uint32, len(gs))}
	for i, g := range gs {
		c.groups[i] = uint32(g)
	}
	return c, nil
}

// setThreadCreds switches the calling thread only. Groups go first and the
// uid last: once the filesystem uid is not root, the kernel drops the
// filesystem capabilities, but CAP_SETUID and CAP_SETGID stay, so switching
// back works.
func setThreadCreds(c creds) error {
	var p unsafe.Pointer
	if len(c.groups) > 0 {
		p = unsafe.Pointer(&c.groups[0])
	}
	// gid_t is 32 bits on every Linux Go supports, as is uint32.
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(c.groups)), uintptr(p), 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	unix.SetfsgidRetGid(int(c.gid))
	if got, _ := unix.SetfsgidRetGid(-1); uint32(got) != c.gid {
		return fmt.Errorf("setfsgid %d: still %d", c.gid, got)
	}
	unix.SetfsuidRetUid(int(c.uid))
	if got, _ := unix.SetfsuidRetUid(-1); uint32(got) != c.uid {
		return fmt.Errorf("setfsuid %d: still %d", c.uid, got)
	}
	return nil
}
