package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coder/quartz"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/cgroup"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/outbuf"
	"github.com/envd-dev/envd/internal/reaper"
)

// Options configures a Manager. Every field may be left zero.
type Options struct {
	Logger *slog.Logger // zero: slog.Default()
	// Env returns the daemon-wide variables every process gets on top of the
	// user's login environment (those set by /init). Zero: none.
	Env func() map[string]string
	// LogSize is how many bytes of output each process retains for readers
	// that come late or fall behind. Zero: 4 MiB.
	LogSize int
	// Retention is how long an exited process stays reachable by Connect.
	// Zero: 30 s, as upstream.
	Retention time.Duration
	// ReaderGrace is how long a process's output waits for a following
	// reader (Process.Follow) that reads nothing before leaving it behind
	// (see flow.go). Zero: 2 s.
	ReaderGrace time.Duration
	// Clock measures ReaderGrace and the streams' keepalives, and runs the
	// lifetime timeouts and the grace a killed process's group gets to be
	// gone. Zero: the real clock.
	Clock quartz.Clock
	// RootEnv, if set, replaces Env for processes that run as root. In
	// strict mode the daemon leaves out what the sandbox user can write
	// (the shared package environment): root must not run code from it.
	RootEnv func() map[string]string
	// StrictUsers makes each process its starter's: a requesting user other
	// than root finds (Get, Find, ListAs) only the processes started as
	// itself, and the others look exactly like processes that do not exist.
	// Zero: every caller finds every process, as upstream.
	StrictUsers bool
	// Cgroups, when set, gives every process a cgroup of its own, under
	// cgroup.User (pipes) or cgroup.PTY (terminals), joined before the
	// program runs: the workload freezes as one, and an end by the OOM
	// killer says so (EndOOMKilled). Nil: no cgroups.
	Cgroups *cgroup.Manager
	// OOMScoreAdj, when not zero, is every process's oom_score_adj, set
	// right after it starts (what it forks before that inherits envd's).
	OOMScoreAdj int
}

// StartOptions says what to run and how.
type StartOptions struct {
	Config Config
	Tag    *string
	// User runs the process, and owns it (see Options.StrictUsers).
	User *identity.User
	// Dir is the resolved working directory: a directory User may enter,
	// which Start checks with User's own rights.
	Dir   string
	PTY   *Size
	Stdin bool
	// Timeout, when positive, is the process's lifetime: it is killed with
	// SIGKILL when it runs out, whoever is or is not watching.
	Timeout time.Duration
}

// Manager spawns processes and finds them again.
type Manager struct {
	opts   Options
	logger *slog.Logger

	mu     sync.Mutex
	live   map[uint32]*Process // guarded by mu
	exited map[uint32]*Process // guarded by mu; dropped after Retention
	closed bool                // guarded by mu
	seq    uint64              // guarded by mu: the processes registered so far

	ho managerHandover // a live upgrade's (handover.go)
}

// NewManager returns an empty Manager.
func NewManager(opts Options) *Manager {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Env == nil {
		opts.Env = func() map[string]string { return nil }
	}
	if opts.LogSize <= 0 {
		opts.LogSize = 4 << 20
	}
	if opts.Retention <= 0 {
		opts.Retention = 30 * time.Second
	}
	if opts.ReaderGrace <= 0 {
		opts.ReaderGrace = 2 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = quartz.NewReal()
	}
	return &Manager{
		opts:   opts,
		logger: opts.Logger,
		live:   map[uint32]*Process{},
		exited: map[uint32]*Process{},
	}
}

// Start spawns a process. It returns once the program is exec'd; its output
// is retained from the first byte. Its steps: validate the request, build
// the command, give it its stdio, spawn it, register it, start its pumps.
func (m *Manager) Start(o StartOptions) (*Process, error) {
	p, _, err := m.start(o, false)
	return p, err
}

// StartFollowed starts a process as Start does, with a Reader of its
// output that follows it from its first byte: registered before the
// process runs, so that the drains pace to it (Follow) from the start.
// (A Reader taken after Start returns may find the head of a fast
// program's output already evicted from the log, without a loss error:
// Follow starts at the oldest byte retained.) Close the Reader when done.
func (m *Manager) StartFollowed(o StartOptions) (*Process, *Reader, error) {
	return m.start(o, true)
}

func (m *Manager) start(o StartOptions, follow bool) (_ *Process, _ *Reader, err error) {
	if err := validate(o); err != nil {
		return nil, nil, err
	}
	// The cwd is checked (checkDir) only when the start fails: the child
	// changes to it as the user, and a start that works needs no answer
	// (the check runs on a thread of its own, made for the user: a cost
	// every start would pay).
	if err := m.beginStart(); err != nil {
		return nil, nil, err
	}
	defer m.endStart()
	cmd, err := m.command(o)
	if err != nil {
		return nil, nil, err
	}
	p := m.newProcess(o)
	var rd *Reader
	if follow {
		rd = p.Follow()
		defer func() {
			if err != nil { // the results are set: rd is this one still
				rd.Close()
			}
		}()
	}
	childEnds, err := p.attachStdio(cmd, o)
	if err != nil {
		return nil, nil, err
	}
	exitc, err := p.spawn(cmd, childEnds, o)
	if err != nil {
		return nil, nil, err
	}
	if m.opts.OOMScoreAdj != 0 {
		// Beside the start event rather than before it: what the child
		// forks before it has the value is looked at again anyway.
		go m.setOOMScore(p)
	}
	m.register(p)
	m.startPumps(p, exitc, o)
	m.logger.Debug("process started", "pid", p.pid, "cmd", o.Config.Cmd, "user", o.User.Name, "pty", o.PTY != nil)
	return p, rd, nil
}

// validate checks a request before anything is started.
func validate(o StartOptions) error {
	if o.User == nil {
		return errorf(ErrUnauthorized, "no user to run as")
	}
	if o.Config.Cmd == "" {
		return errorf(ErrInvalid, "cmd is empty: name the program to run, e.g. /bin/bash")
	}
	if strings.ContainsRune(o.Config.Cmd, 0) {
		return errorf(ErrInvalid, "cmd %q contains a NUL byte", o.Config.Cmd)
	}
	for i, a := range o.Config.Args {
		if strings.ContainsRune(a, 0) {
			return errorf(ErrInvalid, "args[%d] %q contains a NUL byte", i, a)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(o.Config.Envs)) {
		switch {
		case k == "":
			return errorf(ErrInvalid, "envs: an environment variable name is empty")
		case strings.ContainsRune(k, '='):
			return errorf(ErrInvalid, "envs: environment variable name %q contains '=': a name cannot hold '=' (put it in the value)", k)
		case strings.ContainsRune(k, 0):
			return errorf(ErrInvalid, "envs: environment variable name %q contains a NUL byte", k)
		case strings.ContainsRune(o.Config.Envs[k], 0):
			return errorf(ErrInvalid, "envs: the value of environment variable %q contains a NUL byte", k)
		}
	}
	if o.PTY != nil && (o.PTY.Cols == 0 || o.PTY.Rows == 0) {
		return errorf(ErrInvalid, "terminal size %dx%d: cols and rows must both be at least 1", o.PTY.Cols, o.PTY.Rows)
	}
	if o.Dir == "" {
		return errorf(ErrInvalid, "cwd is empty: name the directory to run in")
	}
	if strings.ContainsRune(o.Dir, 0) {
		return errorf(ErrInvalid, "cwd %q contains a NUL byte", o.Dir)
	}
	return nil
}

// serializeSignals sets p.signal and p.release so that they are
// serialized: a signal racing the end must find the process done, not
// released (an error that is neither). onRelease, if set, runs once as the
// process is released.
func (p *Process) serializeSignals(onRelease func()) {
	var mu sync.Mutex
	released := false // guarded by mu
	p.signal = func(s syscall.Signal) error {
		mu.Lock()
		defer mu.Unlock()
		if released || p.groupEnded() {
			return os.ErrProcessDone
		}
		return signalGroup(p.pid, p.tty != nil, s)
	}
	p.release = func() {
		mu.Lock()
		defer mu.Unlock()
		if !released && onRelease != nil {
			onRelease()
		}
		released = true
	}
}

// checkOpenLocked refuses new processes once Shutdown has begun.
func (m *Manager) checkOpenLocked() error {
	if m.closed {
		return errorf(ErrUnavailable, "envd is shutting down: no new processes")
	}
	return nil
}

// command builds the command: the program, its cwd, environment and user,
// in a process group of its own (a session, on a terminal) so that signals
// reach everything it starts.
func (m *Manager) command(o StartOptions) (*exec.Cmd, error) {
	env := m.env(o)
	path, err := lookPath(o.Config.Cmd, env, o.User)
	if err != nil {
		return nil, errorf(ErrInvalid, "%s: %v", o.Config.Cmd, err)
	}
	cmd := exec.Command(path, o.Config.Args...)
	cmd.Args[0] = o.Config.Cmd // argv[0] as named, as execvp gives it
	cmd.Dir = o.Dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: o.User.Credential()}
	if o.PTY != nil {
		// A new session with the terminal as its controlling tty: the shell
		// gets job control, and SIGHUP reaches it when the master closes.
		cmd.SysProcAttr.Setsid = true
		cmd.SysProcAttr.Setctty = true
	} else {
		cmd.SysProcAttr.Setpgid = true
	}
	return cmd, nil
}

func (m *Manager) newProcess(o StartOptions) *Process {
	return m.process(o.Tag, o.User.UID, o.Config, newLog(m.opts))
}

// process is a Process with its output in log, not started (no pid yet):
// what a start and a live upgrade's adoption (handover.go) have in common.
func (m *Manager) process(tag *string, owner uint32, config Config, log *outbuf.Log) *Process {
	p := &Process{
		tag:     tag,
		owner:   owner,
		config:  config,
		log:     log,
		done:    make(chan struct{}),
		logSize: m.opts.LogSize,
		clock:   m.opts.Clock,
		killc:   make(chan struct{}),
		inSem:   make(chan struct{}, 1),
		cgroups: m.opts.Cgroups,
		logger:  m.logger,
	}
	p.startPacing()
	return p
}

// attachStdio gives cmd a terminal or pipes; it returns the child's ends,
// which spawn closes once the child has its copies.
func (p *Process) attachStdio(cmd *exec.Cmd, o StartOptions) (childEnds []*os.File, err error) {
	if o.PTY != nil {
		master, tty, err := openPTY(*o.PTY)
		if err != nil {
			return nil, spawnError(err, "open terminal")
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		p.tty = master
		p.outputs = []*os.File{master}
		return []*os.File{tty}, nil
	}
	outR, outW, err := outputPipe()
	if err != nil {
		return nil, spawnError(err, "create stdout pipe")
	}
	errR, errW, err := outputPipe()
	if err != nil {
		closeAll(outR, outW)
		return nil, spawnError(err, "create stderr pipe")
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	p.outputs = []*os.File{outR, errR}
	childEnds = []*os.File{outW, errW}
	if o.Stdin {
		inW, inR, err := childPipe(true)
		if err != nil {
			closeAll(append(p.outputs, childEnds...)...)
			return nil, spawnError(err, "create stdin pipe")
		}
		cmd.Stdin = inR
		p.stdin = inW
		childEnds = append(childEnds, inR)
	}
	return childEnds, nil
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// spawn forks and execs cmd through the reaper.
func (p *Process) spawn(cmd *exec.Cmd, childEnds []*os.File, o StartOptions) (<-chan reaper.Exit, error) {
	exitc, err := p.startChild(cmd, o)
	// The child has its own copies now (or failed to start): ours would keep
	// the pipes open and hide its EOF.
	closeAll(childEnds...)
	if err != nil {
		closeAll(p.outputs...)
		if p.stdin != nil {
			p.stdin.Close()
		}
		if errors.Is(err, cgroup.ErrFrozen) {
			return nil, errorf(ErrUnavailable, "start %s: %v", o.Config.Cmd, err)
		}
		if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) ||
			errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.ENAMETOOLONG) {
			// exec reports a cwd it cannot change to as "fork/exec
			// <cmd>: permission denied" (or no such file): name the
			// directory instead, if it is the cause.
			if derr := checkDir(o.User, o.Dir); derr != nil {
				return nil, derr
			}
		}
		return nil, spawnError(errors.Unwrap(err), "start %s", o.Config.Cmd)
	}
	p.pid = uint32(cmd.Process.Pid)
	p.serializeSignals(func() { cmd.Process.Release() })
	return exitc, nil
}

// setOOMScore gives p the workload's oom_score_adj, and whatever p forked
// before it had it (they inherited envd's, the OOM killer's last pick):
// the members of p's cgroup, looked at again until none is new. A process
// forked after its parent was set inherits the value. One forked while it
// was set can have copied the old value and still be on its way into the
// cgroup: the members are looked at again ten times, at doubling intervals
// over about a second (a loaded machine left a shell's child out when the
// last look was 31 ms after the start, twice). It runs on a goroutine of
// its own, beside the start event, and ends within about a second, or
// once p's life ended: its cgroup may then be handed to another process.
func (m *Manager) setOOMScore(p *Process) {
	if err := cgroup.SetOOMScoreAdj(int(p.pid), m.opts.OOMScoreAdj); err != nil {
		m.logger.Debug("cannot set a process's oom_score_adj", "pid", p.pid, "error", err)
		return
	}
	if p.cg == nil {
		return
	}
	set := map[int]bool{int(p.pid): true}
	m.setNewMembers(p, set)
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	for d := time.Millisecond; d <= 512*time.Millisecond; d *= 2 {
		t.Reset(d)
		select {
		case <-t.C:
		case <-p.done:
			return
		}
		if !m.setNewMembers(p, set) {
			return
		}
	}
}

// setNewMembers gives the members of p's cgroup not in set the workload's
// oom_score_adj, looking again until none is new, and adds them to set.
// It reports whether p's cgroup could still be read.
func (m *Manager) setNewMembers(p *Process, set map[int]bool) bool {
	for range 8 {
		pids, err := p.cg.Procs()
		if err != nil {
			return false // p's cgroup is gone: so is everything in it
		}
		fresh := 0
		for _, pid := range pids {
			if !set[pid] {
				set[pid] = true
				fresh++
				_ = cgroup.SetOOMScoreAdj(pid, m.opts.OOMScoreAdj) // it may have exited
			}
		}
		if fresh == 0 {
			break
		}
	}
	return true
}

// startChild starts cmd through the reaper, in a cgroup of its own when
// cgroups are on. A cgroup that cannot be made leaves the process without
// one (logged), rather than refusing it.
func (p *Process) startChild(cmd *exec.Cmd, o StartOptions) (<-chan reaper.Exit, error) {
	if p.cgroups == nil {
		return reaper.Start(cmd)
	}
	parent := cgroup.User
	if o.PTY != nil {
		parent = cgroup.PTY
	}
	g, err := p.cgroups.Group(parent).NewChild()
	if err != nil {
		p.logger.Warn("cannot make a process's cgroup: starting it without one", "error", err)
		return reaper.Start(cmd)
	}
	var exitc <-chan reaper.Exit
	err = g.Start(cmd, func() error {
		var err error
		exitc, err = reaper.Start(cmd)
		return err
	})
	if errors.Is(err, cgroup.ErrJoin) {
		g.Remove()
		p.logger.Warn("cannot place a process in its cgroup: starting it without one", "error", err)
		if cmd.SysProcAttr != nil {
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = false, 0
		}
		return reaper.Start(cmd)
	}
	if err != nil {
		g.Remove()
		return nil, err
	}
	p.cg = g
	return exitc, nil
}

// register makes p findable.
func (m *Manager) register(p *Process) {
	m.mu.Lock()
	m.seq++
	p.seq = m.seq
	m.live[p.pid] = p
	delete(m.exited, p.pid)
	m.mu.Unlock()
}

// startPumps starts what runs for the process's life: the lifetime timer and
// the goroutine that drains its output and waits for its end.
func (m *Manager) startPumps(p *Process, exitc <-chan reaper.Exit, o StartOptions) {
	var timer *quartz.Timer
	if o.Timeout > 0 {
		p.ho.deadline = m.opts.Clock.Now().Add(o.Timeout)
		timer = m.opts.Clock.AfterFunc(o.Timeout, func() {
			m.logger.Info("process lifetime ran out: killing its process group", "pid", p.pid, "timeout", o.Timeout)
			p.signalFor(syscall.SIGKILL, EndTimedOut)
		}, "process", "timeout")
	}
	go p.wait(exitc, func() {
		if timer != nil {
			timer.Stop()
		}
		p.release()
		m.retire(p)
	})
}

// Terminal types: a pseudo-terminal speaks xterm's language (the SDKs'
// terminals are xterm.js); pipes are no terminal at all, and TERM=dumb
// says so to the programs that ask (tput, less, progress bars) rather than
// leaving them to fail on an unset TERM.
const (
	ptyTerm  = "xterm-256color"
	pipeTerm = "dumb"
)

// env is the child's environment: the user's login environment and TERM,
// then the daemon's variables, then the request's; a later value for a
// name wins.
func (m *Manager) env(o StartOptions) []string {
	env := o.User.LoginEnv()
	if o.PTY != nil {
		env = append(env, "TERM="+ptyTerm)
	} else {
		env = append(env, "TERM="+pipeTerm)
	}
	base := m.opts.Env
	if o.User.UID == 0 && m.opts.RootEnv != nil {
		base = m.opts.RootEnv
	}
	for _, vars := range []map[string]string{base(), o.Config.Envs} {
		for _, k := range slices.Sorted(maps.Keys(vars)) {
			env = append(env, k+"="+vars[k])
		}
	}
	return env // exec.Cmd keeps the last value of a duplicated name
}

// openPTY opens a terminal pair with the given size. The master is made
// non-blocking so reads go through Go's poller: a read can then be cut short
// by a deadline, and a blocked read does not hold an OS thread.
func openPTY(s Size) (master, tty *os.File, err error) {
	m, t, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	if err := pty.Setsize(m, &pty.Winsize{Cols: s.Cols, Rows: s.Rows}); err != nil {
		m.Close()
		t.Close()
		return nil, nil, err
	}
	fd, err := unix.Dup(int(m.Fd()))
	m.Close()
	if err != nil {
		t.Close()
		return nil, nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		t.Close()
		return nil, nil, err
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), t, nil
}

// outputPipe is a pipe for a child's stdout or stderr, grown to outputPipeSize
// so a program that prints in bulk fills it in few, large chunks: fewer
// syscalls and fewer, bigger messages for the readers. Growing it is best
// effort; the default 64 KiB works, only slower.
func outputPipe() (r, w *os.File, err error) {
	r, w, err = childPipe(false)
	if err != nil {
		return nil, nil, err
	}
	if rc, err := r.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			unix.FcntlInt(fd, unix.F_SETPIPE_SZ, outputPipeSize)
		})
	}
	return r, w, nil
}

// childPipe is a pipe between envd and a child that reads from it
// (childReads) or writes to it. envd's end is nonblocking, in Go's poller;
// the child's end stays blocking and out of the poller. os.Pipe puts both
// in, and exec then takes the child's out again: five syscalls more for
// each pipe of each start.
func childPipe(childReads bool) (ours, theirs *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	o, t := p[0], p[1]
	if childReads {
		o, t = p[1], p[0]
	}
	if err := unix.SetNonblock(o, true); err != nil {
		unix.Close(o)
		unix.Close(t)
		return nil, nil, os.NewSyscallError("fcntl", err)
	}
	return os.NewFile(uintptr(o), "|envd"), os.NewFile(uintptr(t), "|child"), nil
}

// retire moves an ended process from live to exited, where Connect still
// finds it for a while.
func (m *Manager) retire(p *Process) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.live[p.pid] == p {
		delete(m.live, p.pid)
	}
	m.exited[p.pid] = p
	m.logger.Debug("process ended", "pid", p.pid, "status", p.exit.Status)
	m.forgetAfter(p, m.opts.Retention)
}

// forgetAfter drops the ended p from exited after d.
func (m *Manager) forgetAfter(p *Process, d time.Duration) {
	p.ho.forgetAt = time.Now().Add(d)
	time.AfterFunc(d, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.exited[p.pid] == p {
			delete(m.exited, p.pid)
		}
	})
}

// Selector picks a process by pid, or by tag when Tag is set, among those
// As may find.
type Selector struct {
	Pid uint32
	Tag *string
	// As is the requesting user. With Options.StrictUsers, a user other
	// than root finds only the processes started as itself; the others
	// answer exactly as processes that do not exist. Nil: envd itself,
	// which finds every process.
	As *identity.User
}

func (s Selector) String() string {
	if s.Tag != nil {
		return fmt.Sprintf("tag '%s'", *s.Tag)
	}
	return fmt.Sprintf("pid %d", s.Pid)
}

// Get finds a live process.
func (m *Manager) Get(s Selector) (*Process, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.find(m.live, s); p != nil {
		return p, nil
	}
	if p := m.find(m.exited, s); p != nil {
		return nil, errorf(ErrNotFound, "process with %s has already exited (%s)", s, p.exit.Status)
	}
	return nil, errorf(ErrNotFound, "process with %s not found", s)
}

// Find finds a live process, or one that exited less than Retention ago.
func (m *Manager) Find(s Selector) (*Process, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.find(m.live, s); p != nil {
		return p, nil
	}
	if p := m.find(m.exited, s); p != nil {
		return p, nil
	}
	return nil, errorf(ErrNotFound, "process with %s not found", s)
}

// find picks among the processes s.As may find: by pid, or the newest with
// the tag (tags are not unique): the last registered, not the highest pid,
// as pids wrap around.
func (m *Manager) find(ps map[uint32]*Process, s Selector) *Process {
	if s.Tag == nil {
		if p := ps[s.Pid]; p != nil && m.sees(s.As, p) {
			return p
		}
		return nil
	}
	var best *Process
	for _, p := range ps {
		if p.tag != nil && *p.tag == *s.Tag && m.sees(s.As, p) && (best == nil || p.seq > best.seq) {
			best = p
		}
	}
	return best
}

// sees tells whether u may find p: always, but in strict mode, where a user
// other than root finds only its own processes. Nil u is envd itself.
func (m *Manager) sees(u *identity.User, p *Process) bool {
	return !m.opts.StrictUsers || u == nil || u.UID == 0 || p.owner == u.UID
}

// StrictUsers reports Options.StrictUsers: whether a request must name its
// user, and a user other than root finds only its own processes.
func (m *Manager) StrictUsers() bool { return m.opts.StrictUsers }

// Clock is Options.Clock, which also paces an adapter's keepalives on the
// processes' streams.
func (m *Manager) Clock() quartz.Clock { return m.opts.Clock }

// List returns every live process, by pid.
func (m *Manager) List() []*Process {
	return m.ListAs(nil)
}

// ListAs returns the live processes u may find (see Selector.As), by pid.
func (m *Manager) ListAs(u *identity.User) []*Process {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ps []*Process
	for _, p := range m.live {
		if m.sees(u, p) {
			ps = append(ps, p)
		}
	}
	slices.SortFunc(ps, func(a, b *Process) int { return int(a.pid) - int(b.pid) })
	return ps
}

// Shutdown refuses new processes, sends every live one SIGTERM, and SIGKILL
// to those still running when ctx ends. It returns when all have ended,
// with how many it had to kill.
func (m *Manager) Shutdown(ctx context.Context) (killed int) {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	ps := m.List()
	for _, p := range ps {
		// An interactive shell ignores SIGTERM; on a terminal, tell it the
		// terminal is going away, as closing a terminal window does.
		if p.IsPTY() {
			p.signalFor(syscall.SIGHUP, EndShutdown)
		}
		p.signalFor(syscall.SIGTERM, EndShutdown)
	}
	for _, p := range ps {
		select {
		case <-p.Done():
		case <-ctx.Done():
			p.signalFor(syscall.SIGKILL, EndShutdown)
			killed++
			<-p.Done()
		}
	}
	return killed
}
