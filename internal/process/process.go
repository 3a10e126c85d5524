// Package process runs programs for the sandbox's users and keeps them
// reachable: it spawns them (with pipes or a pseudo-terminal, as the asked
// user), drains their output into a bounded log that any number of readers
// follow at their own pace, and keeps their exit as state that a late reader
// can still read.
//
// Who may do what. A process runs as the user its request names, with that
// user's uid, gid and groups (a user other than root keeps no capability);
// envd checks the cwd with
// exactly that user's rights too (cwd.go), in every mode, so an answer tells
// the caller no more than `cd` in a shell as that user would. Each process
// is owned by the user it was started as. By default every caller finds
// every process (List, Connect, input, signals), as upstream; with
// Options.StrictUsers a user other than root finds only its own, and another
// user's process answers exactly as one that does not exist (not found, by
// pid or tag, running or ended). Root finds all.
//
// The package knows nothing of Connect, HTTP or the handover record:
// procconnect is the one adapter that maps it to the process.Process RPCs
// and its errors to Connect codes, and internal/daemon converts its
// Snapshot to and from the live-upgrade record.
package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/quartz"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/cgroup"
	"github.com/envd-dev/envd/internal/outbuf"
	"github.com/envd-dev/envd/internal/reaper"
)

// Output kinds, the Kind of each outbuf.Record a process writes.
const (
	Stdout uint8 = 1
	Stderr uint8 = 2
	PTY    uint8 = 3
)

// A drain reads a child's output in chunks of readChunk, 32 KiB as upstream,
// and doubles its buffer up to maxReadChunk while reads fill it: a quiet
// program costs little memory, a program printing in bulk is moved in few
// large chunks (fewer syscalls, fewer and bigger messages to readers).
const (
	readChunk    = 32 << 10
	maxReadChunk = 1 << 20
)

// A drain reads into the rest of its buffer until less than
// 1/minTailPart of it is left, then into another buffer.
const minTailPart = 4

// outputPipeSize is the kernel buffer of an output pipe (see outputPipe).
const outputPipeSize = 1 << 20

// killGrace is how long output still in a pipe is drained after a kill, once
// the process group is gone: a process that left the group may hold the pipe
// open for ever. Past it, a drain keeps reading while reads return data (what
// the group wrote before it died is still in the pipe), and stops at the
// first killGrace of quiet or after lateBudget bytes (a leftover that writes
// for ever must not hold the end back); what it leaves unread is counted in
// the output.
const killGrace = 50 * time.Millisecond

// lateBudget bounds what a drain reads past killGrace: twice a full pipe.
const lateBudget = 2 * outputPipeSize

// groupGrace is how long a killed process's group has to be gone before its
// members get SIGKILL, and then again before the end is published anyway
// (a member stuck in the kernel cannot be waited for for ever).
const groupGrace = 2 * time.Second

// Config is the command as the caller sent it, kept for List.
type Config struct {
	Cmd  string
	Args []string
	Envs map[string]string
	Cwd  *string
}

// Size is a terminal size in character cells.
type Size struct {
	Cols, Rows uint16
}

// Exit is how a process ended.
type Exit struct {
	Code   int    // -1 when a signal ended it
	Exited bool   // false when a signal ended it
	Status string // "exit status 3", "signal: killed"
	// Reason says why it ended; Usage what it used (nil when unknown).
	Reason EndReason
	Usage  *Usage
}

// EndReason says why a process ended.
type EndReason uint8

// End reasons.
const (
	// EndExited: it exited by itself; Code is its status.
	EndExited EndReason = iota + 1
	// EndSignaled: a signal envd was not asked for ended it (its own, or
	// another process's).
	EndSignaled
	// EndTimedOut: its lifetime (StartOptions.Timeout) ran out and envd
	// killed it.
	EndTimedOut
	// EndClientSignal: a signal a client sent (Signal) ended it.
	EndClientSignal
	// EndShutdown: envd's shutdown ended it.
	EndShutdown
	// EndOOMKilled: the kernel's OOM killer ended it (SIGKILL that envd did
	// not send, while its cgroup counted an OOM kill).
	EndOOMKilled
)

func (r EndReason) String() string {
	switch r {
	case EndExited:
		return "exited"
	case EndSignaled:
		return "signaled"
	case EndTimedOut:
		return "timed out"
	case EndClientSignal:
		return "killed by a client's signal"
	case EndShutdown:
		return "killed at envd's shutdown"
	case EndOOMKilled:
		return "killed by the OOM killer"
	}
	return "unknown"
}

// Usage is what a process used, from wait4's rusage: the process and the
// descendants it waited for.
type Usage struct {
	UserCPU, SystemCPU time.Duration
	MaxRSS             int64 // peak resident set, bytes
	// MemoryPeak is the most its cgroup (it and every descendant, page
	// cache included) held at once, in bytes; 0 without cgroups.
	MemoryPeak int64
}

// Process is one spawned program.
type Process struct {
	pid    uint32
	seq    uint64 // its order among the Manager's processes; guarded by Manager.mu
	tag    *string
	owner  uint32 // the uid of the user it was started as
	config Config
	log    *outbuf.Log

	// inSem orders input writes; it is held across a write, which the
	// writer's context can cut short. inMu guards only the stdin field, so
	// closing stdin never waits for a write: it ends it.
	inSem chan struct{}
	inMu  sync.Mutex
	stdin *os.File // guarded by inMu; nil when disabled or closed
	tty   *os.File // the pty master; nil for pipe processes

	outputs []*os.File    // read ends of stdout/stderr, or the pty master
	killc   chan struct{} // closed by the first SIGKILL or SIGTERM sent
	// sent maps each signal envd sent to why (the first cause per signal):
	// the reason of an end by that signal. Guarded by sentMu.
	sentMu   sync.Mutex
	sent     map[syscall.Signal]EndReason
	killOnce sync.Once
	signal   func(syscall.Signal) error // signals the process group (session)
	release  func()                     // after the end: signal finds it done
	clock    quartz.Clock

	// Flow control (flow.go).
	logSize   int
	lateBytes atomic.Int64       // read after output stopped being waited for (extendDrain)
	pacing    context.Context    // the drains' paced writes wait for followers until it is done
	hurry     context.CancelFunc // ends pacing: output is no longer waited for

	logger  *slog.Logger
	cgroups *cgroup.Manager // nil: no cgroups
	cg      *cgroup.Group   // its own cgroup; nil without one

	done chan struct{} // closed once exit is set and the log is closed
	exit Exit          // valid after done

	// reaped is set once the leader was reaped, groupDead once its group
	// (session) was then seen empty: from then on its pid (the group's id)
	// may be another process's, which a signal must not reach.
	reaped, groupDead atomic.Bool

	ho handoverState // a live upgrade's view of it (handover.go)
}

// Pid is the process's id.
func (p *Process) Pid() uint32 { return p.pid }

// Tag is the caller's label for the process, if any.
func (p *Process) Tag() *string { return p.tag }

// Owner is the uid of the user the process was started as.
func (p *Process) Owner() uint32 { return p.owner }

// Config is the command as it was asked for.
func (p *Process) Config() Config { return p.config }

// IsPTY tells whether the process runs on a terminal.
func (p *Process) IsPTY() bool { return p.tty != nil }

// Done is closed when the process has exited and all its output is in the log.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exit is how the process ended; ok is false while it runs.
func (p *Process) Exit() (e Exit, ok bool) {
	select {
	case <-p.done:
		return p.exit, true
	default:
		return Exit{}, false
	}
}

// Output returns a reader of the process's output that starts with whatever
// is still retained (all of it, for a reader that comes at once), then follows
// live output. It reads io.EOF after the last byte, once the process ended.
// The process never waits for it: see Follow for a reader it waits for.
func (p *Process) Output() *outbuf.Cursor {
	return p.log.Cursor(outbuf.Oldest)
}

// WriteStdin writes b to the process's stdin pipe. A program that does not
// read its stdin fills the pipe and the write waits: until ctx ends, which
// then cuts it short (part of b may have been written), or until stdin is
// closed. A write waits for the ones before it, as long as ctx allows.
func (p *Process) WriteStdin(ctx context.Context, b []byte) error {
	if p.tty != nil {
		return errorf(ErrWrongState, "process %d runs on a terminal: send its input as pty input", p.pid)
	}
	release, err := p.inputTurn(ctx)
	if err != nil {
		return fmt.Errorf("write to stdin of process %d: an earlier input is still being written and it is not reading its input: %w", p.pid, err)
	}
	defer release()
	p.inMu.Lock()
	f := p.stdin
	p.inMu.Unlock()
	if f == nil {
		return errorf(ErrWrongState, "stdin of process %d is not enabled or already closed", p.pid)
	}
	if err := writeCtx(ctx, f, b); err != nil {
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("write to stdin of process %d: it is not reading its input: %w", p.pid, ctx.Err())
		case errors.Is(err, os.ErrClosed):
			return errorf(ErrWrongState, "write to stdin of process %d: stdin was closed while the input was being written", p.pid)
		}
		return errorf(ErrWrongState, "write to stdin of process %d: %v", p.pid, err)
	}
	return nil
}

// inputTurn waits, as long as ctx allows, for the writes before this one.
func (p *Process) inputTurn(ctx context.Context) (release func(), err error) {
	select {
	case p.inSem <- struct{}{}:
		return func() { <-p.inSem }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// writeCtx writes b to f, a pipe or terminal in Go's poller, giving up when
// ctx ends: the input lock is then released for the next writer or a close.
func writeCtx(ctx context.Context, f *os.File, b []byte) error {
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		f.SetWriteDeadline(time.Now())
		close(fired)
	})
	_, err := f.Write(b)
	if !stop() {
		<-fired
		f.SetWriteDeadline(time.Time{})
	}
	return err
}

// WritePTY writes b to the process's terminal, as if typed; like
// WriteStdin, a write the program does not take ends with ctx.
func (p *Process) WritePTY(ctx context.Context, b []byte) error {
	if p.tty == nil {
		return errorf(ErrWrongState, "process %d has no terminal: send its input as stdin", p.pid)
	}
	release, err := p.inputTurn(ctx)
	if err != nil {
		return fmt.Errorf("write to terminal of process %d: an earlier input is still being written and it is not reading its input: %w", p.pid, err)
	}
	defer release()
	if err := writeCtx(ctx, p.tty, b); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("write to terminal of process %d: it is not reading its input: %w", p.pid, ctx.Err())
		}
		return errorf(ErrWrongState, "write to terminal of process %d: %v", p.pid, err)
	}
	return nil
}

// CloseStdin closes the stdin pipe so the process reads EOF. Closing a
// closed or disabled stdin succeeds. It does not wait for a write in
// progress: that write ends, failed.
func (p *Process) CloseStdin() error {
	if p.tty != nil {
		return errorf(ErrWrongState, "process %d runs on a terminal, which has no stdin to close: send Ctrl+D (0x04) as pty input instead", p.pid)
	}
	p.closeStdin()
	return nil
}

func (p *Process) closeStdin() {
	p.inMu.Lock()
	f := p.stdin
	p.stdin = nil
	p.inMu.Unlock()
	if f != nil {
		f.Close() // wakes a write blocked on it
	}
}

// Resize sets the terminal's size; the process gets SIGWINCH.
func (p *Process) Resize(s Size) error {
	if p.tty == nil {
		return errorf(ErrWrongState, "process %d has no terminal to resize", p.pid)
	}
	if s.Cols == 0 || s.Rows == 0 {
		return errorf(ErrInvalid, "terminal size %dx%d: cols and rows must both be at least 1", s.Cols, s.Rows)
	}
	if err := pty.Setsize(p.tty, &pty.Winsize{Cols: s.Cols, Rows: s.Rows}); err != nil {
		return fmt.Errorf("resize terminal of process %d: %w", p.pid, err)
	}
	return nil
}

// Signal sends sig to the process's group (to its session, on a terminal):
// the program and everything it started that stayed in it. After SIGKILL or
// SIGTERM the end waits for the group to be gone (see awaitGroup) but no
// longer for output pipes held by processes outside it.
func (p *Process) Signal(sig syscall.Signal) error {
	return p.signalFor(sig, EndClientSignal)
}

// signalFor is Signal, noting why envd sends sig: if sig ends the
// process, why is the end's reason.
func (p *Process) signalFor(sig syscall.Signal, why EndReason) error {
	p.sentMu.Lock()
	if p.sent == nil {
		p.sent = map[syscall.Signal]EndReason{}
	}
	if _, ok := p.sent[sig]; !ok {
		p.sent[sig] = why
	}
	p.sentMu.Unlock()
	if _, ended := p.Exit(); ended {
		return errorf(ErrNotFound, "process with pid %d has already exited", p.pid)
	}
	stop := sig == syscall.SIGKILL || sig == syscall.SIGTERM
	if stop {
		p.killOnce.Do(func() { close(p.killc) })
	}
	if err := p.signal(sig); err != nil {
		if errors.Is(err, os.ErrProcessDone) {
			if stop {
				// It exited, but orphans still hold its output open (it
				// is still listed): the kill ends that wait, as
				// upstream's kill of the unreaped process does.
				return nil
			}
			return errorf(ErrNotFound, "process with pid %d has already exited", p.pid)
		}
		return fmt.Errorf("signal process %d: %w", p.pid, err)
	}
	return nil
}

// drain copies one output source into the log until EOF. A terminal master
// reads EIO once every holder of the terminal has closed it: that is its EOF.
func (p *Process) drain(f *os.File, kind uint8, wg *sync.WaitGroup) {
	defer wg.Done()
	defer p.drainEnded()
	// Each read goes into the rest of buf and the log takes what it read
	// as it is (no copy); once too little of buf is left for a read, the
	// log takes buf with its last part, and the drain reads on into a
	// buffer the log no longer needs (see outbuf's reuse.go).
	buf := make([]byte, readChunk)
	off := 0 // buf[:off] is the log's
	for {
		n, err := f.Read(buf[off:])
		if err != nil && p.parkDrain(f, err) {
			continue // a handover that did not happen: read on
		}
		if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) && p.lateBytes.Load() <= lateBudget && unread(f) > 0 {
			// The deadline passed while this drain was late (descheduled,
			// or waiting for a follower), not while the pipe was quiet:
			// what waits there is still the group's.
			f.SetReadDeadline(time.Now().Add(killGrace))
			continue
		}
		// The read filled all it was given: output waits in bulk.
		full := n == len(buf)-off
		part := buf[off : off+n]
		off += n
		done := len(buf)-off < len(buf)/minTailPart // too little left for a read
		if n > 0 {
			var whole []byte
			if done {
				whole = buf // part is buf's last
			}
			p.log.WritePacedPart(p.pacing, kind, part, whole)
			if p.pacing.Err() != nil {
				p.extendDrain(f, n)
			}
		}
		if done && err == nil {
			// A chunk stays well under the log's size, or one record
			// would push a reader that keeps up out of it (see flow.go).
			size := len(buf)
			if full && size < min(maxReadChunk, p.logSize/8) {
				size *= 2
			}
			buf, off = p.log.Buffer(size), 0
		}
		if err != nil {
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				if left := unread(f); left > 0 {
					p.log.Write(Stderr, fmt.Appendf(nil, "envd: %d bytes of output were left unread: a process outside the killed process's group still holds its output open\n", left))
				}
			case !errors.Is(err, io.EOF) && !errors.Is(err, syscall.EIO):
				p.log.Write(Stderr, fmt.Appendf(nil, "envd: reading output failed: %v\n", err))
			}
			return
		}
	}
}

// extendDrain lets a drain past killGrace read on after a read of n bytes:
// another killGrace, until a log's worth of bytes has been read that way.
func (p *Process) extendDrain(f *os.File, n int) {
	if p.lateBytes.Add(int64(n)) > lateBudget {
		f.SetReadDeadline(time.Now())
		return
	}
	f.SetReadDeadline(time.Now().Add(killGrace))
}

// unread is how many bytes wait in the pipe (or terminal) f, 0 if unknown.
func unread(f *os.File) int {
	var n int
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	if cerr := rc.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }); cerr != nil || err != nil {
		return 0
	}
	return n
}

// endReason is why the process ended as ex says.
func (p *Process) endReason(ex reaper.Exit) EndReason {
	if ex.Status.Exited() {
		return EndExited
	}
	p.sentMu.Lock()
	defer p.sentMu.Unlock()
	if why, ok := p.sent[ex.Status.Signal()]; ok {
		return why
	}
	return EndSignaled
}

// exitOf is the exit ex reports, completed from the process's cgroup: an
// OOM kill, the memory peak. wait removes the cgroup once the exit is
// published (kept for later if orphans of the process still live in it).
func (p *Process) exitOf(ex reaper.Exit) Exit {
	e := Exit{Code: ex.Code(), Exited: ex.Status.Exited(), Status: ex.String(), Reason: p.endReason(ex), Usage: usage(ex)}
	if p.cg == nil {
		return e
	}
	if e.Reason == EndSignaled && ex.Status.Signal() == syscall.SIGKILL {
		if n, err := p.cg.OOMKills(); err == nil && n > 0 {
			e.Reason = EndOOMKilled
		}
	}
	if peak, err := p.cg.MemoryPeak(); err == nil && e.Usage != nil {
		e.Usage.MemoryPeak = int64(peak)
	}
	return e
}

// usage converts wait4's rusage.
func usage(ex reaper.Exit) *Usage {
	if ex.Usage == nil {
		return nil
	}
	return &Usage{
		UserCPU:   time.Duration(ex.Usage.Utime.Nano()),
		SystemCPU: time.Duration(ex.Usage.Stime.Nano()),
		MaxRSS:    ex.Usage.Maxrss * 1024, // Linux reports KiB
	}
}

// wait ends the process's life: it waits for the exit, then for the output to
// be drained, then stores the exit and wakes every reader.
func (p *Process) wait(exitc <-chan reaper.Exit, cleanup func()) {
	var wg sync.WaitGroup
	kinds := []uint8{Stdout, Stderr}
	if p.tty != nil {
		kinds = []uint8{PTY}
	}
	for i, f := range p.outputs {
		wg.Add(1)
		go p.drain(f, kinds[i], &wg)
	}
	ex := <-exitc
	p.noteReaped(ex)
	p.reaped.Store(true)
	if !p.groupEnded() {
		go p.watchGroup()
	}
	// The cgroup is read while the output drains, not after (on v1, about
	// 0.05 ms that the end waited for).
	exit := p.exitOf(ex)
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-p.killc: // before the exit, or after it while orphans hold the pipes
		p.awaitGroup()
		// Processes that left the group may keep the pipes open after a
		// kill: take what is already buffered, then stop waiting for them.
		select {
		case <-drained:
		case <-time.After(killGrace):
			p.hurry()
			for _, f := range p.outputs {
				f.SetReadDeadline(time.Now().Add(killGrace))
			}
			<-drained
		}
	}
	for _, f := range p.outputs {
		f.Close()
	}
	p.closeStdin()
	p.exit = exit
	p.log.Close()
	cleanup()
	close(p.done)
	// Giving the cgroup back (it is looked at, then kept or removed: up to
	// an rmdir in each hierarchy) need not hold the end back: the readers
	// close(p.done) woke run first (they wait for this P otherwise, as
	// rmdir is a syscall that keeps it, and the end would go out later).
	if p.cg != nil {
		runtime.Gosched()
		p.cg.Release()
	}
}

// awaitGroup returns once the killed process's group (session) is gone: its
// members exited and were reaped. Members still there after groupGrace get
// SIGKILL; after another groupGrace it gives up on those stuck in the kernel.
func (p *Process) awaitGroup() {
	timer := p.clock.NewTimer(groupGrace, "process", "group")
	defer timer.Stop()
	for escalated := false; ; {
		reaped := reaper.Reaped() // before the check: a reap after it wakes us
		if p.groupEnded() {
			return
		}
		select {
		case <-reaped:
		case <-timer.C:
			if escalated {
				return
			}
			escalated = true
			p.signal(syscall.SIGKILL) // not once the group is gone: its pid may be another's
			timer.Reset(groupGrace, "process", "group")
		}
	}
}

// groupEnded tells whether the reaped leader's group (session) is gone for
// good, and notes it: once the leader was reaped, an empty group never
// comes back, and a group with its id is another's (the pid was reused).
// Before the reap it reports false (the leader, even a zombie, is there).
func (p *Process) groupEnded() bool {
	if p.groupDead.Load() {
		return true
	}
	if !p.reaped.Load() || !groupGone(p.pid, p.tty != nil) {
		return false
	}
	p.groupDead.Store(true)
	return true
}

// watchGroup notes, at each round of the reaper (at least every 100 ms),
// whether the reaped leader's group is gone, until it is or the process's
// end is published: its pid cannot be reused that fast, so a signal never
// finds another group under it.
func (p *Process) watchGroup() {
	for {
		reaped := reaper.Reaped()
		if p.groupEnded() {
			return
		}
		select {
		case <-reaped:
		case <-p.done:
			return
		}
	}
}
