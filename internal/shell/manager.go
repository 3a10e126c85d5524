package shell

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/process"
)

// Defaults of Options.
const (
	DefaultMaxSessions    = 64
	DefaultMaxQueued      = 64
	DefaultHistory        = 16
	DefaultInterruptGrace = 2 * time.Second
	DefaultStartTimeout   = 30 * time.Second
	DefaultRetention      = time.Minute
)

// Options configures a Manager. Every field but Processes may be left zero.
type Options struct {
	// Processes starts the shells: each is a process of it, owned by the
	// session's user, tagged "envd-shell:ID", with its output log, its
	// cgroup, its strict-mode visibility and its live upgrade.
	Processes *process.Manager
	Logger    *slog.Logger // zero: slog.Default()
	// Clock runs the timeouts and the interrupts' grace periods. Zero: the
	// real clock.
	Clock quartz.Clock
	// MaxSessions bounds the sessions alive at once. Zero:
	// DefaultMaxSessions.
	MaxSessions int
	// MaxQueued bounds the commands waiting in one session. Zero:
	// DefaultMaxQueued.
	MaxQueued int
	// History is how many ended commands of a session Connect still finds
	// by id. Zero: DefaultHistory.
	History int
	// InterruptGrace is how long an interrupted command gets to end on
	// SIGINT before what it started is killed. Zero: DefaultInterruptGrace.
	InterruptGrace time.Duration
	// StartTimeout bounds the wait for a new shell to be ready. Zero:
	// DefaultStartTimeout.
	StartTimeout time.Duration
	// Retention is how long an ended session still answers (its end, and
	// its commands' Connect) before it is forgotten. Zero:
	// DefaultRetention.
	Retention time.Duration
	// Shell is the bash to run, looked up in the user's PATH as a process
	// is. Zero: "bash".
	Shell string
}

// Manager holds the sessions.
type Manager struct {
	opts  Options
	log   *slog.Logger
	clock quartz.Clock

	mu       sync.Mutex
	sessions map[string]*Session // guarded by mu: alive, and ended within Retention
	creating int                 // guarded by mu: Creates in flight, counted against MaxSessions
	closed   bool                // guarded by mu: Shutdown began
	parking  bool                // guarded by mu: a handover began
	dir      *privateDir         // guarded by mu; made by the first session
}

// New returns a Manager without sessions.
func New(o Options) *Manager {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = quartz.NewReal()
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.MaxQueued <= 0 {
		o.MaxQueued = DefaultMaxQueued
	}
	if o.History <= 0 {
		o.History = DefaultHistory
	}
	if o.InterruptGrace <= 0 {
		o.InterruptGrace = DefaultInterruptGrace
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.Shell == "" {
		o.Shell = "bash"
	}
	return &Manager{opts: o, log: o.Logger, clock: o.Clock, sessions: map[string]*Session{}}
}

// StrictUsers reports the process manager's: whether a user other than
// root sees only its own sessions.
func (m *Manager) StrictUsers() bool { return m.opts.Processes.StrictUsers() }

// Clock is Options.Clock, which also paces an adapter's keepalives.
func (m *Manager) Clock() quartz.Clock { return m.clock }

// sees tells whether as may find s: always, but in strict mode, where a
// user other than root finds only its own sessions. Nil as is envd itself.
func (m *Manager) sees(as *identity.User, s *Session) bool {
	return !m.StrictUsers() || as == nil || as.UID == 0 || s.user.UID == as.UID
}

// privateDir is the directory of the shells' files, made at first use.
func (m *Manager) privateDir() (*privateDir, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dir == nil {
		d, err := createDir(m.log)
		if err != nil {
			return nil, fmt.Errorf("shell sessions: %w", err)
		}
		m.dir = d
	}
	return m.dir, nil
}

// CreateOptions says what session to create.
type CreateOptions struct {
	// User runs the shell and owns the session.
	User *identity.User
	// As is the requesting user: in strict mode, a user other than root
	// may create sessions only as itself. Nil: envd itself.
	As *identity.User
	// Dir is the shell's first working directory, resolved (absolute);
	// checked with User's rights.
	Dir string
	// Cwd is the cwd as the request gave it, for the process's List.
	Cwd *string
	// Env is set in the shell, exported, on top of the user's environment.
	Env map[string]string
	// PTY gives the shell a terminal of this size; nil: pipes.
	PTY *process.Size
	Tag string
}

// Create starts a session and returns it once its shell is ready for a
// command.
func (m *Manager) Create(o CreateOptions) (*Session, error) {
	if o.User == nil {
		return nil, errorf(ErrUnauthorized, "no user to run the shell as")
	}
	if m.StrictUsers() && o.As != nil && o.As.UID != 0 && o.As.UID != o.User.UID {
		return nil, errorf(ErrPermission, "user '%s' may not start a shell as user '%s': without root, a session runs as its requester", o.As.Name, o.User.Name)
	}
	if err := m.beginCreate(); err != nil {
		return nil, err
	}
	s, err := m.create(o)
	m.mu.Lock()
	m.creating--
	if err == nil {
		m.sessions[s.id] = s
	}
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	m.log.Debug("shell session created", "session", s.id, "pid", s.proc.Pid(), "user", s.user.Name, "pty", s.pty)
	return s, nil
}

// beginCreate counts a Create in, or refuses it.
func (m *Manager) beginCreate() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		return errorf(ErrUnavailable, "envd is shutting down: no new sessions")
	case m.parking:
		return errorf(ErrUnavailable, "envd is being upgraded: create the session again once it answers (in a few seconds)")
	}
	alive := m.creating
	for _, s := range m.sessions {
		if !s.endedNow() {
			alive++
		}
	}
	if alive >= m.opts.MaxSessions {
		return errorf(ErrExhausted, "%d sessions are open, the most envd holds: close one first", alive)
	}
	m.creating++
	return nil
}

func (s *Session) endedNow() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended != nil
}

// create starts the shell and waits for it to be ready.
func (m *Manager) create(o CreateOptions) (*Session, error) {
	dir, err := m.privateDir()
	if err != nil {
		return nil, err
	}
	cmdName, cmdPipe, err := dir.fifo("p", o.User)
	if err != nil {
		return nil, err
	}
	ctlName, ctlPipe, err := dir.fifo("p", o.User)
	if err != nil {
		cmdPipe.Close()
		dir.unlink(cmdName)
		return nil, err
	}
	// The shell opens both as it starts; then they need no name.
	defer dir.unlink(cmdName)
	defer dir.unlink(ctlName)
	s := m.newSession(newID(), o.Tag, o.User, o.PTY != nil, m.clock.Now())
	s.cmdPipe, s.ctlPipe = cmdPipe, ctlPipe
	tag := processTag(s.id)
	p, rd, err := m.opts.Processes.StartFollowed(process.StartOptions{
		Config: process.Config{Cmd: m.opts.Shell, Args: shellArgs(dir.pathOf(cmdName), dir.pathOf(ctlName)), Envs: o.Env, Cwd: o.Cwd},
		Tag:    &tag,
		User:   o.User,
		Dir:    o.Dir,
		PTY:    o.PTY,
	})
	if err != nil {
		cmdPipe.Close()
		ctlPipe.Close()
		return nil, processError(err)
	}
	s.proc = p
	s.boot = &Command{s: s, state: running, nonce: newNonce(), done: make(chan struct{})}
	s.boot.startedAt = m.clock.Now()
	s.run(rd)
	s.mu.Lock()
	err = s.writeLocked(bootstrap(s.boot.nonce, s.pty))
	s.mu.Unlock()
	if err != nil {
		s.breakSession(fmt.Sprintf("envd cannot write to the new shell (%v)", err))
	}
	t := m.clock.NewTimer(m.opts.StartTimeout, "shell", "start")
	defer t.Stop("shell", "start")
	select {
	case <-s.readyc:
	case <-t.C:
		s.breakSession(fmt.Sprintf("the shell was not ready within %v", m.opts.StartTimeout))
		<-s.readyc
	}
	s.mu.Lock()
	end := s.ended
	s.mu.Unlock()
	if end != nil {
		<-s.demuxDone
		return nil, errorf(ErrInvalid, "the shell did not start: %s%s", end.message, startOutput(p))
	}
	return s, nil
}

// processTag is the process tag of a session's shell.
func processTag(id string) string { return "envd-shell:" + id }

// newSession is a session not started yet.
func (m *Manager) newSession(id, tag string, u *identity.User, pty bool, created time.Time) *Session {
	return &Session{
		m: m, id: id, tag: tag, user: u, pty: pty, created: created,
		log:       m.log,
		demuxStop: make(chan struct{}),
		demuxDone: make(chan struct{}),
		ctlDone:   make(chan struct{}),
		readyc:    make(chan struct{}),
		byID:      map[string]*Command{},
	}
}

// run starts the session's goroutines: the demux, reading the shell's
// output with rd, and the control reader.
func (s *Session) run(rd *process.Reader) {
	go s.demux(rd)
	go s.readControl()
}

// startOutput is what a shell that did not start printed (its last 1 KiB),
// for the error.
func startOutput(p *process.Process) string {
	var out []byte
	c := p.Output()
	for {
		recs, err := c.Read()
		for _, r := range recs {
			out = append(out, r.Data...)
		}
		if err != nil || len(recs) == 0 {
			break
		}
	}
	if len(out) > 1024 {
		out = out[len(out)-1024:]
	}
	if len(out) == 0 {
		return ""
	}
	return fmt.Sprintf("; it printed: %q", out)
}

// processError is a process manager's error as this package's.
func processError(err error) error {
	var pe *process.Error
	if !errors.As(err, &pe) {
		return err
	}
	kinds := map[error]error{
		process.ErrInvalid:      ErrInvalid,
		process.ErrPermission:   ErrPermission,
		process.ErrUnavailable:  ErrUnavailable,
		process.ErrExhausted:    ErrExhausted,
		process.ErrUnauthorized: ErrUnauthorized,
		process.ErrNotFound:     ErrNotFound,
		process.ErrWrongState:   ErrEnded,
	}
	for pk, k := range kinds {
		if errors.Is(err, pk) {
			return &Error{Kind: k, Msg: pe.Msg, Cause: err}
		}
	}
	return err
}

// Get finds a session as may see: alive, or ended within Retention.
func (m *Manager) Get(id string, as *identity.User) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.sessions[id]; s != nil && m.sees(as, s) {
		return s, nil
	}
	return nil, errorf(ErrNotFound, "session %q not found", id)
}

// List returns the sessions alive that as may see, oldest first.
func (m *Manager) List(as *identity.User) []*Session {
	m.mu.Lock()
	all := slices.Collect(maps.Values(m.sessions))
	m.mu.Unlock()
	var out []*Session
	for _, s := range all {
		if m.sees(as, s) && !s.endedNow() {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *Session) int { return a.created.Compare(b.created) })
	return out
}

// Close ends the session and forgets it. It returns once the shell and
// its process tree are gone.
func (m *Manager) Close(id string, as *identity.User) error {
	s, err := m.Get(id, as)
	if err != nil {
		return err
	}
	s.close("the session was closed")
	m.mu.Lock()
	if m.sessions[id] == s {
		delete(m.sessions, id)
	}
	m.mu.Unlock()
	return nil
}

// ended forgets s after Retention.
func (m *Manager) ended(s *Session) {
	m.log.Debug("shell session ended", "session", s.id, "pid", s.proc.Pid())
	time.AfterFunc(m.opts.Retention, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.sessions[s.id] == s {
			delete(m.sessions, s.id)
		}
	})
}

// Shutdown refuses new sessions and sends each shell's process group
// SIGHUP, as closing its terminal would; the process manager's shutdown
// then ends what is left (an interactive shell ignores SIGTERM).
func (m *Manager) Shutdown() {
	m.mu.Lock()
	m.closed = true
	ss := slices.Collect(maps.Values(m.sessions))
	m.mu.Unlock()
	for _, s := range ss {
		s.mu.Lock()
		alive := s.ended == nil
		if alive && s.closing == "" {
			s.closing = "envd is shutting down"
		}
		s.mu.Unlock()
		if alive {
			s.proc.Signal(syscall.SIGHUP)
		}
	}
}

// Cleanup removes the shells' directory, once nothing uses it. A nil
// Manager has none.
func (m *Manager) Cleanup() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dir.remove()
	m.dir = nil
}
