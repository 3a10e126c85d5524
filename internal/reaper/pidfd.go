package reaper

import (
	"errors"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pidfdWorks tells whether this kernel gives pidfds that can be polled and
// waited on (Linux 5.4 and later): pidfd_open of envd itself succeeds.
var pidfdWorks = sync.OnceValue(func() bool {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
})

// askPidfd asks cmd's start for a pidfd of the child (CLONE_PIDFD): the int
// it points to is the pidfd after a successful start, else -1. Not when a
// caller asked for one already, or the kernel has none.
func askPidfd(cmd *exec.Cmd) *int {
	fd := -1
	if !pidfdWorks() {
		return &fd
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if cmd.SysProcAttr.PidFD != nil {
		return &fd
	}
	cmd.SysProcAttr.PidFD = &fd
	return &fd
}

// watchPidfd waits, in the netpoller, for the child behind pidfd to exit,
// reaps it and hands its exit over (if the reap loop did not first). It
// owns pidfd and closes it.
func watchPidfd(pid, pidfd int) {
	if err := unix.SetNonblock(pidfd, true); err != nil {
		unix.Close(pidfd)
		return // the reap loop reaps it
	}
	f := os.NewFile(uintptr(pidfd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool { return reapPidfd(pid, int(fd)) })
}

// sigchldInfo is the kernel's siginfo_t as waitid fills it for a child
// (the _sigchld member of its union), 128 bytes in all.
type sigchldInfo struct {
	Signo, Errno, Code int32
	_                  int32
	Pid                int32
	UID                uint32
	Status             int32
	_                  [100]byte
}

// reapPidfd reaps the child behind pidfd if it exited, and reports whether
// there is nothing left to wait for: it was reaped, now or by the reap loop.
func reapPidfd(pid, pidfd int) bool {
	reapMu.Lock() // Pause stops this reaping too
	defer reapMu.Unlock()
	e, done := waitPidfd(pidfd)
	if e == nil {
		return done
	}
	pidfdReaps.Add(1)
	deliver(reapLog(), pid, *e)
	broadcastReaped()
	return true
}

// pidfdReaps counts the children reaped through their pidfd.
var pidfdReaps atomic.Uint64

// waitPidfd reaps the child behind the nonblocking pidfd: its exit, or nil
// with done false while it runs, done true when it was reaped already.
func waitPidfd(pidfd int) (e *Exit, done bool) {
	var info sigchldInfo
	ru := new(unix.Rusage)
	for {
		err := unix.Waitid(unix.P_PIDFD, pidfd, (*unix.Siginfo)(unsafe.Pointer(&info)), unix.WEXITED|unix.WNOHANG, ru)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			return nil, false // a nonblocking pidfd's "not yet"
		case err != nil:
			return nil, true // ECHILD: reaped by the reap loop
		case info.Pid == 0:
			return nil, false // WNOHANG's "not yet"
		}
		return &Exit{Status: waitStatus(info), Usage: (*syscall.Rusage)(unsafe.Pointer(ru))}, true
	}
}

// si_code values of a child's exit (linux/signal.h); CLD_EXITED is 1.
const (
	cldKilled = 2
	cldDumped = 3
)

// waitStatus encodes a child's siginfo as wait4 would have.
func waitStatus(info sigchldInfo) syscall.WaitStatus {
	switch info.Code {
	case cldKilled:
		return syscall.WaitStatus(uint32(info.Status) & 0x7f)
	case cldDumped:
		return syscall.WaitStatus(uint32(info.Status)&0x7f | 0x80)
	default: // CLD_EXITED
		return syscall.WaitStatus((uint32(info.Status) & 0xff) << 8)
	}
}
