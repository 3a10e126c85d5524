// Package reaper owns the waiting for every child envd starts.
//
// envd is a child subreaper: processes orphaned inside the sandbox are
// reparented to it and must be reaped, or they stay zombies forever. Reaping
// orphans means calling wait4(-1), which would also steal the exit status of
// envd's own children from exec.Cmd.Wait. So, as in containerd's shim, one
// loop reaps everything and hands each status to whoever started that pid:
// every child envd starts goes through Start, and nobody calls exec.Cmd.Wait.
//
// Start does not hold the lock across fork/exec, so concurrent starts do not
// wait for each other (as containerd's shim, it subscribes before starting):
// while any Start is between its fork and its registration, the reap loop
// keeps the exits of pids nobody has registered yet, and Start claims its
// own when it registers. An exit reaped before a Start began cannot be its
// child's (that child was forked after the pid was freed), so it is never
// handed to it.
//
// Each child Start forks is also watched through a pidfd (pidfd.go): its
// exit wakes the netpoller, and the pidfd's waiter reaps it at once, without
// waiting for SIGCHLD to travel through os/signal to the reap loop (about
// 0.1 ms of every command's end). Whichever of the two reaps a child first
// hands its exit over; the other finds nothing.
//
// Until Enable is called (unit tests of other packages, say) Start waits for
// each child with os.Process.Wait instead, and orphans are not reaped.
package reaper

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/procstat"
)

// Exit is how a child ended.
type Exit struct {
	Status syscall.WaitStatus
	// Usage is what the child used (wait4's rusage: its own and its
	// waited-for descendants'); nil when unknown.
	Usage *syscall.Rusage
}

// Code is the exit code, or -1 when a signal ended the child.
func (e Exit) Code() int {
	if e.Status.Exited() {
		return e.Status.ExitStatus()
	}
	return -1
}

// String reads like os.ProcessState: "exit status 3", "signal: killed".
func (e Exit) String() string {
	switch {
	case e.Status.Exited():
		return fmt.Sprintf("exit status %d", e.Status.ExitStatus())
	case e.Status.Signaled():
		s := "signal: " + e.Status.Signal().String()
		if e.Status.CoreDump() {
			s += " (core dumped)"
		}
		return s
	default:
		return fmt.Sprintf("unknown wait status %#x", uint32(e.Status))
	}
}

var (
	mu      sync.Mutex
	enabled bool                  // guarded by mu
	waiters = map[int]chan Exit{} // guarded by mu
	// seq orders starts and reaps: it counts both. Guarded by mu.
	seq uint64
	// starting holds, for each Start between its fork and its registration,
	// the seq at which it began (unique: seq counts starts). Guarded by mu.
	starting = map[uint64]bool{}
	// unclaimed holds exits of pids nobody had registered when they were
	// reaped, while some Start was in flight: one of them may be its child.
	// Guarded by mu; emptied of what no Start in flight can claim.
	unclaimed = map[int]unclaimedExit{}
	// reaped is closed, and replaced, after each round of reaping (see
	// Reaped). Guarded by mu.
	reaped = make(chan struct{})
)

type unclaimedExit struct {
	exit Exit
	seq  uint64 // when it was reaped
}

// Enable makes envd a child subreaper and starts the loop that reaps every
// child on SIGCHLD. Call it early, before starting any child; later calls
// (a daemon run again in one test binary) do nothing.
func Enable(logger *slog.Logger) error {
	enableOnce.Do(func() { enableErr = enable(logger) })
	return enableErr
}

// sweepInterval is how often the reap loop looks for exits without a SIGCHLD.
const sweepInterval = 100 * time.Millisecond

var (
	enableOnce sync.Once
	enableErr  error
)

func enable(logger *slog.Logger) error {
	loopLog.Store(logger)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become child subreaper: %w", err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	mu.Lock()
	enabled = true
	mu.Unlock()
	go func() {
		// SIGCHLD drives the loop. A sweep every sweepInterval is the
		// backstop: under a burst of exits some children were seen to stay
		// zombies with no SIGCHLD left to wake the loop (139 of 800 in
		// TestManyConcurrentChildren), their owners waiting for ever.
		t := time.NewTicker(sweepInterval)
		for {
			select {
			case <-sigs:
			case <-t.C:
			}
			reapAll(logger)
		}
	}()
	// Children that ended before Notify was installed sent their SIGCHLD already.
	reapAll(logger)
	return nil
}

// reapAll collects every child that has exited. SIGCHLD signals coalesce, so
// one signal may stand for many exits: loop until none is left. wait4 runs
// outside the lock; only the hand-over takes it.
func reapAll(logger *slog.Logger) {
	reapMu.Lock() // held by Pause across a handover (handover.go)
	defer reapMu.Unlock()
	defer broadcastReaped()
	for {
		var ws syscall.WaitStatus
		ru := new(syscall.Rusage)
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, ru)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		deliver(logger, pid, Exit{Status: ws, Usage: ru})
	}
}

// loopLog is the logger Enable was given.
var loopLog atomic.Pointer[slog.Logger]

func reapLog() *slog.Logger {
	if l := loopLog.Load(); l != nil {
		return l
	}
	return slog.Default()
}

// broadcastReaped wakes those waiting on Reaped.
func broadcastReaped() {
	mu.Lock()
	close(reaped)
	reaped = make(chan struct{})
	mu.Unlock()
}

// deliver hands the exit of pid to its owner, keeps it for a Start in
// flight, or logs an orphan's.
func deliver(logger *slog.Logger, pid int, e Exit) {
	mu.Lock()
	defer mu.Unlock()
	seq++
	if ch, ok := waiters[pid]; ok {
		delete(waiters, pid)
		ch <- e
		return
	}
	if len(starting) > 0 {
		unclaimed[pid] = unclaimedExit{exit: e, seq: seq}
		return
	}
	logger.Debug("reaped orphan", "pid", pid, "status", e.String())
}

// Reaped returns a channel that is closed after the reap loop's next round:
// a way to wait for processes that are not envd's children (the members of
// a process group, say) to be gone without polling. Without Enable nothing
// is reaped and the channel is never closed.
func Reaped() <-chan struct{} {
	mu.Lock()
	defer mu.Unlock()
	return reaped
}

// Start starts cmd and returns a channel that receives its exit exactly once.
// cmd's Stdin, Stdout and Stderr must be nil or *os.File: the caller never
// calls cmd.Wait, so exec's copying goroutines would never be cleaned up.
// Concurrent calls fork and exec in parallel.
func Start(cmd *exec.Cmd) (<-chan Exit, error) {
	for _, s := range []any{cmd.Stdin, cmd.Stdout, cmd.Stderr} {
		if s == nil {
			continue
		}
		if _, ok := s.(*os.File); !ok {
			return nil, errors.New("reaper: stdio must be nil or *os.File")
		}
	}
	ch := make(chan Exit, 1)
	mu.Lock()
	on := enabled
	seq++
	began := seq
	if on {
		starting[began] = true
	}
	mu.Unlock()
	if !on {
		if err := startUnreaped(cmd, ch); err != nil {
			return nil, err
		}
		return ch, nil
	}

	pidfd := askPidfd(cmd)
	err := startProcess(cmd) // without the lock: starts run in parallel

	mu.Lock()
	defer mu.Unlock()
	delete(starting, began)
	if err == nil {
		pid := cmd.Process.Pid
		if u, ok := unclaimed[pid]; ok && u.seq > began {
			delete(unclaimed, pid)
			ch <- u.exit // it exited before we registered it
		} else {
			waiters[pid] = ch
			if *pidfd >= 0 {
				go watchPidfd(pid, *pidfd)
				*pidfd = -1
			}
		}
	}
	if *pidfd >= 0 {
		syscall.Close(*pidfd)
	}
	forgetUnclaimedLocked()
	if err != nil {
		return nil, err
	}
	return ch, nil
}

// forgetUnclaimedLocked drops the exits that no Start in flight can claim:
// those reaped before the oldest of them began. They were orphans'.
func forgetUnclaimedLocked() {
	if len(unclaimed) == 0 {
		return
	}
	oldest := seq + 1
	for s := range starting {
		oldest = min(oldest, s)
	}
	for pid, u := range unclaimed {
		if u.seq < oldest {
			delete(unclaimed, pid)
		}
	}
}

// startProcess forks and execs cmd; a seam for tests that need a start to
// stay in flight.
var startProcess = (*exec.Cmd).Start

// startUnreaped starts cmd when no reap loop runs: a goroutine waits for it.
func startUnreaped(cmd *exec.Cmd, ch chan Exit) error {
	if err := startProcess(cmd); err != nil {
		return err
	}
	go func() {
		st, err := cmd.Process.Wait()
		if err != nil {
			// Only possible if someone else reaped the child; report it as killed.
			ch <- Exit{Status: syscall.WaitStatus(syscall.SIGKILL)}
			return
		}
		ex := Exit{Status: st.Sys().(syscall.WaitStatus)}
		if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
			ex.Usage = ru
		}
		ch <- ex
	}()
	return nil
}

// Children lists the pids whose parent is envd: the children it started and
// the orphans reparented to it. Shutdown signals them all.
func Children() []int {
	self := os.Getpid()
	return procstat.Select(func(st procstat.Stat) bool { return st.PPid == self })
}

// SignalChild sends sig to pid, a child of envd (started, adopted or
// reparented to it), and with group to the process group pid leads if it
// leads one, holding reaping off meanwhile: an unreaped child holds its
// pid, and so its group's number, which then cannot be another process's
// or group's. Once pid is reaped (its number may be anyone's since) it
// sends nothing and reports false. Children started without the reap loop
// (no Enable) are reaped by exec's Wait instead, which this cannot hold.
func SignalChild(pid int, sig syscall.Signal, group bool) bool {
	reapMu.Lock()
	defer reapMu.Unlock()
	st, err := procstat.Read(pid)
	if err != nil || st.PPid != os.Getpid() {
		return false
	}
	if group && st.PGrp == pid {
		_ = syscall.Kill(-pid, sig)
	}
	return syscall.Kill(pid, sig) == nil
}
