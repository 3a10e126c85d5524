package process

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/outbuf"
	"github.com/envd-dev/envd/internal/reaper"
)

// A live upgrade (internal/handover, docs/upgrade.md) hands every process
// to the envd binary that replaces this one in the same pid. This side
// parks the manager (Park: no new process, every drain stopped between two
// reads, so what a process prints from then on waits in its pipe or
// terminal for the new envd) and describes every process (Snapshot); the
// other re-adopts them (PrepareAdopt, then Adoption.Commit) with their
// output logs, so a client that reconnects replays across the upgrade.
// What passes between the two is a Snapshot, plain data: internal/daemon
// writes it into the handover record and reads it back.
//
// The reaper must be paused (reaper.Pause) before Park: a process recorded
// as running must not be reaped by this envd, and a process whose end was
// reaped already is recorded with it.

// handoverState is a process's part in a handover.
type handoverState struct {
	mu      sync.Mutex
	parking bool          // guarded by mu
	resume  chan struct{} // guarded by mu; closed by unpark
	parked  int           // guarded by mu: drains stopped by Park
	ended   int           // guarded by mu: drains that returned
	changed chan struct{} // guarded by mu; closed and replaced on every change
	reaped  *reaper.Exit  // guarded by mu: the end wait received

	deadline time.Time // the lifetime's end; zero: none. Set before the process is registered.
	forgetAt time.Time // an ended process's end of retention; guarded by Manager.mu
}

// managerHandover is the manager's part.
type managerHandover struct {
	parking bool           // guarded by Manager.mu
	starts  sync.WaitGroup // Starts in flight
}

func (h *handoverState) changedLocked() {
	if h.changed != nil {
		close(h.changed)
		h.changed = nil
	}
}

func (h *handoverState) waitLocked() <-chan struct{} {
	if h.changed == nil {
		h.changed = make(chan struct{})
	}
	return h.changed
}

// beginStart admits a Start, or refuses it during shutdown or a handover.
func (m *Manager) beginStart() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkOpenLocked(); err != nil {
		return err
	}
	if m.ho.parking {
		return errorf(ErrUnavailable, "envd is being upgraded: start the process again once it answers (in a few seconds)")
	}
	m.ho.starts.Add(1)
	return nil
}

func (m *Manager) endStart() { m.ho.starts.Done() }

// parkDrain stops a drain whose read a Park cut short until Unpark, and
// tells it to read on then; false: err is not a Park's.
func (p *Process) parkDrain(f *os.File, err error) bool {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	h := &p.ho
	h.mu.Lock()
	if !h.parking {
		h.mu.Unlock()
		return false
	}
	resume := h.resume
	h.parked++
	h.changedLocked()
	h.mu.Unlock()
	<-resume
	h.mu.Lock()
	h.parked--
	h.mu.Unlock()
	f.SetReadDeadline(time.Time{})
	return true
}

func (p *Process) drainEnded() {
	p.ho.mu.Lock()
	p.ho.ended++
	p.ho.changedLocked()
	p.ho.mu.Unlock()
}

func (p *Process) noteReaped(ex reaper.Exit) {
	p.ho.mu.Lock()
	p.ho.reaped = &ex
	p.ho.changedLocked()
	p.ho.mu.Unlock()
}

// park cuts the drains' reads short and keeps them from reading on.
func (p *Process) park() {
	p.ho.mu.Lock()
	p.ho.parking = true
	p.ho.resume = make(chan struct{})
	p.ho.mu.Unlock()
	for _, f := range p.outputs {
		f.SetReadDeadline(time.Now())
	}
}

func (p *Process) unpark() {
	p.ho.mu.Lock()
	defer p.ho.mu.Unlock()
	if p.ho.parking {
		p.ho.parking = false
		close(p.ho.resume)
	}
}

// waitFor waits until cond holds (checked under p.ho.mu), p is done, or ctx
// ends.
func (p *Process) waitFor(ctx context.Context, cond func() bool) error {
	for {
		p.ho.mu.Lock()
		if cond() {
			p.ho.mu.Unlock()
			return nil
		}
		ch := p.ho.waitLocked()
		p.ho.mu.Unlock()
		select {
		case <-ch:
		case <-p.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Park readies the manager for a handover: it refuses new processes, waits
// for the Starts in flight, and stops every drain between two reads. The
// reaper must be paused. Unpark undoes it (the handover did not happen).
func (m *Manager) Park(ctx context.Context) error {
	m.mu.Lock()
	m.ho.parking = true
	m.mu.Unlock()
	started := make(chan struct{})
	go func() { m.ho.starts.Wait(); close(started) }()
	select {
	case <-started:
	case <-ctx.Done():
		return fmt.Errorf("processes being started did not finish: %w", ctx.Err())
	}
	ps := m.List()
	for _, p := range ps {
		p.park()
	}
	for _, p := range ps {
		n := len(p.outputs)
		if err := p.waitFor(ctx, func() bool { return p.ho.parked+p.ho.ended >= n }); err != nil {
			return fmt.Errorf("the output of process %d did not stop: %w", p.pid, err)
		}
		// An end handed over before the reaper paused reaches wait soon.
		if !reaper.Waiting(int(p.pid)) {
			if err := p.waitFor(ctx, func() bool { return p.ho.reaped != nil }); err != nil {
				return fmt.Errorf("the end of process %d was not received: %w", p.pid, err)
			}
		}
		// Ended and its output read to the end: it is closing its pipes
		// and publishing its end. Let it finish, so that it is handed over
		// as ended, not with descriptors being closed.
		if err := p.waitFor(ctx, func() bool { return p.ho.ended < n || p.ho.reaped == nil }); err != nil {
			return fmt.Errorf("process %d did not finish ending: %w", p.pid, err)
		}
	}
	return nil
}

// Unpark lets the drains read on and processes start again.
func (m *Manager) Unpark() {
	for _, p := range m.List() {
		p.unpark()
	}
	m.mu.Lock()
	m.ho.parking = false
	m.mu.Unlock()
}

// Snapshot is the processes a live upgrade hands over: Manager.Snapshot
// describes them, Manager.PrepareAdopt takes them in the new envd.
type Snapshot struct {
	// Live are the processes that had not ended, or whose end was reaped
	// while their output was still being read (LiveState.Reaped).
	Live []LiveState
	// Ended are the processes that ended and are still retained for late
	// readers.
	Ended []EndedState
}

// NoFD is a descriptor a LiveState does not have.
const NoFD = -1

// LiveState is a process that had not ended as a live upgrade hands it
// over.
type LiveState struct {
	Pid    uint32
	Tag    *string
	Owner  uint32 // the uid it was started as
	Config Config
	Output Output
	// The descriptors it is read and written through, by number: the read
	// ends of Stdout and Stderr and the write end of Stdin (NoFD when
	// disabled or closed), or PTY, its terminal's master. A process has a
	// PTY, or Stdout and Stderr; the others are NoFD.
	Stdout, Stderr, Stdin, PTY int
	// Timeout is what was left of its lifetime (StartOptions.Timeout);
	// zero: none.
	Timeout time.Duration
	// Cgroup is its cgroup's path; "" for none.
	Cgroup string
	// Killed: envd sent it SIGKILL or SIGTERM.
	Killed bool
	// Sent are the signals envd sent it, each with the reason of the end
	// it causes.
	Sent map[syscall.Signal]EndReason
	// Reaped is its end, when the old envd had reaped it already; nil: it
	// still runs.
	Reaped *reaper.Exit
}

// EndedState is a process that ended, as a live upgrade hands it over.
type EndedState struct {
	Pid    uint32
	Tag    *string
	Owner  uint32 // the uid it was started as
	Config Config
	PTY    bool // it ran on a terminal
	Exit   Exit
	Output Output
	// Retention is how much longer it stays reachable.
	Retention time.Duration
}

// Output is a process's retained output: its log's records, each at its
// offset in everything the process ever printed; Start is the offset of
// the oldest byte retained, End the offset after the newest.
type Output struct {
	Start, End int64
	Records    []outbuf.Record
}

func outputOf(l *outbuf.Log) Output {
	start, end, recs, _ := l.Snapshot()
	return Output{Start: start, End: end, Records: recs}
}

// Snapshot describes every process for the handover record: the running
// ones with the descriptors the new envd reads them through, and those
// that ended and are still retained. Call it after Park. fd gives a file's
// descriptor number without changing the file (internal/handover.FD: the
// caller keeps every descriptor named open across the exec).
func (m *Manager) Snapshot(fd func(*os.File) int) Snapshot {
	var s Snapshot
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.live {
		if _, done := p.Exit(); done {
			continue // in exited too, or about to be: see below
		}
		st := LiveState{Pid: p.pid, Tag: p.tag, Owner: p.owner, Config: p.config, Output: outputOf(p.log),
			Stdout: NoFD, Stderr: NoFD, Stdin: NoFD, PTY: NoFD}
		if p.tty != nil {
			st.PTY = fd(p.tty)
		} else {
			st.Stdout, st.Stderr = fd(p.outputs[0]), fd(p.outputs[1])
			p.inMu.Lock()
			if p.stdin != nil {
				st.Stdin = fd(p.stdin)
			}
			p.inMu.Unlock()
		}
		if !p.ho.deadline.IsZero() {
			st.Timeout = max(p.ho.deadline.Sub(m.opts.Clock.Now()), 1)
		}
		if p.cg != nil {
			st.Cgroup = p.cg.Path()
		}
		select {
		case <-p.killc:
			st.Killed = true
		default:
		}
		p.sentMu.Lock()
		if len(p.sent) > 0 {
			st.Sent = maps.Clone(p.sent)
		}
		p.sentMu.Unlock()
		p.ho.mu.Lock()
		if ex := p.ho.reaped; ex != nil {
			reaped := *ex
			st.Reaped = &reaped
		}
		p.ho.mu.Unlock()
		s.Live = append(s.Live, st)
	}
	for _, p := range m.exited {
		left := p.ho.forgetAt.Sub(now)
		if left <= 0 {
			continue
		}
		s.Ended = append(s.Ended, EndedState{Pid: p.pid, Tag: p.tag, Owner: p.owner, Config: p.config,
			PTY: p.tty != nil, Exit: p.exit, Output: outputOf(p.log), Retention: left})
	}
	return s
}

// Adoption is a checked set of processes from a handover record, not yet
// adopted: nothing is open or running until Commit.
type Adoption struct {
	m *Manager
	s Snapshot
}

// PrepareAdopt checks the processes a handover record describes: every
// descriptor open, every log whole. It changes nothing.
func (m *Manager) PrepareAdopt(s Snapshot) (*Adoption, error) {
	for _, r := range s.Live {
		if r.Pid == 0 {
			return nil, fmt.Errorf("a process without pid or command")
		}
		if (r.PTY == NoFD) == (r.Stdout == NoFD || r.Stderr == NoFD) {
			return nil, fmt.Errorf("process %d: want a terminal or stdout and stderr", r.Pid)
		}
		for what, fd := range map[string]int{"stdout": r.Stdout, "stderr": r.Stderr, "stdin": r.Stdin, "terminal": r.PTY} {
			if fd == NoFD {
				continue
			}
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
				return nil, fmt.Errorf("process %d: its %s (fd %d) is not open: %w", r.Pid, what, fd, err)
			}
		}
		if _, err := restoreLog(m.opts, r.Output); err != nil {
			return nil, fmt.Errorf("process %d: %w", r.Pid, err)
		}
		if r.Cgroup != "" && m.opts.Cgroups != nil {
			if _, err := m.opts.Cgroups.Adopt(r.Cgroup); err != nil {
				return nil, fmt.Errorf("process %d: %w", r.Pid, err)
			}
		}
	}
	for _, r := range s.Ended {
		if _, err := restoreLog(m.opts, r.Output); err != nil {
			return nil, fmt.Errorf("ended process %d: %w", r.Pid, err)
		}
	}
	return &Adoption{m: m, s: s}, nil
}

// Running lists the pids the reaper must adopt (reaper.Adopt): those whose
// end the old envd had not reaped.
func (a *Adoption) Running() []int {
	var pids []int
	for _, r := range a.s.Live {
		if r.Reaped == nil {
			pids = append(pids, int(r.Pid))
		}
	}
	return pids
}

func restoreLog(opts Options, o Output) (*outbuf.Log, error) {
	return outbuf.Restore(opts.LogSize, o.Start, o.End, o.Records, logOptions(opts)...)
}

// Commit adopts the processes: exits has the channel reaper.Adopt gave for
// each pid of Running. From here on they are this envd's as if it had
// started them.
func (a *Adoption) Commit(exits map[int]<-chan reaper.Exit) {
	m := a.m
	for _, r := range a.s.Live {
		p := m.adopted(r.Pid, r.Tag, r.Owner, r.Config, r.Output)
		file := func(fd int, name string) *os.File { return os.NewFile(uintptr(fd), name) }
		if r.PTY != NoFD {
			p.tty = file(r.PTY, "/dev/ptmx")
			p.outputs = []*os.File{p.tty}
		} else {
			p.outputs = []*os.File{file(r.Stdout, "stdout"), file(r.Stderr, "stderr")}
			if r.Stdin != NoFD {
				p.stdin = file(r.Stdin, "stdin")
			}
		}
		if r.Cgroup != "" && m.opts.Cgroups != nil {
			p.cg, _ = m.opts.Cgroups.Adopt(r.Cgroup)
		}
		if len(r.Sent) > 0 {
			p.sent = maps.Clone(r.Sent)
		}
		if r.Killed {
			p.killOnce.Do(func() { close(p.killc) })
		}
		p.serializeSignals(nil)
		exitc := exits[int(r.Pid)]
		if r.Reaped != nil {
			c := make(chan reaper.Exit, 1)
			c <- *r.Reaped
			exitc = c
		}
		m.register(p)
		m.startPumps(p, exitc, StartOptions{Timeout: r.Timeout})
		m.logger.Debug("process adopted", "pid", p.pid, "pty", p.tty != nil)
	}
	for _, r := range a.s.Ended {
		p := m.adopted(r.Pid, r.Tag, r.Owner, r.Config, r.Output)
		p.exit = r.Exit
		p.log.Close()
		close(p.done)
		m.mu.Lock()
		if _, running := m.live[p.pid]; !running {
			m.exited[p.pid] = p
			m.forgetAfter(p, r.Retention)
		}
		m.mu.Unlock()
	}
}

// adopted is a Process as newProcess makes one, with the log restored.
func (m *Manager) adopted(pid uint32, tag *string, owner uint32, config Config, out Output) *Process {
	log, err := restoreLog(m.opts, out)
	if err != nil { // PrepareAdopt checked it
		panic(err)
	}
	p := m.process(tag, owner, config, log)
	p.pid = pid
	return p
}
