package shell

import (
	"context"
	"fmt"
	"maps"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/process"
)

// A live upgrade (docs/upgrade.md) hands every session alive to the envd
// that replaces this one: the shell is a process, which the process
// manager hands over with its output log; a session adds its pipes, its
// commands (the one running, those waiting, the last ones that ended) and
// the demux's and control reader's positions. This side parks the sessions
// (Park, after the process manager's Park: no output comes any more, the
// demux reads what is in the log, the control reader stops) and describes
// them (Snapshot); the other takes them back (PrepareAdopt, then
// Adoption.Commit, after the process manager's Commit). What passes is a
// Snapshot, plain data: internal/daemon converts it to and from the
// handover record. Sessions that ended are not handed over.

// Snapshot is the sessions a live upgrade hands over.
type Snapshot struct {
	// Dir is the private directory's path; "" for none.
	Dir      string
	Sessions []SessionState
}

// NoFD is a descriptor a state does not have.
const NoFD = -1

// SessionState is one session as a live upgrade hands it over.
type SessionState struct {
	ID, Tag string
	User    identity.User
	PTY     bool
	Created time.Time
	Pid     uint32
	// CommandFD and ControlFD are envd's ends of the two pipes.
	CommandFD, ControlFD int
	Seq, Started         uint64
	Cwd                  string
	Env                  map[string]string
	Status               int
	Frontier             int64
	Closing              string
	Sigints, Synced      uint64
	// ControlFields and ControlPartial are the control reader's message in
	// progress.
	ControlFields  []string
	ControlPartial []byte
	Running        *CommandState
	Queued         []CommandState
	History        []CommandState
}

// CommandState is one command as a live upgrade hands it over.
type CommandState struct {
	ID, Text string
	Seq      uint64
	Stdin    bool
	// Timeout is the command's timeout (what is left of it, for the one
	// running); 0: none.
	Timeout time.Duration
	// File and InputPipe are names in the private directory.
	File, InputPipe string
	// InputFD is envd's end of the input pipe; NoFD when closed or none.
	InputFD     int
	InputLeft   []byte
	InputOpened bool
	InputClose  bool
	QueuedAt    time.Time
	StartedAt   time.Time
	Nonce       string
	Begun       bool
	StartOff    int64
	Outputs     []OutputState
	GotEnd      bool
	Status      int
	Interrupt   EndReason
	Interrupted time.Time
	Signaled    bool
	Rounds      int
	Old         []ProcState
	End         *End // for a command that ended
}

// OutputState is the demux's view of one output kind of a command.
type OutputState struct {
	Kind    uint8
	Found   bool
	EndOff  int64
	HeldOff int64
	Held    []byte
	Bytes   int64
}

// ProcState is a process, told apart from a later one with its pid by its
// start (clock ticks after boot).
type ProcState struct {
	Pid   int
	Start uint64
	Comm  string
}

// Park readies the sessions for a handover: no command starts, timers do
// nothing, and each session's demux reads what the shell's output log
// holds (the process manager's Park came first: nothing new comes) and
// stops, as does its control reader and the writers of input.
func (m *Manager) Park(ctx context.Context) error {
	m.mu.Lock()
	m.parking = true
	ss := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		ss = append(ss, s)
	}
	m.mu.Unlock()
	for _, s := range ss {
		s.mu.Lock()
		ended := s.ended != nil
		s.parked = true
		s.mu.Unlock()
		if ended {
			continue
		}
		close(s.demuxStop)
		s.ctlPipe.SetReadDeadline(time.Now())
		for _, ch := range []<-chan struct{}{s.demuxDone, s.ctlDone} {
			select {
			case <-ch:
			case <-ctx.Done():
				return fmt.Errorf("shell session %s did not stop: %w", s.id, ctx.Err())
			}
		}
		s.mu.Lock()
		for _, c := range s.commandsLocked() {
			if c.in != nil {
				c.parkedInput = c.in.park()
			}
		}
		s.mu.Unlock()
	}
	return nil
}

// commandsLocked are the session's commands: the one running, those
// waiting, and those that ended.
func (s *Session) commandsLocked() []*Command {
	var cs []*Command
	if s.cur != nil {
		cs = append(cs, s.cur)
	}
	cs = append(cs, s.queue...)
	return append(cs, s.history...)
}

// Snapshot describes the sessions alive for the handover record; call it
// after Park. fd gives a file's descriptor number without changing it
// (internal/handover.FD: the caller keeps every descriptor named open
// across the exec).
func (m *Manager) Snapshot(fd func(*os.File) int) Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	var snap Snapshot
	if m.dir != nil {
		snap.Dir = m.dir.path
	}
	now := m.clock.Now()
	for _, s := range m.sessions {
		s.mu.Lock()
		if s.ended == nil && s.boot == nil {
			snap.Sessions = append(snap.Sessions, s.stateLocked(fd, now))
		}
		s.mu.Unlock()
	}
	return snap
}

func (s *Session) stateLocked(fd func(*os.File) int, now time.Time) SessionState {
	st := SessionState{
		ID: s.id, Tag: s.tag, User: *s.user, PTY: s.pty, Created: s.created, Pid: s.proc.Pid(),
		CommandFD: fd(s.cmdPipe), ControlFD: fd(s.ctlPipe),
		Seq: s.seq, Started: s.started, Cwd: s.cwd, Env: maps.Clone(s.env), Status: s.status,
		Frontier: s.frontier, Closing: s.closing, Sigints: s.sigints, Synced: s.synced,
		ControlFields: append([]string(nil), s.parser.fields...), ControlPartial: append([]byte(nil), s.parser.buf...),
	}
	if s.cur != nil {
		c := s.cur.stateLocked(fd)
		if s.cur.timeout > 0 {
			c.Timeout = max(s.cur.timeout-now.Sub(s.cur.startedAt), 1)
		}
		st.Running = &c
	}
	for _, c := range s.queue {
		st.Queued = append(st.Queued, c.stateLocked(fd))
	}
	for _, c := range s.history {
		st.History = append(st.History, c.stateLocked(fd))
	}
	return st
}

func (c *Command) stateLocked(fd func(*os.File) int) CommandState {
	st := CommandState{
		ID: c.id, Text: c.text, Seq: c.seq, Stdin: c.stdin, Timeout: c.timeout,
		File: c.file, InputPipe: c.inName, InputFD: NoFD,
		QueuedAt: c.queuedAt, StartedAt: c.startedAt, Nonce: c.nonce, Begun: c.begun, StartOff: c.startOff,
		GotEnd: c.gotEnd, Status: c.status,
		Interrupt: c.interrupt, Interrupted: c.interruptedAt, Signaled: c.signaled, Rounds: c.rounds,
	}
	if c.in != nil {
		c.in.mu.Lock()
		if c.in.f != nil {
			st.InputFD = fd(c.in.f)
		}
		st.InputOpened, st.InputClose = c.in.opened, c.in.closeAsked
		c.in.mu.Unlock()
		st.InputLeft = c.parkedInput
	}
	for _, k := range c.s.kinds() {
		st.Outputs = append(st.Outputs, OutputState{Kind: k, Found: c.found[k], EndOff: c.endOff[k],
			HeldOff: c.held[k].off, Held: c.held[k].data, Bytes: c.bytes[k]})
	}
	for id, comm := range c.old {
		st.Old = append(st.Old, ProcState{Pid: id.pid, Start: id.start, Comm: comm})
	}
	if c.state == ended {
		e := c.end
		st.End = &e
	}
	return st
}

// Adoption is a checked set of sessions from a handover record, not yet
// adopted.
type Adoption struct {
	m *Manager
	s Snapshot
}

// PrepareAdopt checks the sessions a handover record describes: every
// descriptor open. It changes nothing. (The caller checks that each
// session's shell is a process the record hands over.)
func (m *Manager) PrepareAdopt(s Snapshot) (*Adoption, error) {
	for _, st := range s.Sessions {
		if s.Dir == "" {
			return nil, fmt.Errorf("shell session %s without the shells' directory", st.ID)
		}
		fds := map[string]int{"command pipe": st.CommandFD, "control pipe": st.ControlFD}
		for _, c := range append(append([]CommandState{}, st.Queued...), ptrSlice(st.Running)...) {
			if c.InputFD != NoFD {
				fds["input pipe of command "+c.ID] = c.InputFD
			}
		}
		for what, fd := range fds {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
				return nil, fmt.Errorf("shell session %s: its %s (fd %d) is not open: %w", st.ID, what, fd, err)
			}
		}
	}
	return &Adoption{m: m, s: s}, nil
}

func ptrSlice(c *CommandState) []CommandState {
	if c == nil {
		return nil
	}
	return []CommandState{*c}
}

// Commit adopts the sessions, once procs adopted the processes: from here
// on they are this envd's as if it had created them.
func (a *Adoption) Commit(procs *process.Manager) {
	m := a.m
	if a.s.Dir != "" {
		d, err := adoptDir(a.s.Dir)
		if err != nil {
			m.log.Warn("cannot take back the shells' directory: making a new one", "error", err)
		} else {
			m.mu.Lock()
			m.dir = d
			m.mu.Unlock()
		}
	}
	for _, st := range a.s.Sessions {
		p, err := procs.Find(process.Selector{Pid: st.Pid})
		if err != nil {
			m.log.Warn("a shell session's shell was not handed over: the session ends", "session", st.ID, "pid", st.Pid, "error", err)
			unix.Close(st.CommandFD)
			unix.Close(st.ControlFD)
			continue
		}
		s := m.adoptSession(st, p)
		m.mu.Lock()
		m.sessions[s.id] = s
		m.mu.Unlock()
		m.log.Debug("shell session adopted", "session", s.id, "pid", s.proc.Pid())
	}
}

func (m *Manager) adoptSession(st SessionState, p *process.Process) *Session {
	u := st.User
	s := m.newSession(st.ID, st.Tag, &u, st.PTY, st.Created)
	s.proc = p
	s.cmdPipe = os.NewFile(uintptr(st.CommandFD), "shell command pipe")
	s.ctlPipe = os.NewFile(uintptr(st.ControlFD), "shell control pipe")
	s.seq, s.started, s.cwd, s.env, s.status = st.Seq, st.Started, st.Cwd, st.Env, st.Status
	s.frontier, s.closing, s.sigints, s.synced = st.Frontier, st.Closing, st.Sigints, st.Synced
	s.parser.fields, s.parser.buf = st.ControlFields, st.ControlPartial
	close(s.readyc)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cs := range st.History {
		c := s.adoptCommand(cs)
		c.state, c.end = ended, *cs.End
		close(c.done)
		s.history = append(s.history, c)
	}
	for _, cs := range st.Queued {
		c := s.adoptCommand(cs)
		s.queue = append(s.queue, c)
		if c.in != nil {
			c.in.start(cs.InputLeft, c.stdin)
		}
	}
	if cs := st.Running; cs != nil {
		c := s.adoptCommand(*cs)
		c.state = running
		s.cur = c
		if c.in != nil && len(cs.InputLeft) > 0 {
			c.in.start(cs.InputLeft, c.stdin)
		}
		if c.timeout > 0 {
			c.timer = m.clock.AfterFunc(c.timeout, func() { s.timedOut(c) }, "shell", "timeout")
		}
		if c.interrupt != 0 {
			c.nextRound = m.clock.Now().Add(m.opts.InterruptGrace)
			c.escalate = m.clock.AfterFunc(interruptPoll, func() { s.escalateInterrupt(c) }, "shell", "interrupt")
		}
	}
	for _, c := range s.commandsLocked() {
		s.byID[c.id] = c
	}
	rd := p.Follow()
	go s.demux(rd)
	go s.readControl()
	s.startNextLocked()
	return s
}

func (s *Session) adoptCommand(cs CommandState) *Command {
	c := &Command{s: s, id: cs.ID, text: cs.Text, seq: cs.Seq, stdin: cs.Stdin, timeout: cs.Timeout,
		file: cs.File, inName: cs.InputPipe, done: make(chan struct{}),
		queuedAt: cs.QueuedAt, startedAt: cs.StartedAt, nonce: cs.Nonce, begun: cs.Begun, startOff: cs.StartOff,
		gotEnd: cs.GotEnd, status: cs.Status, interrupt: cs.Interrupt, interruptedAt: cs.Interrupted,
		signaled: cs.Signaled, rounds: cs.Rounds}
	if cs.InputFD != NoFD {
		c.in = newInput(os.NewFile(uintptr(cs.InputFD), "shell input pipe"))
		c.in.opened, c.in.closeAsked = cs.InputOpened, cs.InputClose
	} else if cs.InputPipe != "" {
		c.in = newInput(nil)
	}
	for _, o := range cs.Outputs {
		if int(o.Kind) < len(c.found) {
			c.found[o.Kind], c.endOff[o.Kind], c.bytes[o.Kind] = o.Found, o.EndOff, o.Bytes
			if len(o.Held) > 0 {
				c.held[o.Kind] = held{off: o.HeldOff, data: o.Held}
			}
		}
	}
	if len(cs.Old) > 0 {
		c.old = map[procID]string{}
		for _, p := range cs.Old {
			c.old[procID{p.Pid, p.Start}] = p.Comm
		}
	}
	return c
}
