// Package shell runs shell sessions: persistent bash shells whose commands
// each come back with their own stdout, stderr and exit code, while cwd,
// variables, functions, aliases and options persist from one command to
// the next (docs/shell.md).
//
// A session is one bash process, started through the process manager
// (internal/process) as the session's user, so it has what every process
// has: user switching, its own cgroup, strict-mode visibility, a bounded
// output log with paced readers and counted losses, and adoption by the
// envd that replaces this one in a live upgrade. The shell is interactive
// (bash -i, without readline, rc files, prompts, history or job control):
// SIGINT then abandons the command line it runs and the shell lives on, as
// Ctrl+C at a terminal. It reads its commands from a pipe of envd's, one at
// a time in the order their Runs arrived; a Run that must wait says so.
//
// Framing (frame.go) never guesses where a command's output ends: each
// command ends with a marker, 128 fresh random bits, that the shell's own
// function prints on its stdout and stderr once the command returned, then
// reports the status, cwd and exported environment on a control pipe only
// the shell writes. The demux (demux.go) finds the marker anywhere in the
// output, holding back only what may be its start; readers (reader.go)
// pass on each command's bytes from the shell's output log. A command can
// print anything: any bytes, no final newline, text that looks like a
// marker (a marker it cannot know).
//
// Trust: the shell's pipes, the file of each command's text and the pipe
// of its input live in a private directory of envd's (dir.go), belong to
// the session's user alone, and are opened by envd only through the
// directory's descriptor, never by a path a user can change. What a
// command does to its own session (exit, exec, kill -9 $$, closing its
// descriptors, a trap) may end that session, with a clear message; it can
// never hang envd or reach another session.
//
// The package knows nothing of Connect, HTTP or the handover record:
// shellconnect is its adapter, and internal/daemon converts its Snapshot
// to and from the live-upgrade record.
package shell
