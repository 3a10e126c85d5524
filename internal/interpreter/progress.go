package interpreter

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/envd-dev/envd/internal/procstat"
)

// kernelProgress says what the kernel kernelID's processes are doing, for
// a creation that is taking long: whether they are alive, and how much CPU
// they used (the kernel and everything it started: a Java kernel's JVMs,
// say). A kernel that used seconds of CPU is slow, not stuck; one that
// used none waits for something. "" if its process cannot be found (a
// kernel handed over from an early start runs under another connection
// file's name).
//
// It reads /proc: a few milliseconds, only once a creation is late.
func kernelProgress(kernelID string) string {
	if kernelID == "" {
		return ""
	}
	root, ok := kernelProcess(kernelID)
	if !ok {
		return ""
	}
	all := procstat.All()
	children := make(map[int][]procstat.Stat, len(all))
	for _, st := range all {
		children[st.PPid] = append(children[st.PPid], st)
	}
	var cpu uint64
	n, running := 0, 0
	queue := []procstat.Stat{root}
	for len(queue) > 0 && n < 1000 {
		st := queue[0]
		queue = queue[1:]
		n++
		cpu += st.CPU
		if st.State == 'R' || st.State == 'D' {
			running++
		}
		queue = append(queue, children[st.Pid]...)
	}
	used := time.Duration(cpu) * procstat.TickDuration
	state := "none of them running now"
	if running > 0 {
		state = fmt.Sprintf("%d running now", running)
	}
	return fmt.Sprintf("the kernel's %d process(es) (pid %d, %s) are alive, %s, and have used %s of CPU",
		n, root.Pid, root.Comm, state, used.Round(10*time.Millisecond))
}

// kernelProcess finds the kernel's process by its connection file's name
// (kernel-ID.json) in its command line, as every kernelspec passes it: the
// oldest such process, its launcher if it has one.
func kernelProcess(kernelID string) (procstat.Stat, bool) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return procstat.Stat{}, false
	}
	want := []byte("kernel-" + kernelID + ".json")
	var best procstat.Stat
	found := false
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(cmdline, want) {
			continue
		}
		st, err := procstat.Read(pid)
		if err != nil {
			continue
		}
		if !found || st.Start < best.Start {
			best, found = st, true
		}
	}
	return best, found
}
