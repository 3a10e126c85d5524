package shell

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/procstat"
)

// A process, told apart from a later one that reuses its pid by its start
// (clock ticks after boot).
type procID struct {
	pid   int
	start uint64
}

// descendants lists the processes below pid, each with its command name,
// following each process's children (/proc/PID/task/TID/children): a few
// small reads for a shell with a few jobs, taken as each command starts.
func descendants(pid int) map[procID]string {
	out := map[procID]string{}
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children(p) {
			st, err := procstat.Read(c)
			if err != nil {
				continue
			}
			id := procID{c, st.Start}
			if _, seen := out[id]; !seen {
				out[id] = st.Comm
				queue = append(queue, c)
			}
		}
	}
	return out
}

// children are pid's children, from every thread's list.
func children(pid int) []int {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return nil
	}
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + t.Name() + "/children")
		if err != nil {
			continue
		}
		for f := range strings.FieldsSeq(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// killNew sends SIGKILL to what a command left of its process tree: the
// shell's descendants that were not there when it began (old), and the
// processes of the shell's group (its session, on a terminal) that are
// neither the shell, nor old, nor older than the command (whose parent died
// before: orphans). since is how long ago the command began.
func killNew(shell int, session bool, old map[procID]string, since time.Duration) int {
	killed := 0
	kill := func(id procID) {
		if _, isOld := old[id]; id.pid != shell && !isOld && syscall.Kill(id.pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	for id := range descendants(shell) {
		kill(id)
	}
	began, ok := bootTicks(since)
	if !ok {
		return killed
	}
	for _, st := range procstat.All() {
		member := st.PGrp == shell || session && st.Session == shell
		if member && st.Start >= began {
			kill(procID{st.Pid, st.Start})
		}
	}
	return killed
}

// clockTicks is the unit of /proc's start times (USER_HZ), 100 on Linux.
const clockTicks = 100

// bootTicks is the time since boot, in clock ticks, of since ago (one tick
// earlier, so that a process started in that tick counts as younger).
func bootTicks(since time.Duration) (uint64, bool) {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0, false
	}
	up, _, _ := strings.Cut(string(b), " ")
	secs, err := strconv.ParseFloat(up, 64)
	if err != nil {
		return 0, false
	}
	t := secs*clockTicks - since.Seconds()*clockTicks - 1
	if t < 0 {
		return 0, true
	}
	return uint64(t), true
}

// killTree sends sig to each process of ids still the same.
func killTree(ids map[procID]string, sig syscall.Signal) {
	for id := range ids {
		if st, err := procstat.Read(id.pid); err == nil && st.Start == id.start {
			syscall.Kill(id.pid, sig)
		}
	}
}

// readingCommands tells whether the shell waits for its next command
// line: blocked in read(2) on its fd 0 while fd 0 is the command pipe
// (during a command, fd 0 is the command's stdin). A stat of the
// descriptor's target, nothing opened.
func readingCommands(pid int, cmdPipe *os.File) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/syscall")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 || f[0] != strconv.Itoa(unix.SYS_READ) || f[1] != "0x0" {
		return false
	}
	var fd0, mine unix.Stat_t
	if unix.Stat("/proc/"+strconv.Itoa(pid)+"/fd/0", &fd0) != nil || unix.Fstat(int(cmdPipe.Fd()), &mine) != nil {
		return false
	}
	return fd0.Dev == mine.Dev && fd0.Ino == mine.Ino
}

// waitGone waits, up to bound, until none of ids runs (each has exited,
// or a new process has its pid).
func waitGone(ids map[procID]string, bound time.Duration) {
	deadline := time.Now().Add(bound)
	for {
		alive := false
		for id := range ids {
			if st, err := procstat.Read(id.pid); err == nil && st.Start == id.start && st.State != 'Z' {
				alive = true
				break
			}
		}
		if !alive || time.Now().After(deadline) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
