package jupyter

import "syscall"

// sysProcAttr puts the server in its own process group (so that Stop can
// signal it and any helper it forks, and so that a Ctrl-C meant for envd in a
// terminal does not reach it), runs it as cred if set, and kills it if envd
// dies without stopping it.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Setpgid:    true,
		Credential: cred,
		// Pdeathsig fires when the forking *thread* exits, so the
		// supervisor starts and waits for the server on a goroutine locked
		// to its thread (see spawn).
		Pdeathsig: syscall.SIGKILL,
	}
}
