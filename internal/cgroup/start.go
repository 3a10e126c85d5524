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
// v1: the calling goroutine's OS thread joins g (the tasks file, per
// thread), forks, and goes back to envd's own cgroups, freezer first; the
// child inherits g. Start locks the goroutine to its thread for that and
// leaves the lock count as it found it, so a caller that holds its thread
// (Pdeathsig) keeps it. If the thread cannot go back (never seen: envd is
// root in its own cgroup), it stays locked to the goroutine, and the thread
// ends with it. While the workload is frozen a v1 start answers ErrFrozen:
// the thread would freeze with it.
//
// The way back is waited for, not left to a goroutine of its own: a guest
// that freezes its process's cgroup the moment Start returns would freeze
// envd's thread with it, and with the thread the placing lock (a hang of
// every later start and freeze, seen in a test that does just that).
func (g *Group) Start(cmd *exec.Cmd, start func() error) error {
	// The next spare is made once this start is done: not at the same
	// time, when its mkdir would wait on the same cgroup locks.
	if g.parent != nil {
		defer g.m.spares.refill(g.parent)
	}
	defer g.closeTasks()
	if g.m.v2 != nil {
		return g.startV2(cmd, start)
	}
	return g.startV1(start)
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
// it every start slowed other processes' forks, another envd's included.
var self = []byte("0")

func (g *Group) startV1(start func() error) error {
	m := g.m
	m.placing.RLock()
	defer m.placing.RUnlock()
	if m.frozen {
		return ErrFrozen
	}
	runtime.LockOSThread()
	hs := m.hiers()
	dirs := m.dirs(g.rel)
	var moved []int
	back := func() error {
		for _, i := range moved {
			if err := writeFD(m.ownTask(i), filepath.Join(hs[i].own, "tasks"), self); err != nil {
				return fmt.Errorf("move envd's thread back to %s: %w", hs[i].own, err)
			}
		}
		return nil
	}
	for i := range hs {
		if err := writeFD(g.taskFile(i), filepath.Join(dirs[i], "tasks"), self); err != nil {
			if berr := back(); berr != nil {
				m.log.Error("envd's thread is stuck in a workload cgroup: it ends with its goroutine", "error", berr)
				return fmt.Errorf("%w: cgroup %s: %w", ErrJoin, dirs[i], err)
			}
			runtime.UnlockOSThread()
			return fmt.Errorf("%w: cgroup %s: %w", ErrJoin, dirs[i], err)
		}
		moved = append(moved, i)
	}
	err := start()
	if berr := back(); berr != nil {
		m.log.Error("envd's thread is stuck in a workload cgroup: it ends with its goroutine", "error", berr)
		return err
	}
	runtime.UnlockOSThread()
	return err
}

// ownTask is the tasks file of envd's own cgroup in hierarchy i, open, or
// -1.
func (m *Manager) ownTask(i int) int {
	if i < len(m.ownTasks) {
		return m.ownTasks[i]
	}
	return -1
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
