package jupyter

import (
	"bytes"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// sweep SIGKILLs every process whose environment contains marker (a
// "KEY=value" string unique to one server run) and returns how many it
// signalled.
//
// Why not kill the server's process group: jupyter_client starts every
// kernel in a new session (start_new_session=True), so kernels and whatever
// they spawn are outside it, and a server that crashed leaves them running
// (ipykernel only notices when reparented to pid 1; R and Deno never do).
// Kernels inherit the server's environment, so the marker finds them and
// their children, and only them.
//
// Each process is held by a pidfd while its environment is checked and
// signalled, so a recycled pid is never hit.
func sweep(marker string) int {
	needle := []byte(marker)
	self := os.Getpid()
	killed := 0
	// A process can fork while we sweep; a few passes catch the children.
	for pass := 0; pass < 5; pass++ {
		n := sweepOnce(needle, self)
		killed += n
		if n == 0 {
			break
		}
	}
	return killed
}

func sweepOnce(needle []byte, self int) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	killed := 0
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == self {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue // gone, or not ours to see
		}
		if hasEnv(pid, needle) {
			if unix.PidfdSendSignal(fd, syscall.SIGKILL, nil, 0) == nil {
				killed++
			}
		}
		_ = unix.Close(fd)
	}
	return killed
}

// hasEnv reports whether /proc/pid/environ holds the exact entry needle.
func hasEnv(pid int, needle []byte) bool {
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false // exited, or another user's process
	}
	for _, kv := range bytes.Split(env, []byte{0}) {
		if bytes.Equal(kv, needle) {
			return true
		}
	}
	return false
}
