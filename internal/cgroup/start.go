package cgroup

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Start runs start, which forks and execs cmd (reaper.Start, say), so that
// the child is born in g: it runs none of its own code outside it.
//
// v2: cmd is cloned into g (clone3 with CLONE_INTO_CGROUP): start may run on
// any goroutine, and g may be frozen (the child then waits for the thaw).
//
// v1: start runs on a goroutine of its own, locked to its OS thread, which
// joins g (the tasks file, per thread), forks, and goes back to envd's own
// cgroups; the child inherits g. Start returns once the child is forked: the
// way back is not waited for (two writes, 0.05 to 0.1 ms), and the thread is
// given back to Go only once it is back. Meanwhile g's members list envd's
// pid too: readPids leaves it out. If the thread cannot go back (never seen:
// envd is root in its own cgroup), it ends with its goroutine. start must
// not need the caller's thread (Pdeathsig ties a child to its forking
// thread: that thread outlives the start only until it is back). While the
// workload is frozen a v1 start answers ErrFrozen: the thread would freeze
// with it.
func (g *Group) Start(cmd *exec.Cmd, start func() error) error {
	if g.m.v2 != nil {
		err := g.startV2(cmd, start)
		g.refillParent()
		return err
	}
	return g.startV1(start)
}

// refillParent makes the next spare once a start is done: not at the same
// time, when its mkdir would wait on the same cgroup locks.
func (g *Group) refillParent() {
	if g.parent != nil {
		g.m.spares.refill(g.parent)
	}
}

func (g *Group) startV2(cmd *exec.Cmd, start func() error) error {
	dir := g.m.dirs(g.rel)[0]
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: open cgroup %s: %w", ErrJoin, dir, err)
	}
	defer unix.Close(fd)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = fd
	return start()
}

// self, written to a v1 tasks file, moves the writing thread. With its own
// id instead, the kernel takes a lock that every fork and exit on the
// machine waits for (cgroup_threadgroup_rwsem, held for writing), and with
// it a start slowed other processes' forks: two envds side by side took 1.4
// to 3 ms longer per start each.
var self = []byte("0")

func (g *Group) startV1(start func() error) error {
	forked := make(chan error, 1)
	go g.forkFromV1(start, forked)
	return <-forked
}

// forkFromV1 is startV1's goroutine: it sends start's result (or why start
// did not run) to forked as soon as it has it, then takes its thread back
// to envd's cgroups.
func (g *Group) forkFromV1(start func() error, forked chan<- error) {
	m := g.m
	m.placing.RLock()
	defer m.placing.RUnlock()
	if m.frozen {
		forked <- ErrFrozen
		return
	}
	runtime.LockOSThread()
	hs := m.hiers()
	dirs := m.dirs(g.rel)
	var moved []*hier
	back := func() error {
		for _, h := range moved {
			if err := writeFile(filepath.Join(h.own, "tasks"), self); err != nil {
				return fmt.Errorf("move envd's thread back to %s: %w", h.own, err)
			}
		}
		return nil
	}
	for i, h := range hs {
		if err := writeFile(filepath.Join(dirs[i], "tasks"), self); err != nil {
			forked <- fmt.Errorf("%w: cgroup %s: %w", ErrJoin, dirs[i], err)
			if berr := back(); berr != nil {
				m.log.Error("envd's thread is stuck in a workload cgroup: it ends with its goroutine", "err", berr)
				return
			}
			runtime.UnlockOSThread()
			return
		}
		moved = append(moved, h)
	}
	forked <- start()
	// The caller was woken onto this P, and this goroutine would keep it
	// through the writes below: a syscall gives its P up only when sysmon
	// takes it back, after 20 us to 10 ms. The caller waited 0.13 ms here
	// for its start to be answered; yielding first, 0.03 ms.
	runtime.Gosched()
	if err := back(); err != nil {
		m.log.Error("envd's thread is stuck in a workload cgroup: it ends with its goroutine", "err", err)
		return
	}
	runtime.UnlockOSThread()
	g.refillParent()
}

// writeFile writes b to an existing cgroup file in one write.
func writeFile(p string, b []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// SetOOMScoreAdj sets pid's oom_score_adj (-1000..1000; 0 is pid 0: envd
// itself).
func SetOOMScoreAdj(pid, adj int) error {
	p := "/proc/self/oom_score_adj"
	if pid != 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/oom_score_adj"
	}
	if err := writeFile(p, []byte(strconv.Itoa(adj))); err != nil {
		return fmt.Errorf("set oom_score_adj: %w", err)
	}
	return nil
}

// oom_score_adj values: envd is the last thing the OOM killer takes, Jupyter
// and its kernels come before it, the processes envd starts first.
const (
	OOMScoreEnvd     = -1000
	OOMScoreJupyter  = -500
	OOMScoreWorkload = 100
)
