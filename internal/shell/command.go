package shell

import (
	"context"
	"time"

	"github.com/coder/quartz"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/process"
)

// EndReason says why a command's stream ended.
type EndReason uint8

// End reasons.
const (
	// EndExited: the command finished; ExitCode is its status ($?).
	EndExited EndReason = iota + 1
	// EndSignaled: bash reported 128+n for the command, n a signal: its
	// last process was ended by signal n (a program that exits with such a
	// status looks the same to bash).
	EndSignaled
	// EndTimedOut: the Run's timeout ran out; envd ended the command.
	EndTimedOut
	// EndInterrupted: Interrupt ended the command.
	EndInterrupted
	// EndSessionEnded: the session ended (the command ended the shell,
	// Close, or the shell died) before the command finished or started.
	EndSessionEnded
)

func (r EndReason) String() string {
	switch r {
	case EndExited:
		return "exited"
	case EndSignaled:
		return "signaled"
	case EndTimedOut:
		return "timed out"
	case EndInterrupted:
		return "interrupted"
	case EndSessionEnded:
		return "session ended"
	}
	return "unknown"
}

// End is how a command ended.
type End struct {
	Reason EndReason
	// ExitCode is $? after the command (for EndSessionEnded: the shell's
	// exit status, or -1 if a signal ended it).
	ExitCode int
	// Signal is the signal's number for EndSignaled (and EndSessionEnded
	// when a signal ended the shell); 0 otherwise.
	Signal int
	// Message says what happened in words.
	Message string
	// Duration is from its start to its end; 0 if it never started.
	Duration time.Duration
}

// cmdState is where a command is in its life; it only moves forward.
type cmdState uint8

const (
	queued cmdState = iota
	running
	ended
)

// Command is one command of a session.
type Command struct {
	s     *Session
	id    string
	text  string
	seq   uint64 // from 1, once it started; 0 is the session's bootstrap
	stdin bool   // its stdin stays open for SendInput until CloseInput

	timeout time.Duration
	file    string // its text's file in the private dir, "" for the bootstrap

	// Input: a pipe in the private dir, its write end, and a writer of
	// input that has not gone in yet (input.go). On a terminal, the Run's
	// input is typed into it as the command starts, until cancelInput.
	inName      string
	in          *input
	parkedInput []byte // the Run's input not written when a handover parked it
	ptyInput    []byte
	cancelInput context.CancelFunc

	// Guarded by s.mu from here on.
	state     cmdState
	queuedAt  time.Time
	startedAt time.Time
	nonce     string
	begun     bool  // its line began: the shell is running it
	startOff  int64 // the offset in the shell's output log where its output begins

	// The demux's view (demux.go), by output kind (process.Stdout,
	// process.Stderr, process.PTY).
	found  [4]bool  // its marker was seen (or the output ended)
	endOff [4]int64 // where its marker begins: its output ends there
	held   [4]held  // bytes that may begin its marker
	bytes  [4]int64 // its output bytes, markers left out

	gotEnd bool // the shell's end message came
	status int  // $? after it, from the end message

	interrupt     EndReason // EndInterrupted or EndTimedOut once asked; the first wins
	interruptedAt time.Time
	nextRound     time.Time         // when the next round of killNew is due
	signaled      bool              // SIGINT was sent (the line had begun)
	sigSent       map[procID]string // the processes SIGINT was sent to, with their names then
	rounds        int               // InterruptGraces passed since the interrupt
	lastFB        time.Time         // when envd last wrote the fb line
	escalate      *quartz.Timer
	timer         *quartz.Timer
	old           map[procID]string // the shell's descendants as it began

	end  End
	done chan struct{} // closed once end is set and its output is all in the log
}

// held is the start of a possible marker: bytes of one kind from offset off
// on.
type held struct {
	off  int64
	data []byte
}

// ID is the command's id.
func (c *Command) ID() string { return c.id }

// Text is the command as asked for.
func (c *Command) Text() string { return c.text }

// Done is closed once the command has ended and its output is complete.
func (c *Command) Done() <-chan struct{} { return c.done }

// kinds are the output kinds of a session's commands.
func (s *Session) kinds() []uint8 {
	if s.pty {
		return []uint8{process.PTY}
	}
	return []uint8{process.Stdout, process.Stderr}
}

// relevant tells whether output of kind k is a command's of s.
func (s *Session) relevant(k uint8) bool {
	if s.pty {
		return k == process.PTY
	}
	return k == process.Stdout || k == process.Stderr
}

// lastOffLocked is where c's output ends, all kinds together; valid once
// every marker was found.
func (c *Command) lastOffLocked() int64 {
	var last int64
	for _, k := range c.s.kinds() {
		last = max(last, c.endOff[k])
	}
	return last
}

// totalLocked is how many bytes of output c has, once it ended.
func (c *Command) totalLocked() int64 {
	var n int64
	for _, k := range c.s.kinds() {
		n += c.bytes[k]
	}
	return n
}

// markersFoundLocked tells whether every marker of c was seen.
func (c *Command) markersFoundLocked() bool {
	for _, k := range c.s.kinds() {
		if !c.found[k] {
			return false
		}
	}
	return true
}

// closeInput ends the command's input pipe: the command reads
// end-of-file. A program that opens the pipe again by name after that
// (cat /dev/stdin, open('/dev/stdin')) would wait for a writer for ever,
// as the pipe is a FIFO: until the command ends, envd opens and closes its
// write end now and then (every reopenPoll at first, then less often),
// which lets such an open return, to read what is left in the pipe, then
// end-of-file, as a reopened anonymous pipe does.
func (c *Command) closeInput() {
	if c.in != nil {
		c.in.close()
		c.in.wakeOnce.Do(func() { go c.wakeReopens() })
	}
}

// An open of a closed input pipe returns within reopenPoll of the close,
// within reopenPollMax later on: wakeReopens doubles its pause up to it,
// so that a long command whose input was closed costs a wake-up a few
// times a second, not fifty.
const (
	reopenPoll    = 20 * time.Millisecond
	reopenPollMax = 250 * time.Millisecond
)

// wakeReopens opens and closes the write end of c's input pipe, once it
// is closed, until c ends: an open of its read end that
// waits for a writer returns (the pipe is the session user's, in envd's
// private directory, opened through its descriptor without following a
// link and without waiting for a reader).
func (c *Command) wakeReopens() {
	if c.inName == "" {
		return
	}
	pause := reopenPoll
	t := time.NewTimer(pause)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		pause = min(2*pause, reopenPollMax)
		t.Reset(pause)
		if !c.in.closed() {
			continue // closed only once the shell holds the read end
		}
		// Under the manager's lock, which Cleanup takes to remove the
		// directory. (A pipe its command's end unlinked meanwhile is not
		// found: nothing to wake.)
		m := c.s.m
		m.mu.Lock()
		if m.dir != nil {
			if fd, err := unix.Openat(int(m.dir.fd.Fd()), c.inName, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
				unix.Close(fd)
			}
		}
		m.mu.Unlock()
	}
}

// commandEnd is the end of a command whose end message came: reason from
// an interrupt asked for, else from the status.
func commandEnd(status int, interrupt EndReason) End {
	e := End{ExitCode: status}
	switch {
	case interrupt == EndTimedOut:
		e.Reason, e.Message = EndTimedOut, "the command ran past its timeout and was interrupted"
	case interrupt == EndInterrupted:
		e.Reason, e.Message = EndInterrupted, "the command was interrupted"
	case status > 128 && status <= 128+64:
		e.Reason, e.Signal = EndSignaled, status-128
		e.Message = "its last process was ended by signal " + signalName(status-128)
	default:
		e.Reason = EndExited
		e.Message = "exit status " + itoa(status)
	}
	return e
}
