package shell

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/coder/quartz"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/process"
)

// Session is one shell and its commands.
type Session struct {
	m       *Manager
	id      string
	tag     string
	user    *identity.User
	pty     bool
	created time.Time
	proc    *process.Process
	cmdPipe *os.File // the command pipe's write end
	ctlPipe *os.File // the control pipe's read end
	log     *slog.Logger

	demuxStop chan struct{} // closed to park the demux (handover)
	demuxDone chan struct{} // closed when the demux returned
	ctlDone   chan struct{} // closed when the control reader returned
	readyc    chan struct{} // closed once the shell is ready, or ended
	parser    parser        // the control reader's

	mu       sync.Mutex
	notify   chan struct{} // guarded by mu; closed and replaced on every change
	seq      uint64        // guarded by mu: the last command's seq
	started  uint64        // guarded by mu: commands started
	boot     *Command      // guarded by mu: command 0, until the shell is ready
	queue    []*Command    // guarded by mu: commands waiting, in order
	cur      *Command      // guarded by mu: the command running, nil when idle
	byID     map[string]*Command
	history  []*Command // guarded by mu: the last commands that ended, oldest first
	cwd      string     // guarded by mu: $PWD as of the last end message
	env      map[string]string
	status   int    // guarded by mu: $? after the last command
	frontier int64  // guarded by mu: the demux's position in the shell's output
	outEOF   bool   // guarded by mu: the demux read the end of the shell's output
	closing  string // guarded by mu: why envd ends the session, "" while it does not
	ended    *sessionEnd
	parked   bool // guarded by mu: a handover holds the session

	// Sync (syncLocked), guarded by mu: sigints counts the SIGINTs the
	// shell was sent, synced how many of them it is known to be done with.
	sigints, synced uint64
	syncSeq         uint64 // the last sync token sent
	syncToken       uint64 // the sync answer awaited, 0 for none
	syncCount       uint64 // the sigints as the awaited sync was sent
	syncTries       int
	syncTimer       *quartz.Timer
}

// sessionEnd is how a session ended.
type sessionEnd struct {
	exit    process.Exit
	message string
}

// Info is what List and State say of a session.
type Info struct {
	ID, Tag, User string
	Pid           uint32
	PTY           bool
	Created       time.Time
	Commands      uint64 // commands started so far
	Busy          bool   // a command runs now
}

// CommandInfo describes a command.
type CommandInfo struct {
	ID      string
	Seq     uint64
	Text    string
	Started time.Time
}

// State is a session's shell as of now.
type State struct {
	Info
	// Cwd is the shell's working directory ($PWD) as of its last command's
	// end (or its start).
	Cwd string
	// Env is its exported environment as of then.
	Env map[string]string
	// Running is the command running now, if any.
	Running *CommandInfo
	// Queued counts the commands waiting.
	Queued int
	// LastExitCode is $? after the last command (0 before any).
	LastExitCode int
}

// ID is the session's id.
func (s *Session) ID() string { return s.id }

// Owner is the uid of the session's user.
func (s *Session) Owner() uint32 { return s.user.UID }

// changedLocked wakes every reader of the session.
func (s *Session) changedLocked() {
	if s.notify != nil {
		close(s.notify)
		s.notify = nil
	}
}

func (s *Session) changedChanLocked() <-chan struct{} {
	if s.notify == nil {
		s.notify = make(chan struct{})
	}
	return s.notify
}

// activeLocked is the command whose marker the demux looks for.
func (s *Session) activeLocked() *Command {
	if s.boot != nil && s.boot.state == running {
		return s.boot
	}
	return s.cur
}

// Info describes the session.
func (s *Session) Info() Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.infoLocked()
}

func (s *Session) infoLocked() Info {
	return Info{ID: s.id, Tag: s.tag, User: s.user.Name, Pid: s.proc.Pid(), PTY: s.pty, Created: s.created,
		Commands: s.started, Busy: s.cur != nil}
}

// endedErrorLocked is the error of a request to a session that ended.
func (s *Session) endedErrorLocked() error {
	return errorf(ErrEnded, "session %s has ended: %s", s.id, s.ended.message)
}

// State reports the shell's state.
func (s *Session) State() (State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != nil {
		return State{}, s.endedErrorLocked()
	}
	st := State{Info: s.infoLocked(), Cwd: s.cwd, Env: s.env, Queued: len(s.queue), LastExitCode: s.status}
	if st.Cwd == "" {
		// $PWD unset: the kernel's view (a path string; nothing followed).
		st.Cwd, _ = os.Readlink("/proc/" + strconv.Itoa(int(s.proc.Pid())) + "/cwd")
	}
	if c := s.cur; c != nil {
		st.Running = &CommandInfo{ID: c.id, Seq: c.seq, Text: c.text, Started: c.startedAt}
	}
	return st, nil
}

// aheadLocked is how many commands run or wait before c.
func (s *Session) aheadLocked(c *Command) int {
	n := 0
	if s.cur != nil {
		n++
	}
	for _, q := range s.queue {
		if q == c {
			break
		}
		n++
	}
	return n
}

// RunOptions is a command to run.
type RunOptions struct {
	Command string
	// Timeout, when positive, interrupts the command once it has run that
	// long; waiting in the queue does not count.
	Timeout time.Duration
	// Stdin keeps the command's stdin open after Input, for SendInput and
	// CloseInput. Without it, the command reads Input, then end-of-file.
	Stdin bool
	Input []byte
}

// Run queues a command and returns it, with a reader of its events that
// follows it from its start.
func (s *Session) Run(o RunOptions) (*Command, *Reader, error) {
	switch {
	case o.Command == "":
		return nil, nil, errorf(ErrInvalid, "command is empty: give the bash source to run")
	case containsNUL(o.Command):
		return nil, nil, errorf(ErrInvalid, "command contains a NUL byte, which bash cannot hold")
	case o.Timeout < 0:
		return nil, nil, errorf(ErrInvalid, "timeout %v is negative: give a positive timeout, or none", o.Timeout)
	}
	dir, err := s.m.privateDir()
	if err != nil {
		return nil, nil, err
	}
	// The files are made before the session is locked: a large command
	// must not hold it up.
	c := &Command{s: s, id: newID(), text: o.Command, stdin: o.Stdin, timeout: o.Timeout, done: make(chan struct{})}
	if c.file, err = dir.file(s.user, []byte(o.Command)); err != nil {
		return nil, nil, err
	}
	switch {
	case s.pty:
		c.ptyInput = o.Input
	case !o.Stdin && len(o.Input) > 0:
		// All of the input is known: a file, which the command may read
		// again (cat /dev/stdin reopens it), as with bash's < file.
		if c.inName, err = dir.file(s.user, o.Input); err != nil {
			dir.unlink(c.file)
			return nil, nil, err
		}
	case o.Stdin:
		// Input that comes as it is sent: a FIFO, whose end-of-file comes
		// with CloseInput. (A program that opens /dev/stdin again after
		// it reads what is left, then end-of-file: Command.closeInput.)
		name, f, err := dir.fifo("i", s.user)
		if err != nil {
			dir.unlink(c.file)
			return nil, nil, err
		}
		c.inName, c.in = name, newInput(f)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	refuse := func(err error) (*Command, *Reader, error) {
		dir.unlink(c.file)
		dir.unlink(c.inName)
		if c.in != nil {
			c.in.forceClose()
		}
		return nil, nil, err
	}
	switch {
	case s.ended != nil:
		return refuse(s.endedErrorLocked())
	case s.closing != "":
		return refuse(errorf(ErrEnded, "session %s is ending: %s", s.id, s.closing))
	case s.parked:
		return refuse(errorf(ErrUnavailable, "envd is being upgraded: run the command again once it answers (in a few seconds)"))
	case len(s.queue) >= s.m.opts.MaxQueued:
		return refuse(errorf(ErrExhausted, "session %s has %d commands waiting, the most it holds: run this one once they have started", s.id, len(s.queue)))
	}
	c.queuedAt = s.m.clock.Now()
	r := s.newReaderLocked(c)
	if c.in != nil {
		c.in.start(o.Input, o.Stdin)
	}
	s.queue = append(s.queue, c)
	s.byID[c.id] = c
	s.changedLocked()
	s.startNextLocked()
	return c, r, nil
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

// Connect returns a reader of the command with id (empty: the one running
// now, else the last).
func (s *Session) Connect(id string) (*Reader, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var c *Command
	switch {
	case id != "":
		if c = s.byID[id]; c == nil {
			return nil, errorf(ErrNotFound, "command %s not found in session %s (a session keeps its last %d commands)", id, s.id, s.m.opts.History)
		}
	case s.cur != nil:
		c = s.cur
	case len(s.history) > 0:
		c = s.history[len(s.history)-1]
	case len(s.queue) > 0:
		c = s.queue[0]
	default:
		return nil, errorf(ErrNotFound, "session %s has run no command yet", s.id)
	}
	return s.newReaderLocked(c), nil
}

// startNextLocked sends the next command waiting, if the shell is idle.
func (s *Session) startNextLocked() {
	for s.ended == nil && s.closing == "" && !s.parked && s.boot == nil && s.cur == nil && len(s.queue) > 0 {
		if s.sigints != s.synced {
			s.syncLocked()
			return
		}
		c := s.queue[0]
		s.queue = s.queue[1:]
		if err := s.sendLocked(c); err != nil {
			s.breakLocked(fmt.Sprintf("envd cannot write to the shell (%v): the session was ended", err))
			return
		}
	}
}

// sendLocked starts c: envd writes its line to the shell.
func (s *Session) sendLocked(c *Command) error {
	s.seq++
	s.started++
	c.seq, c.nonce, c.state = s.seq, newNonce(), running
	c.startedAt, c.startOff = s.m.clock.Now(), s.frontier
	s.cur = c
	c.old = descendants(int(s.proc.Pid()))
	dir := s.m.dir
	in := ""
	if c.inName != "" {
		in = dir.pathOf(c.inName)
	}
	if c.timeout > 0 {
		c.timer = s.m.clock.AfterFunc(c.timeout, func() { s.timedOut(c) }, "shell", "timeout")
	}
	s.changedLocked()
	if len(c.ptyInput) > 0 {
		s.writeTerminal(c, c.ptyInput)
	}
	check := ""
	if needsCheck(c.text) {
		check = dir.pathOf(failName)
	}
	return s.writeLocked(commandLine(c.seq, s.status, dir.pathOf(c.file), in, c.nonce, check))
}

// writeTimeout bounds a write to the command pipe: lines are short and
// the shell reads them as it goes, so only a shell that is stuck fills it.
const writeTimeout = 5 * time.Second

// writeLocked writes b to the command pipe.
func (s *Session) writeLocked(b []byte) error {
	s.cmdPipe.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := s.cmdPipe.Write(b)
	return err
}

// writeTerminal types b into the terminal for c, on a goroutine: a
// program that does not read fills the terminal's buffer. It ends with c.
func (s *Session) writeTerminal(c *Command, b []byte) {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancelInput = cancel
	go func() {
		defer cancel()
		s.proc.WritePTY(ctx, b)
	}()
}

// tryEndLocked ends c once the shell's end message came and every marker
// was seen.
func (s *Session) tryEndLocked(c *Command) {
	if c.state == running && c.gotEnd && c.markersFoundLocked() {
		s.finishLocked(c, commandEnd(c.status, c.interrupt))
	}
}

// finishLocked ends c with e.
func (s *Session) finishLocked(c *Command, e End) {
	if c.state == ended {
		return
	}
	wasRunning := c.state == running
	if wasRunning {
		e.Duration = s.m.clock.Now().Sub(c.startedAt)
		if c.interrupt != 0 && c != s.boot {
			// What it left running goes with it (its own background jobs,
			// which ignore SIGINT), as its whole tree was to end.
			if n := killNew(int(s.proc.Pid()), s.pty, c.old, e.Duration); n > 0 {
				s.log.Debug("interrupted command ended: killed what it left running", "session", s.id, "seq", c.seq, "killed", n)
			}
		}
	}
	c.end, c.state = e, ended
	if c.timer != nil {
		c.timer.Stop("shell", "timeout")
	}
	if c.escalate != nil {
		c.escalate.Stop("shell", "interrupt")
	}
	if c.cancelInput != nil {
		c.cancelInput()
	}
	if c.in != nil {
		c.in.forceClose()
	}
	if dir := s.m.dir; dir != nil {
		dir.unlink(c.file)
		dir.unlink(c.inName)
	}
	close(c.done)
	s.changedLocked()
	if c == s.boot {
		s.boot = nil
		close(s.readyc)
		s.startNextLocked()
		return
	}
	s.history = append(s.history, c)
	if len(s.history) > s.m.opts.History {
		delete(s.byID, s.history[0].id)
		s.history = s.history[1:]
	}
	if c == s.cur {
		s.cur = nil
		if c.gotEnd {
			s.status = c.status
		}
		s.startNextLocked()
	}
}

// syncLocked makes sure the shell is done with every SIGINT it was sent
// before it reads another command line: a SIGINT the shell takes as it
// reads a line loses the line's start (what is left of it is a syntax
// error: see fbLine), and a command line lost so would never run. envd
// writes a sync line and waits for its answer; a signal that reached the
// shell has been taken (or has abandoned that line: then it writes another
// after syncRetry) once the answer comes.
func (s *Session) syncLocked() {
	if s.syncToken != 0 {
		return // one is awaited
	}
	s.syncSeq++
	s.syncToken, s.syncCount = s.syncSeq, s.sigints
	if err := s.writeLocked([]byte(syncLine(s.syncToken))); err != nil {
		s.breakLocked(fmt.Sprintf("envd cannot write to the shell (%v): the session was ended", err))
		return
	}
	s.syncTimer = s.m.clock.AfterFunc(syncRetry, s.syncTimedOut, "shell", "sync")
}

// syncRetry is how long envd waits for a sync's answer before it writes
// another; maxSyncTries bounds the tries before it takes the shell for
// stuck.
const (
	syncRetry    = 250 * time.Millisecond
	maxSyncTries = 40
)

func (s *Session) syncTimedOut() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.syncToken == 0 || s.ended != nil || s.parked {
		return
	}
	s.syncTries++
	if s.syncTries >= maxSyncTries {
		s.breakLocked("the shell did not answer envd after an interrupt: envd ended the session")
		return
	}
	s.syncToken = 0
	s.syncLocked()
}

// synced is the shell's answer to a sync.
func (s *Session) syncedLocked(token uint64) {
	if token != s.syncToken || s.syncToken == 0 {
		return // an earlier one, written again
	}
	s.syncTimer.Stop("shell", "sync")
	s.syncToken, s.syncTries, s.synced = 0, 0, s.syncCount
	s.startNextLocked()
}

// handleMessage acts on a control message.
func (s *Session) handleMessage(m message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.kind == msgSynced {
		s.syncedLocked(m.seq)
		return
	}
	c := s.activeLocked()
	if c == nil || c.seq != m.seq || c.state != running {
		return // an fb's late copy, or a command ended meanwhile
	}
	switch m.kind {
	case msgStarted:
		c.begun = true
		if c.in != nil {
			c.in.markOpened()
		}
		if c.interrupt != 0 && !c.signaled {
			s.sigintLocked(c)
		}
	case msgEnded:
		if c.gotEnd {
			return
		}
		c.gotEnd, c.status = true, m.status
		s.cwd, s.env = m.pwd, m.env
		s.tryEndLocked(c)
	}
	s.changedLocked()
}

// readControl reads the control pipe until it is closed (the session
// ended) or a handover parks it.
func (s *Session) readControl() {
	defer close(s.ctlDone)
	buf := make([]byte, 64<<10)
	for {
		n, err := s.ctlPipe.Read(buf)
		if n > 0 {
			msgs, perr := s.parser.feed(buf[:n])
			for _, m := range msgs {
				s.handleMessage(m)
			}
			if perr != nil {
				s.breakSession(fmt.Sprintf("the shell sent envd a message it cannot read (%v): the session was ended", perr))
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Interrupt interrupts the command with id, or the one running now when id
// is empty. A command still waiting is taken out of the queue and never
// starts; one that has ended is left alone (false).
func (s *Session) Interrupt(id string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != nil {
		return false, s.endedErrorLocked()
	}
	if id == "" {
		if s.cur == nil {
			return false, nil
		}
		s.interruptLocked(s.cur, EndInterrupted)
		return true, nil
	}
	c := s.byID[id]
	switch {
	case c == nil:
		return false, errorf(ErrNotFound, "command %s not found in session %s (a session keeps its last %d commands)", id, s.id, s.m.opts.History)
	case c.state == ended:
		return false, nil
	case c.state == queued:
		s.dequeueLocked(c)
		s.finishLocked(c, End{Reason: EndInterrupted, Message: "interrupted before it started"})
		return true, nil
	}
	s.interruptLocked(c, EndInterrupted)
	return true, nil
}

// dequeueLocked takes c out of the queue.
func (s *Session) dequeueLocked(c *Command) {
	for i, q := range s.queue {
		if q == c {
			s.queue = append(s.queue[:i:i], s.queue[i+1:]...)
			return
		}
	}
}

// runningLocked is the command input goes to: the one running now, which
// must be id's when id is not empty; none says why there is none.
func (s *Session) runningLocked(id, none string) (*Command, error) {
	c := s.cur
	switch {
	case id != "" && (c == nil || c.id != id):
		if s.byID[id] == nil {
			return nil, errorf(ErrNotFound, "command %s not found in session %s (a session keeps its last %d commands)", id, s.id, s.m.opts.History)
		}
		return nil, errorf(ErrEnded, "command %s is not running in session %s: its stdin is open only while it runs", id, s.id)
	case c == nil:
		return nil, errorf(ErrEnded, "no command runs in session %s: %s", s.id, none)
	}
	return c, nil
}

func (s *Session) timedOut(c *Command) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.interruptLocked(c, EndTimedOut)
}

// interruptLocked interrupts c: SIGINT to the shell's process group (its
// session, on a terminal), as Ctrl+C at a terminal, as soon as its line
// has begun. The interactive shell abandons the line (and fb then ends
// the command); bash's background jobs ignore SIGINT. Every interruptPoll,
// if a process of c's was born or exec'd since (it may have missed it,
// being forked as it came), the group gets SIGINT again. After each InterruptGrace
// still running, what c started is killed (killNew) and SIGINT sent again;
// after maxRounds the shell is taken for stuck and the session ended.
func (s *Session) interruptLocked(c *Command, why EndReason) {
	if c.state != running || c.interrupt != 0 || s.ended != nil || s.parked {
		return
	}
	c.interrupt = why
	c.interruptedAt = s.m.clock.Now()
	c.nextRound = c.interruptedAt.Add(s.m.opts.InterruptGrace)
	if c.begun {
		s.sigintLocked(c)
	}
	c.escalate = s.m.clock.AfterFunc(interruptPoll, func() { s.escalateInterrupt(c) }, "shell", "interrupt")
	s.changedLocked()
}

// interruptPoll is how often an interrupted command's new processes are
// looked for.
const interruptPoll = 50 * time.Millisecond

// maxRounds is how many InterruptGrace an interrupted command gets before
// envd gives up on its shell.
const maxRounds = 3

// sigintLocked sends SIGINT to the shell's group, and notes the processes
// that got it; an fb line follows, in case the shell abandons the line.
func (s *Session) sigintLocked(c *Command) {
	c.signaled = true
	c.sigSent = descendants(int(s.proc.Pid()))
	s.sigints++
	s.proc.Signal(syscall.SIGINT) // an error: the shell is gone, and its end comes
	s.writeFBLocked(c)
}

// writeFBLocked writes c's fb line, which ends c if its line was
// abandoned (a no-op once it ended).
func (s *Session) writeFBLocked(c *Command) {
	c.lastFB = s.m.clock.Now()
	s.writeLocked([]byte(fbLine(c.seq, c.nonce)))
}

func (s *Session) escalateInterrupt(c *Command) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.state != running || s.ended != nil || s.parked {
		return
	}
	now := s.m.clock.Now()
	if !now.Before(c.nextRound) {
		// A round: one per InterruptGrace at most, however late the timer.
		c.rounds++
		c.nextRound = now.Add(s.m.opts.InterruptGrace)
		if c.rounds >= maxRounds {
			s.breakLocked(fmt.Sprintf("the shell did not come back after its command was interrupted (%v): envd ended the session", now.Sub(c.interruptedAt).Round(time.Millisecond)))
			return
		}
		n := killNew(int(s.proc.Pid()), s.pty, c.old, now.Sub(c.startedAt))
		s.log.Debug("interrupted command still running: killed what it started", "session", s.id, "seq", c.seq, "killed", n)
		s.sigintLocked(c)
	} else if c.signaled && now.Sub(c.lastFB) >= 2*interruptPoll && readingCommands(int(s.proc.Pid()), s.cmdPipe) {
		// The shell abandoned the line and waits for the next one, but
		// the fb line did not end c: a SIGINT cut it as the shell read
		// it. Another, without a signal this time.
		s.writeFBLocked(c)
	} else if c.signaled {
		// A process born or exec'd since may not have seen SIGINT (a
		// child forked as it came takes it with the shell's handler, then
		// runs its program): the group gets it again, the shell too, which
		// abandons the line only if it got SIGINT itself as its job died
		// of it.
		for id, name := range descendants(int(s.proc.Pid())) {
			if _, isOld := c.old[id]; !isOld && c.sigSent[id] != name {
				s.sigintLocked(c)
				break
			}
		}
	}
	c.escalate.Reset(interruptPoll, "shell", "interrupt")
}

// SendInput writes data to the stdin of the command running now (its
// terminal, in a session with one), which must be id's when id is not
// empty.
func (s *Session) SendInput(ctx context.Context, id string, data []byte) error {
	s.mu.Lock()
	if s.ended != nil {
		defer s.mu.Unlock()
		return s.endedErrorLocked()
	}
	c, err := s.runningLocked(id, "input goes to the command running now")
	if err != nil {
		s.mu.Unlock()
		return err
	}
	if s.pty {
		if bytes.IndexByte(data, 0x03) >= 0 {
			s.sigints++ // Ctrl+C: the terminal sends the group SIGINT
		}
		s.mu.Unlock()
		return s.terminalInput(ctx, data)
	}
	if !c.stdin || c.in == nil {
		s.mu.Unlock()
		return errorf(ErrEnded, "command %s was not run with stdin: run it with stdin set to send it input", c.id)
	}
	in := c.in
	s.mu.Unlock()
	return in.write(ctx, data)
}

func (s *Session) terminalInput(ctx context.Context, data []byte) error {
	if err := s.proc.WritePTY(ctx, data); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("write to the terminal of session %s: %w", s.id, err)
		}
		return errorf(ErrEnded, "write to the terminal of session %s: %v", s.id, err)
	}
	return nil
}

// CloseInput closes the stdin of the command running now (id's, when id
// is not empty): it reads end-of-file. On a terminal it types Ctrl+D, which a program reading the
// terminal line by line reads as the end of its input.
func (s *Session) CloseInput(ctx context.Context, id string) error {
	s.mu.Lock()
	if s.ended != nil {
		defer s.mu.Unlock()
		return s.endedErrorLocked()
	}
	c, err := s.runningLocked(id, "there is no stdin to close")
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if s.pty {
		return s.terminalInput(ctx, []byte{0x04})
	}
	c.closeInput()
	return nil
}

// breakSession ends the session because envd cannot go on with it.
func (s *Session) breakSession(why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.breakLocked(why)
}

func (s *Session) breakLocked(why string) {
	if s.ended != nil {
		return
	}
	if s.closing == "" {
		s.closing = why
	}
	s.log.Warn("ending a shell session", "session", s.id, "pid", s.proc.Pid(), "why", why)
	tree := descendants(int(s.proc.Pid()))
	s.proc.Signal(syscall.SIGKILL)
	killTree(tree, syscall.SIGKILL)
}

// shellEnded ends the session once the shell exited and its output was all
// read: the command running and those waiting end with it.
func (s *Session) shellEnded() {
	ex, _ := s.proc.Exit()
	s.mu.Lock()
	msg := s.closing
	switch {
	case msg != "":
	case s.cur != nil:
		msg = "the command ended the session: " + ex.Status
	default:
		msg = "the shell ended: " + ex.Status
	}
	s.ended = &sessionEnd{exit: ex, message: msg}
	e := End{Reason: EndSessionEnded, ExitCode: ex.Code, Message: msg}
	if !ex.Exited {
		e.Signal = signalNumber(ex.Status)
	}
	if c := s.boot; c != nil {
		s.finishLocked(c, e)
	}
	if c := s.cur; c != nil {
		s.finishLocked(c, e)
	}
	for _, c := range s.queue {
		qe := e
		qe.Message = "the session ended before the command started: " + msg
		s.finishLocked(c, qe)
	}
	s.queue = nil
	s.cmdPipe.Close()
	s.ctlPipe.Close()
	s.changedLocked()
	s.mu.Unlock()
	<-s.ctlDone
	s.m.ended(s)
}

// close ends the session: SIGHUP to the shell's group (its session, on a
// terminal), as when a terminal closes; SIGKILL after closeGrace to it and
// to every process of its tree. It returns once the session has ended.
func (s *Session) close(why string) {
	s.mu.Lock()
	if s.ended != nil {
		s.mu.Unlock()
		return
	}
	if s.closing == "" {
		s.closing = why
	}
	tree := descendants(int(s.proc.Pid()))
	s.changedLocked()
	s.mu.Unlock()
	s.proc.Signal(syscall.SIGHUP)
	t := s.m.clock.NewTimer(closeGrace, "shell", "close")
	defer t.Stop("shell", "close")
	select {
	case <-s.demuxDone:
	case <-t.C:
		s.proc.Signal(syscall.SIGKILL)
		<-s.demuxDone
	}
	// What left the group (setsid) goes too; Close answers once it has.
	killTree(tree, syscall.SIGKILL)
	waitGone(tree, closeGrace)
}

// closeGrace is how long a closed session's processes get to end on
// SIGHUP.
const closeGrace = 2 * time.Second

// signalNumber is the number of the signal a wait status string such as
// "signal: killed" names; 0 if none.
func signalNumber(status string) int {
	for n := 1; n < 65; n++ {
		if status == "signal: "+syscall.Signal(n).String() {
			return n
		}
	}
	return 0
}

// signalName is n's name (SIGINT), or its number.
func signalName(n int) string {
	if name := unix.SignalName(syscall.Signal(n)); name != "" {
		return name
	}
	return strconv.Itoa(n)
}

func itoa(n int) string { return strconv.Itoa(n) }
