package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/wirecodec"
)

// Command describes a process to start. Only Name is required.
type Command struct {
	// Name is the program: a path, or a name looked up in envd's PATH.
	// envd adds no shell: use Name "/bin/sh" and Args {"-c", script} for one.
	Name string
	Args []string
	// Env adds to (or overrides) the environment envd gives every process.
	Env map[string]string
	// Dir is the working directory. Zero: the default workdir set by /init,
	// else the user's home. Relative paths start from the home.
	Dir string
	// Tag names the process, to find it with Connect or List.
	Tag string
	// User runs the process as this user. Zero: the client's User.
	User string
	// Stdin gives the process a stdin pipe for SendStdin and StreamStdin.
	// Zero: its stdin is /dev/null. A PTY process always takes input.
	Stdin bool
	// PTY runs the process in a pseudo-terminal of this size; its output
	// then arrives as PTY events, stdout and stderr mixed as on a screen.
	PTY *Size
	// Timeout, if positive, is the process's lifetime: envd kills it
	// (SIGKILL) once it has run that long. Zero: it runs until it ends or
	// is signalled; cancelling the context of Start never kills it (Run's
	// does, unless KeepRunning).
	Timeout time.Duration
	// KeepRunning makes Run leave the process running when its context
	// ends, as Start always does. Zero: Run kills it (SIGKILL to its
	// process group), as exec.CommandContext does.
	KeepRunning bool
	// Stdout and Stderr receive the process's output while Wait runs (a
	// PTY's output goes to Stdout). Zero: the output is discarded by Wait;
	// read it with Events instead.
	Stdout, Stderr io.Writer
}

// Size is a terminal size in character cells.
type Size struct {
	Cols, Rows uint16
}

// Stream says which output of a process an Event carries.
type Stream int

const (
	Stdout Stream = iota + 1
	Stderr
	PTY // a pseudo-terminal's output
)

func (s Stream) String() string {
	switch s {
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	case PTY:
		return "pty"
	}
	return fmt.Sprintf("Stream(%d)", int(s))
}

// Event is one chunk of a process's output.
type Event struct {
	Stream Stream
	Data   []byte
}

// Exit is how a process ended.
type Exit struct {
	// Code is the exit code, or -1 when a signal ended the process.
	Code int
	// Signal is the signal that ended the process, 0 if it exited.
	Signal syscall.Signal
	// Status is envd's description: "exit status 3", "signal: killed".
	Status string
	// TimedOut tells that the process outlived its Command.Timeout and
	// was killed for it.
	TimedOut bool
	// Reason says why it ended (ExitReasonUnknown from an envd too old to
	// say).
	Reason ExitReason
	// Usage is what it used; nil when envd did not say.
	Usage *Usage
}

// ExitReason is why a process ended. Its values are the wire's
// (process.ProcessEvent.EndReason).
type ExitReason int

const (
	ExitReasonUnknown      ExitReason = iota
	ExitReasonExited                  // it exited by itself: Code is its status
	ExitReasonSignaled                // a signal envd was not asked for ended it
	ExitReasonTimedOut                // its Command.Timeout ran out: envd killed it
	ExitReasonClientSignal            // a client's Signal ended it
	ExitReasonShutdown                // envd's shutdown ended it
	ExitReasonOOMKilled               // the kernel's OOM killer ended it
)

func (r ExitReason) String() string {
	switch r {
	case ExitReasonExited:
		return "exited"
	case ExitReasonSignaled:
		return "signaled"
	case ExitReasonTimedOut:
		return "timed out"
	case ExitReasonClientSignal:
		return "killed by a client's signal"
	case ExitReasonShutdown:
		return "killed at envd's shutdown"
	case ExitReasonOOMKilled:
		return "killed by the OOM killer"
	}
	return "unknown"
}

// Usage is what a process (and the descendants it waited for) used.
type Usage struct {
	UserCPU, SystemCPU time.Duration
	// MaxRSS is the peak resident set in bytes, as wait4 reports it: at
	// least envd's own resident set when the process started (Linux
	// counts what a vfork child shares with envd until it execs).
	MaxRSS int64
	// MemoryPeak is the most memory the process's cgroup (it and every
	// descendant, page cache included) held at once, in bytes; 0 when
	// envd runs without cgroups.
	MemoryPeak int64
}

// Success tells whether the process exited with code 0.
func (e *Exit) Success() bool { return e.Code == 0 && e.Signal == 0 }

func (e *Exit) String() string { return e.Status }

func exitOf(ev *pb.ProcessEvent_EndEvent) *Exit {
	ex := &Exit{Code: int(ev.GetExitCode()), Status: ev.GetStatus(), Reason: ExitReason(ev.GetReason())}
	ex.TimedOut = ex.Reason == ExitReasonTimedOut
	if u := ev.GetUsage(); u != nil {
		ex.Usage = &Usage{
			UserCPU:    time.Duration(u.GetUserCpuUs()) * time.Microsecond,
			SystemCPU:  time.Duration(u.GetSystemCpuUs()) * time.Microsecond,
			MaxRSS:     int64(u.GetMaxRssBytes()),
			MemoryPeak: int64(u.GetMemoryPeakBytes()),
		}
	}
	if rest, ok := strings.CutPrefix(ev.GetStatus(), "signal: "); ok {
		rest = strings.TrimSuffix(rest, " (core dumped)")
		ex.Signal = signalNamed(rest)
		if ex.Code == 0 {
			ex.Code = -1
		}
	}
	return ex
}

// signalNamed finds the signal whose description (as Go prints it,
// "killed", "terminated") is name.
func signalNamed(name string) syscall.Signal {
	for s := syscall.Signal(1); s < 65; s++ {
		if s.String() == name {
			return s
		}
	}
	if n, ok := strings.CutPrefix(name, "signal "); ok {
		var v int
		if _, err := fmt.Sscan(n, &v); err == nil {
			return syscall.Signal(v)
		}
	}
	return 0
}

// Selector picks a running process: by PID, else by Tag.
type Selector struct {
	PID uint32
	Tag string
}

func (s Selector) proto() *pb.ProcessSelector {
	if s.PID == 0 && s.Tag != "" {
		return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: s.Tag}}
	}
	return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: s.PID}}
}

func (s Selector) String() string {
	if s.PID == 0 && s.Tag != "" {
		return "process tagged " + s.Tag
	}
	return fmt.Sprintf("process %d", s.PID)
}

// ProcessInfo describes a running process, as List returns it.
type ProcessInfo struct {
	PID  uint32
	Tag  string
	Name string
	Args []string
	Env  map[string]string // as it was given to Start
	Dir  string            // as it was given to Start
}

// Start starts a process and returns once envd has started it. Follow its
// output with Events or Wait, on the returned handle.
//
// ctx bounds the call and the following of the output: when it ends, the
// handle stops receiving, but the process goes on (use Command.Timeout to
// bound its life, Signal to end it).
func (c *Client) Start(ctx context.Context, cmd Command) (*Process, error) {
	c.init()
	op := "start " + cmd.Name
	if cmd.Name == "" {
		return nil, &Error{Op: "start process", Code: connect.CodeInvalidArgument, Message: "no command: Command.Name is empty"}
	}
	req := &pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: cmd.Name, Args: cmd.Args, Envs: cmd.Env},
		Stdin:   &cmd.Stdin,
	}
	if cmd.Dir != "" {
		req.Process.Cwd = &cmd.Dir
	}
	if cmd.Tag != "" {
		req.Tag = &cmd.Tag
	}
	if cmd.PTY != nil {
		req.Pty = &pb.PTY{Size: &pb.PTY_Size{Cols: uint32(cmd.PTY.Cols), Rows: uint32(cmd.PTY.Rows)}}
		req.Stdin = nil
	}
	sctx, cancel := streamContext(ctx, cmd.Timeout)
	stream, err := c.output.Start(sctx, request(c, req, cmd.User))
	if err != nil {
		cancel()
		return nil, concerning(aboutCommand, rpcError(op, err))
	}
	p := &Process{
		c:       c,
		ctx:     ctx,
		op:      op,
		PTY:     cmd.PTY != nil,
		stdout:  cmd.Stdout,
		stderr:  cmd.Stderr,
		timeout: cmd.Timeout > 0,
		recv:    receiver(stream, (*pb.StartResponse).GetEvent),
		close:   stream.Close,
		cancel:  cancel,
	}
	if err := p.awaitStart(); err != nil {
		return nil, err
	}
	p.Tag = cmd.Tag
	return p, nil
}

// Connect follows a process started earlier, by this client or another,
// running or ended less than 30 s ago. The handle replays the output envd
// still holds (its last 4 MiB), then follows live output, then the exit.
//
// envd does not say whether the process runs in a terminal: set the
// handle's PTY field before SendStdin if it does.
func (c *Client) Connect(ctx context.Context, sel Selector) (*Process, error) {
	c.init()
	op := "connect to " + sel.String()
	sctx, cancel := streamContext(ctx, 0)
	stream, err := c.output.Connect(sctx, request(c, &pb.ConnectRequest{Process: sel.proto()}, ""))
	if err != nil {
		cancel()
		return nil, rpcError(op, err)
	}
	p := &Process{
		c:      c,
		ctx:    ctx,
		op:     op,
		recv:   receiver(stream, (*pb.ConnectResponse).GetEvent),
		close:  stream.Close,
		cancel: cancel,
		Tag:    sel.Tag,
	}
	if err := p.awaitStart(); err != nil {
		return nil, err
	}
	return p, nil
}

// serverStream is what Start and Connect return.
type serverStream[T any] interface {
	Receive() bool
	Msg() *T
	Err() error
}

// receiver adapts a stream to one function: the next event, or nil and
// the stream's error (nil at a clean end).
func receiver[T any](s serverStream[T], event func(*T) *pb.ProcessEvent) func() (*pb.ProcessEvent, error) {
	return func() (*pb.ProcessEvent, error) {
		if !s.Receive() {
			return nil, s.Err()
		}
		return event(s.Msg()), nil
	}
}

// ListProcesses lists the processes envd runs.
func (c *Client) ListProcesses(ctx context.Context) ([]ProcessInfo, error) {
	c.init()
	resp, err := c.proc.List(ctx, request(c, &pb.ListRequest{}, ""))
	if err != nil {
		return nil, rpcError("list processes", err)
	}
	out := make([]ProcessInfo, 0, len(resp.Msg.GetProcesses()))
	for _, p := range resp.Msg.GetProcesses() {
		cfg := p.GetConfig()
		out = append(out, ProcessInfo{
			PID: p.GetPid(), Tag: p.GetTag(),
			Name: cfg.GetCmd(), Args: cfg.GetArgs(), Env: cfg.GetEnvs(), Dir: cfg.GetCwd(),
		})
	}
	return out, nil
}

// Signal sends sig to the process sel picks (to its process group). envd
// delivers HUP, INT, QUIT, KILL, USR1, USR2, ALRM, TERM, CONT, STOP, TSTP
// and WINCH; it refuses other signals with ErrInvalidArgument.
func (c *Client) Signal(ctx context.Context, sel Selector, sig syscall.Signal) error {
	c.init()
	_, err := c.proc.SendSignal(ctx, request(c, &pb.SendSignalRequest{Process: sel.proto(), Signal: pb.Signal(sig)}, ""))
	return rpcError(fmt.Sprintf("send %s to %s", sigName(sig), sel), err)
}

func sigName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGKILL:
		return "SIGKILL"
	}
	return fmt.Sprintf("signal %d", int(sig))
}

// RunResult is what Run collects.
type RunResult struct {
	// Stdout and Stderr are the process's output; a PTY's is in Stdout.
	// Each is empty when Command gave a writer for it: the output went
	// there.
	Stdout, Stderr []byte
	// Exit is how the process ended.
	Exit *Exit
}

// killGrace bounds the kill Run sends when its context ends.
const killGrace = 5 * time.Second

// Run starts a process, waits for it, and returns its output and exit. An
// exit code other than 0 is not an error: look at RunResult.Exit.
//
// When ctx ends first, Run kills the process (unless cmd.KeepRunning) and
// returns ctx's error (errors.Is(err, context.DeadlineExceeded) for a
// deadline).
func (c *Client) Run(ctx context.Context, cmd Command) (*RunResult, error) {
	var out, errb bytes.Buffer
	if cmd.Stdout == nil {
		cmd.Stdout = &out
	}
	if cmd.Stderr == nil {
		cmd.Stderr = &errb
	}
	p, err := c.Start(ctx, cmd)
	if err != nil {
		return nil, err
	}
	exit, err := p.Wait()
	if err != nil {
		if ctx.Err() != nil && !cmd.KeepRunning {
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killGrace)
			defer cancel()
			if kerr := c.Signal(kctx, Selector{PID: p.PID}, syscall.SIGKILL); kerr != nil && !errors.Is(kerr, ErrNotFound) {
				return nil, fmt.Errorf("%w (and killing process %d failed: %v)", err, p.PID, kerr)
			}
		}
		return nil, err
	}
	return &RunResult{Stdout: out.Bytes(), Stderr: errb.Bytes(), Exit: exit}, nil
}

// Process is a handle on a process started by Start or found by Connect.
// Events and Wait read its output; call one of them from one goroutine. The
// other methods may be called from any goroutine.
type Process struct {
	// PID is the process id in the sandbox.
	PID uint32
	// Tag is the tag it was started with (or found by).
	Tag string
	// PTY tells whether the process runs in a pseudo-terminal: input then
	// goes to the terminal. Start sets it; Connect cannot know.
	PTY bool

	c              *Client
	ctx            context.Context // the caller's, to reconnect after a timeout
	op             string
	stdout, stderr io.Writer
	timeout        bool
	recv           func() (*pb.ProcessEvent, error)
	close          func() error
	cancel         context.CancelFunc

	closeOnce sync.Once
	exit      *Exit // set when the end arrived
	err       error // set when the stream failed
}

// awaitStart reads the start event, which envd sends first.
func (p *Process) awaitStart() error {
	for {
		ev, err := p.recv()
		if err != nil || ev == nil {
			p.release()
			if err == nil {
				err = errors.New("the stream ended before the process started")
			}
			return concerning(aboutCommand, streamError(p.ctx, p.op, err))
		}
		if s := ev.GetStart(); s != nil {
			p.PID = s.GetPid()
			if strings.HasPrefix(p.op, "start ") {
				// From now on a failure is in following it.
				p.op = fmt.Sprintf("follow process %d (%s)", p.PID, strings.TrimPrefix(p.op, "start "))
			}
			return nil
		}
		if ev.GetKeepalive() == nil {
			p.release()
			return &Error{Op: p.op, Code: connect.CodeInternal, Message: fmt.Sprintf("first event %T, want start", ev.GetEvent())}
		}
	}
}

// next returns the next output event; false once the process ended (exit
// set) or the stream failed (err set).
func (p *Process) next() (Event, bool) {
	if p.exit != nil || p.err != nil {
		return Event{}, false
	}
	for {
		ev, err := p.recv()
		if ev == nil {
			p.finish(err)
			return Event{}, false
		}
		if d := ev.GetData(); d != nil {
			switch o := d.GetOutput().(type) {
			case *pb.ProcessEvent_DataEvent_Stdout:
				return Event{Stream: Stdout, Data: o.Stdout}, true
			case *pb.ProcessEvent_DataEvent_Stderr:
				return Event{Stream: Stderr, Data: o.Stderr}, true
			case *pb.ProcessEvent_DataEvent_Pty:
				return Event{Stream: PTY, Data: o.Pty}, true
			}
			continue
		}
		if end := ev.GetEnd(); end != nil {
			p.exit = exitOf(end)
			p.release()
			return Event{}, false
		}
		// start (after a reconnect) and keepalives carry nothing.
	}
}

// finish records the end of the stream without an end event.
func (p *Process) finish(err error) {
	defer p.release()
	if err == nil {
		p.err = &Error{Op: p.op, Code: connect.CodeInternal, Message: fmt.Sprintf("the stream of process %d ended without its exit", p.PID)}
		return
	}
	// Past Command.Timeout envd killed the process as the stream ended:
	// its exit is stored; fetch it.
	if p.timeout && connect.CodeOf(err) == connect.CodeDeadlineExceeded && p.ctx.Err() == nil {
		if ex, ferr := p.fetchExit(); ferr == nil {
			ex.TimedOut = true
			p.exit = ex
			return
		}
	}
	p.err = streamError(p.ctx, p.op, err)
}

// fetchExit reconnects to read the stored exit, skipping the replayed output.
func (p *Process) fetchExit() (*Exit, error) {
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	stream, err := p.c.output.Connect(ctx, request(p.c, &pb.ConnectRequest{Process: Selector{PID: p.PID}.proto()}, ""))
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	for stream.Receive() {
		if end := stream.Msg().GetEvent().GetEnd(); end != nil {
			return exitOf(end), nil
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("no exit")
}

// Events iterates over the process's output until it ends; then Wait
// returns its exit at once. A failed stream yields its error last.
func (p *Process) Events() iter.Seq2[Event, error] {
	return eventSeq(p.next, func() error { return p.err })
}

// eventSeq yields what next gives until it is done, then failed's error,
// if any: the iterator of a stream's output events.
func eventSeq(next func() (Event, bool), failed func() error) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for {
			ev, ok := next()
			if !ok {
				if err := failed(); err != nil {
					yield(Event{}, err)
				}
				return
			}
			if !yield(ev, nil) {
				return
			}
		}
	}
}

// Wait reads the rest of the output, into Command.Stdout and Stderr when
// they are set, until the process ends, and returns its exit. A non-zero
// exit is not an error; an error means the output could not be followed to
// the end (the process may still run).
func (p *Process) Wait() (*Exit, error) {
	for {
		ev, ok := p.next()
		if !ok {
			break
		}
		w := p.stdout
		if ev.Stream == Stderr {
			w = p.stderr
		}
		if w != nil {
			if _, err := w.Write(ev.Data); err != nil {
				p.err = &Error{Op: p.op, Code: connect.CodeAborted, Message: "write output: " + err.Error(), Err: err}
				p.release()
				break
			}
		}
		// A Writer must not keep what it was given: the buffer can take
		// the next message's output.
		wirecodec.Release(ev.Data)
	}
	if p.err != nil {
		return nil, p.err
	}
	return p.exit, nil
}

// Close stops following the output: a running Events or Wait returns an
// error (ErrCanceled). The process goes on.
func (p *Process) Close() error {
	p.cancel()
	return nil
}

// release frees the stream; only the reading goroutine calls it.
func (p *Process) release() {
	p.closeOnce.Do(func() {
		p.cancel()
		p.close()
	})
}

func (p *Process) sel() *pb.ProcessSelector { return Selector{PID: p.PID}.proto() }

// SendStdin writes data to the process's input: its stdin pipe (the
// process needs Command.Stdin), or its terminal when PTY is set.
func (p *Process) SendStdin(ctx context.Context, data []byte) error {
	// envd takes at most a few MiB in one message: send more in pieces, in
	// order.
	for first := true; first || len(data) > 0; first = false {
		n := min(len(data), maxInputMessage)
		in := &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: data[:n]}}
		if p.PTY {
			in.Input = &pb.ProcessInput_Pty{Pty: data[:n]}
		}
		if _, err := p.c.proc.SendInput(ctx, request(p.c, &pb.SendInputRequest{Process: p.sel(), Input: in}, "")); err != nil {
			return rpcError(fmt.Sprintf("send input to process %d", p.PID), err)
		}
		data = data[n:]
	}
	return nil
}

// maxInputMessage is the most input SendStdin puts in one message: envd
// refuses messages over 6 MiB, and JSON carries bytes as base64.
const maxInputMessage = 4 << 20

// StreamStdin copies r to the process's input (as SendStdin does) over one
// stream until r ends, then returns. It does not close stdin: call
// CloseStdin for that.
func (p *Process) StreamStdin(ctx context.Context, r io.Reader) error {
	op := fmt.Sprintf("stream input to process %d", p.PID)
	s := p.c.proc.StreamInput(ctx)
	p.c.setHeaders(s.RequestHeader(), "")
	start := &pb.StreamInputRequest{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: p.sel()}}}
	sendErr := s.Send(start)
	buf := make([]byte, 32<<10)
	for sendErr == nil {
		n, err := r.Read(buf)
		if n > 0 {
			in := &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: bytes.Clone(buf[:n])}}
			if p.PTY {
				in.Input = &pb.ProcessInput_Pty{Pty: bytes.Clone(buf[:n])}
			}
			sendErr = s.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: in}}})
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				s.CloseAndReceive()
				return &Error{Op: op, Code: connect.CodeAborted, Message: "read input: " + err.Error(), Err: err}
			}
			break
		}
	}
	// A failed Send is io.EOF; the reason comes with the response.
	_, err := s.CloseAndReceive()
	return rpcError(op, err)
}

// CloseStdin closes the process's stdin: it reads EOF.
func (p *Process) CloseStdin(ctx context.Context) error {
	_, err := p.c.proc.CloseStdin(ctx, request(p.c, &pb.CloseStdinRequest{Process: p.sel()}, ""))
	return rpcError(fmt.Sprintf("close stdin of process %d", p.PID), err)
}

// Signal sends sig (SIGTERM or SIGKILL) to the process.
func (p *Process) Signal(ctx context.Context, sig syscall.Signal) error {
	return p.c.Signal(ctx, Selector{PID: p.PID}, sig)
}

// Resize sets the size of the process's terminal.
func (p *Process) Resize(ctx context.Context, size Size) error {
	req := &pb.UpdateRequest{Process: p.sel(), Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: uint32(size.Cols), Rows: uint32(size.Rows)}}}
	_, err := p.c.proc.Update(ctx, request(p.c, req, ""))
	return rpcError(fmt.Sprintf("resize the terminal of process %d", p.PID), err)
}
