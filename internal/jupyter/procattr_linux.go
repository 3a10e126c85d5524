package jupyter

import "syscall"

// sysProcAttr puts the server in its own process group (so that Stop can
// signal it and any helper it forks, and so that a Ctrl-C meant for envd in a
// terminal does not reach it), runs it as cred if set, and has it stop if
// envd dies without stopping it.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Setpgid:    true,
		Credential: cred,
		// Pdeathsig fires when the forking *thread* exits, so the
		// supervisor starts and waits for the server on a goroutine locked
		// to its thread (see spawn). It also fires when a live upgrade
		// execs a new envd (every other thread of envd ends then) and the
		// server must live on: so not SIGKILL but parentDeathSignal,
		// which the server ignores unless its parent really is gone (see
		// jupyter_server_config.py).
		Pdeathsig: parentDeathSignal,
	}
}

// parentDeathSignal is the server's Pdeathsig. Its default action is to
// ignore it: before the server has loaded its config, which handles it,
// an exec of envd does not kill the server (envd dying then leaves it
// running, to the sandbox's init).
const parentDeathSignal = syscall.SIGWINCH
