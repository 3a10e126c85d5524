package process

import (
	"os"
	"os/signal"
	"syscall"
)

// LeaveSignalsDefault makes every process this program starts begin with
// each signal at its default disposition. An ignored signal stays ignored
// across execve, while a handled one is reset to the default: so a signal
// the program does not want to die of (SIGPIPE: a closed log pipe, a
// client gone mid-write), or one it was started with ignored (SIGHUP under
// nohup, SIGINT and SIGQUIT for a job a shell without job control put in
// the background), is handled here, by a channel nobody reads (a signal
// that finds it full is dropped), never ignored. Ignoring SIGPIPE had
// every command see it ignored (`yes | head -1` printed "Broken pipe"); an
// ignored SIGINT made an interactive shell's commands deaf to Ctrl+C.
//
// envd calls it once at start; so do the tests that start processes,
// whatever started them.
func LeaveSignalsDefault() {
	sigs := []os.Signal{syscall.SIGPIPE}
	for s := syscall.Signal(1); s < 32; s++ {
		if s != syscall.SIGKILL && s != syscall.SIGSTOP && signal.Ignored(s) {
			sigs = append(sigs, s)
		}
	}
	signal.Notify(make(chan os.Signal, 1), sigs...)
}
