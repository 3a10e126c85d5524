package process

import (
	"errors"
	"os"
	"syscall"

	"github.com/envd-dev/envd/internal/procstat"
)

// signalGroup sends sig to the process group pid leads, and, for a process
// on a terminal, to every process of its session (a job-control shell puts
// each job in a group of its own). It answers os.ErrProcessDone when nothing
// was left to signal.
func signalGroup(pid uint32, session bool, sig syscall.Signal) error {
	err := syscall.Kill(-int(pid), sig)
	if session {
		for _, q := range sessionMembers(pid) {
			if syscall.Kill(q, sig) == nil {
				err = nil
			}
		}
	}
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// groupGone tells whether no process (zombies included) is left in the group
// pid leads, or, for a session, in the session.
func groupGone(pid uint32, session bool) bool {
	if err := syscall.Kill(-int(pid), 0); !errors.Is(err, syscall.ESRCH) {
		return false
	}
	return !session || len(sessionMembers(pid)) == 0
}

// sessionMembers lists the processes whose session id is sid, from /proc.
func sessionMembers(sid uint32) []int {
	return procstat.Select(func(st procstat.Stat) bool { return st.Session == int(sid) })
}
