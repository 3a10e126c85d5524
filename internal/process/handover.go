package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	hpb "github.com/envd-dev/envd/gen/envd/handover/v1"
	"github.com/envd-dev/envd/internal/handover"
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

func outputOf(l *outbuf.Log) *hpb.Output {
	start, end, recs, _ := l.Snapshot()
	out := &hpb.Output{Start: start, End: end, Records: make([]*hpb.Record, len(recs))}
	for i, r := range recs {
		out.Records[i] = &hpb.Record{Offset: r.Off, Kind: uint32(r.Kind), Data: r.Data}
	}
	return out
}

func commandOf(c Config) *hpb.Command {
	return &hpb.Command{Cmd: c.Cmd, Args: c.Args, Envs: c.Envs, Cwd: c.Cwd}
}

var reasonsToWire = map[EndReason]hpb.EndReason{
	EndExited:       hpb.EndReason_END_REASON_EXITED,
	EndSignaled:     hpb.EndReason_END_REASON_SIGNALED,
	EndTimedOut:     hpb.EndReason_END_REASON_TIMED_OUT,
	EndClientSignal: hpb.EndReason_END_REASON_CLIENT_SIGNAL,
	EndShutdown:     hpb.EndReason_END_REASON_SHUTDOWN,
	EndOOMKilled:    hpb.EndReason_END_REASON_OOM_KILLED,
}

func reasonFromWire(r hpb.EndReason) EndReason {
	for k, v := range reasonsToWire {
		if v == r {
			return k
		}
	}
	return EndSignaled
}

// Snapshot describes every process for the handover record: the running
// ones with the descriptors the new envd reads them through, and those
// that ended and are still retained. Call it after Park. fds lists every
// descriptor named, which the caller keeps open across the exec.
func (m *Manager) Snapshot() (live []*hpb.Process, ended []*hpb.EndedProcess, fds []int) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.live {
		if _, done := p.Exit(); done {
			continue // in exited too, or about to be: see below
		}
		rec := &hpb.Process{Pid: p.pid, Tag: p.tag, OwnerUid: p.owner, Command: commandOf(p.config), Output: outputOf(p.log)}
		fd := func(f *os.File) *int32 {
			n := handover.FD(f)
			fds = append(fds, n)
			fd32 := int32(n)
			return &fd32
		}
		if p.tty != nil {
			rec.PtyFd = fd(p.tty)
		} else {
			rec.StdoutFd, rec.StderrFd = fd(p.outputs[0]), fd(p.outputs[1])
			p.inMu.Lock()
			if p.stdin != nil {
				rec.StdinFd = fd(p.stdin)
			}
			p.inMu.Unlock()
		}
		if !p.ho.deadline.IsZero() {
			left := max(p.ho.deadline.Sub(m.opts.Clock.Now()), 1)
			rec.TimeoutRemainingNs = (*int64)(&left)
		}
		if p.cg != nil {
			rec.Cgroup = p.cg.Path()
		}
		select {
		case <-p.killc:
			rec.Killed = true
		default:
		}
		p.sentMu.Lock()
		for sig, why := range p.sent {
			rec.Sent = append(rec.Sent, &hpb.SentSignal{Signal: int32(sig), Why: reasonsToWire[why]})
		}
		p.sentMu.Unlock()
		p.ho.mu.Lock()
		if ex := p.ho.reaped; ex != nil {
			rec.Reaped = &hpb.Exit{WaitStatus: uint32(ex.Status)}
			if ex.Usage != nil {
				u, s, rss := ex.Usage.Utime.Nano(), ex.Usage.Stime.Nano(), ex.Usage.Maxrss
				rec.Reaped.UserCpuNs, rec.Reaped.SystemCpuNs, rec.Reaped.MaxRssBytes = &u, &s, &rss
			}
		}
		p.ho.mu.Unlock()
		live = append(live, rec)
	}
	for _, p := range m.exited {
		left := p.ho.forgetAt.Sub(now)
		if left <= 0 {
			continue
		}
		ex := p.exit
		e := &hpb.Exit{Code: int32(ex.Code), Exited: ex.Exited, Status: ex.Status, Reason: reasonsToWire[ex.Reason]}
		if u := ex.Usage; u != nil {
			a, b, c, d := int64(u.UserCPU), int64(u.SystemCPU), u.MaxRSS, u.MemoryPeak
			e.UserCpuNs, e.SystemCpuNs, e.MaxRssBytes, e.MemoryPeakBytes = &a, &b, &c, &d
		}
		ended = append(ended, &hpb.EndedProcess{Pid: p.pid, Tag: p.tag, OwnerUid: p.owner, Command: commandOf(p.config),
			Pty: p.tty != nil, Exit: e, Output: outputOf(p.log), RetentionRemainingNs: int64(left)})
	}
	return live, ended, fds
}

// Adoption is a checked set of processes from a handover record, not yet
// adopted: nothing is open or running until Commit.
type Adoption struct {
	m     *Manager
	live  []*hpb.Process
	ended []*hpb.EndedProcess
}

// PrepareAdopt checks the processes a handover record describes: every
// descriptor open, every log whole. It changes nothing.
func (m *Manager) PrepareAdopt(live []*hpb.Process, ended []*hpb.EndedProcess) (*Adoption, error) {
	open := func(pid uint32, what string, fd *int32) error {
		if fd == nil {
			return nil
		}
		if _, err := unix.FcntlInt(uintptr(*fd), unix.F_GETFD, 0); err != nil {
			return fmt.Errorf("process %d: its %s (fd %d) is not open: %w", pid, what, *fd, err)
		}
		return nil
	}
	for _, r := range live {
		if r.GetPid() == 0 || r.GetCommand() == nil {
			return nil, fmt.Errorf("a process without pid or command")
		}
		if (r.PtyFd == nil) == (r.StdoutFd == nil || r.StderrFd == nil) {
			return nil, fmt.Errorf("process %d: want a terminal or stdout and stderr", r.GetPid())
		}
		for what, fd := range map[string]*int32{"stdout": r.StdoutFd, "stderr": r.StderrFd, "stdin": r.StdinFd, "terminal": r.PtyFd} {
			if err := open(r.GetPid(), what, fd); err != nil {
				return nil, err
			}
		}
		if _, err := restoreLog(m.opts, r.GetOutput()); err != nil {
			return nil, fmt.Errorf("process %d: %w", r.GetPid(), err)
		}
		if r.GetCgroup() != "" && m.opts.Cgroups != nil {
			if _, err := m.opts.Cgroups.Adopt(r.GetCgroup()); err != nil {
				return nil, fmt.Errorf("process %d: %w", r.GetPid(), err)
			}
		}
	}
	for _, r := range ended {
		if _, err := restoreLog(m.opts, r.GetOutput()); err != nil {
			return nil, fmt.Errorf("ended process %d: %w", r.GetPid(), err)
		}
	}
	return &Adoption{m: m, live: live, ended: ended}, nil
}

// Running lists the pids the reaper must adopt (reaper.Adopt): those whose
// end the old envd had not reaped.
func (a *Adoption) Running() []int {
	var pids []int
	for _, r := range a.live {
		if r.GetReaped() == nil {
			pids = append(pids, int(r.GetPid()))
		}
	}
	return pids
}

func restoreLog(opts Options, o *hpb.Output) (*outbuf.Log, error) {
	recs := make([]outbuf.Record, len(o.GetRecords()))
	for i, r := range o.GetRecords() {
		if r.GetKind() > 255 {
			return nil, fmt.Errorf("output record kind %d", r.GetKind())
		}
		recs[i] = outbuf.Record{Off: r.GetOffset(), Kind: uint8(r.GetKind()), Data: r.GetData()}
	}
	return outbuf.Restore(opts.LogSize, o.GetStart(), o.GetEnd(), recs, logOptions(opts)...)
}

func configOf(c *hpb.Command) Config {
	return Config{Cmd: c.GetCmd(), Args: c.GetArgs(), Envs: c.GetEnvs(), Cwd: c.Cwd}
}

// Commit adopts the processes: exits has the channel reaper.Adopt gave for
// each pid of Running. From here on they are this envd's as if it had
// started them.
func (a *Adoption) Commit(exits map[int]<-chan reaper.Exit) {
	m := a.m
	for _, r := range a.live {
		p := m.adopted(r.GetPid(), r.Tag, r.GetOwnerUid(), r.GetCommand(), r.GetOutput())
		file := func(fd *int32, name string) *os.File { return os.NewFile(uintptr(*fd), name) }
		if r.PtyFd != nil {
			p.tty = file(r.PtyFd, "/dev/ptmx")
			p.outputs = []*os.File{p.tty}
		} else {
			p.outputs = []*os.File{file(r.StdoutFd, "stdout"), file(r.StderrFd, "stderr")}
			if r.StdinFd != nil {
				p.stdin = file(r.StdinFd, "stdin")
			}
		}
		if r.GetCgroup() != "" && m.opts.Cgroups != nil {
			p.cg, _ = m.opts.Cgroups.Adopt(r.GetCgroup())
		}
		for _, s := range r.GetSent() {
			if p.sent == nil {
				p.sent = map[syscall.Signal]EndReason{}
			}
			p.sent[syscall.Signal(s.GetSignal())] = reasonFromWire(s.GetWhy())
		}
		if r.GetKilled() {
			p.killOnce.Do(func() { close(p.killc) })
		}
		p.serializeSignals(nil)
		exitc := exits[int(r.GetPid())]
		if e := r.GetReaped(); e != nil {
			ex := reaper.Exit{Status: syscall.WaitStatus(e.GetWaitStatus())}
			if e.UserCpuNs != nil {
				ex.Usage = &syscall.Rusage{Utime: syscall.NsecToTimeval(e.GetUserCpuNs()), Stime: syscall.NsecToTimeval(e.GetSystemCpuNs()), Maxrss: e.GetMaxRssBytes()}
			}
			c := make(chan reaper.Exit, 1)
			c <- ex
			exitc = c
		}
		var o StartOptions
		if r.TimeoutRemainingNs != nil {
			o.Timeout = max(time.Duration(r.GetTimeoutRemainingNs()), 1)
		}
		m.register(p)
		m.startPumps(p, exitc, o)
		m.logger.Debug("process adopted", "pid", p.pid, "pty", p.tty != nil)
	}
	for _, r := range a.ended {
		p := m.adopted(r.GetPid(), r.Tag, r.GetOwnerUid(), r.GetCommand(), r.GetOutput())
		e := r.GetExit()
		p.exit = Exit{Code: int(e.GetCode()), Exited: e.GetExited(), Status: e.GetStatus(), Reason: reasonFromWire(e.GetReason())}
		if e.UserCpuNs != nil {
			p.exit.Usage = &Usage{UserCPU: time.Duration(e.GetUserCpuNs()), SystemCPU: time.Duration(e.GetSystemCpuNs()), MaxRSS: e.GetMaxRssBytes(), MemoryPeak: e.GetMemoryPeakBytes()}
		}
		p.log.Close()
		close(p.done)
		m.mu.Lock()
		if _, running := m.live[p.pid]; !running {
			m.exited[p.pid] = p
			m.forgetAfter(p, time.Duration(r.GetRetentionRemainingNs()))
		}
		m.mu.Unlock()
	}
}

// adopted is a Process as newProcess makes one, with the log restored.
func (m *Manager) adopted(pid uint32, tag *string, owner uint32, cmd *hpb.Command, out *hpb.Output) *Process {
	log, err := restoreLog(m.opts, out)
	if err != nil { // PrepareAdopt checked it
		panic(err)
	}
	p := m.process(tag, owner, configOf(cmd), log)
	p.pid = pid
	return p
}
