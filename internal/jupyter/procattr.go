package jupyter

import "syscall"

// sysProcAttr puts the server in its own process group (so that Stop can
// signal it and any helper it forks, and so that a Ctrl-C meant for envd in a
// terminal does not reach it) and runs it as cred if set.
//
// No Pdeathsig: it fires when the forking thread ends, which a live upgrade's
// exec of a new envd does too, and a signal handler needs the server's main
// thread, which a stuck server does not give back. The server's own watcher
// thread stops it when envd is gone (server_hooks.py).
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}
