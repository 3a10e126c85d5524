package reaper

import "os/exec"

// SetStartProcess replaces how Start forks and execs, for a test that needs
// a start to stay in flight; it returns a function that restores it.
func SetStartProcess(f func(*exec.Cmd) error) (restore func()) {
	old := startProcess
	startProcess = f
	return func() { startProcess = old }
}

// Unclaimed is how many exits are kept for Starts in flight.
func Unclaimed() int {
	mu.Lock()
	defer mu.Unlock()
	return len(unclaimed)
}

// PidfdReaps counts the children reaped through their pidfd.
func PidfdReaps() uint64 { return pidfdReaps.Load() }

// WaitPidfd is waitPidfd.
func WaitPidfd(pidfd int) (*Exit, bool) { return waitPidfd(pidfd) }
