package interpreter

import (
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/jupyter"
)

// How a kernel's death is told. envd says what it knows, no more: the
// code exited the kernel (IPython's exit(), IRkernel's quit(): the
// execute_reply's ask_exit payload), its process exited with a status or was killed by a signal
// (the server's restart says which: jupyter.KernelStatus.Exit), the OOM
// killer killed a kernel meanwhile (Options.OOMKills). Memory is blamed
// only on the last.

// exitedText begins the error of an execution whose code exited its
// kernel.
const exitedText = "The code exited the kernel (exit() or quit()): "

// oomText explains a kernel death the OOM killer caused.
const oomText = "The kernel was killed by the out-of-memory killer while running the code: the sandbox ran out of memory. "

// byOOM tells whether a kernel that died as exit says (nil: unknown) is
// the one the OOM killer killed, given that it killed one meanwhile (oom):
// the OOM killer's signal is SIGKILL.
func byOOM(exit *jupyter.ExitStatus, oom bool) bool {
	return oom && (exit == nil || exit.Signal == unix.SIGKILL)
}

// runDeath says how a kernel died while running the code, then what
// followed (then: "was restarted", "could not be restarted").
func runDeath(exit *jupyter.ExitStatus, oom bool, then string) string {
	switch {
	case byOOM(exit, oom):
		return oomText + "It " + then
	case exit == nil:
		return "The kernel died while running the code (for example os._exit() or a crash) and " + then
	case exit.Signal == 0:
		return "The kernel exited while running the code (" + exit.String() + ": the code ended its process, " +
			"for example with os._exit() or Deno.exit()) and " + then
	}
	return "The kernel died while running the code (killed by " + exit.String() + ") and " + then
}

// idleDeath says, in parentheses after "died since the last execution",
// how a kernel died while no code ran; "" when envd does not know.
func idleDeath(exit *jupyter.ExitStatus, oom bool) string {
	switch {
	case byOOM(exit, oom):
		return " (killed by the out-of-memory killer: the sandbox ran out of memory)"
	case exit == nil:
		return ""
	case exit.Signal == 0:
		return " (its process exited with " + exit.String() + ")"
	}
	return " (killed by " + exit.String() + ")"
}
