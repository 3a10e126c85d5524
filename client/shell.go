package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	shpb "github.com/envd-dev/envd/gen/envd/shell/v1"
)

// Shell sessions (envd.shell.v1): a session is one bash process that
// outlives the calls made to it, so the working directory, variables,
// functions, aliases and options one command sets are there for the
// next, while each command still gives back its own stdout, stderr and
// exit code. Commands of a session run one at a time, in the order they
// came; sessions run at once.

// ShellOptions configures CreateShell. The zero value is a session of the
// client's user in its home, without a terminal.
type ShellOptions struct {
	// User runs the shell, and the session's calls are made as this user
	// (in strict mode only that user reaches it). Zero: the client's User.
	User string
	// Dir is the shell's first working directory; relative paths start
	// from the user's home. Zero: the home.
	Dir string
	// Env is exported in the shell, on top of the user's environment.
	Env map[string]string
	// PTY gives the shell a terminal of this size: its commands' stdout
	// and stderr then arrive together, as PTY output. Zero: pipes, stdout
	// and stderr apart.
	PTY *Size
	// Tag names the session for people (ListShells shows it); it need not
	// be unique.
	Tag string
}

// ShellInfo describes a session, as ListShells and State report it.
type ShellInfo struct {
	ID   string
	Tag  string
	User string
	// PID is the shell's process id in the sandbox.
	PID uint32
	// PTY tells whether the shell runs in a terminal.
	PTY     bool
	Created time.Time
	// Commands counts the commands run so far; Busy tells whether one
	// runs now.
	Commands uint64
	Busy     bool
}

func shellInfo(s *shpb.Session) ShellInfo {
	out := ShellInfo{
		ID: s.GetId(), Tag: s.GetTag(), User: s.GetUser(), PID: s.GetPid(), PTY: s.GetPty(),
		Commands: s.GetCommands(), Busy: s.GetBusy(),
	}
	if t := s.GetCreated(); t != nil {
		out.Created = t.AsTime()
	}
	return out
}

// ShellState is a session's shell as State finds it.
type ShellState struct {
	ShellInfo
	// Dir is the shell's working directory now.
	Dir string
	// Env is the shell's exported environment as of the end of its last
	// command (or its start).
	Env map[string]string
	// Running is the command running now; nil when the session is idle.
	Running *ShellCommandInfo
	// Queued counts the commands waiting behind it.
	Queued int
	// LastExitCode is $? after the last command (0 before any).
	LastExitCode int
}

// ShellCommandInfo describes a command of a session.
type ShellCommandInfo struct {
	ID string
	// Seq numbers the session's commands from 1.
	Seq     uint64
	Command string
	Started time.Time
}

// ShellSession is a handle on a session: CreateShell makes one, and
// Client.ShellSession gives one for a session's id. Its methods may be
// called from any goroutine.
type ShellSession struct {
	// ID is the session's id.
	ID string
	// Info is the session as CreateShell found it; from
	// Client.ShellSession, only Info.ID is set (State reads the rest).
	Info ShellInfo

	c    *Client
	user string // the user the session's calls are made as ("": the client's)
}

// CreateShell starts a session and returns once its shell is ready for a
// command. The session lives until Close, or until a command ends its
// shell (exit, exec, kill -9 $$); it outlives this client.
func (c *Client) CreateShell(ctx context.Context, o ShellOptions) (*ShellSession, error) {
	c.init()
	req := &shpb.CreateRequest{User: o.User, Cwd: o.Dir, Env: o.Env, Tag: o.Tag}
	if o.PTY != nil {
		req.Pty = &shpb.TerminalSize{Cols: uint32(o.PTY.Cols), Rows: uint32(o.PTY.Rows)}
	}
	resp, err := c.shell.Create(ctx, request(c, req, o.User))
	if err != nil {
		return nil, rpcError("create shell", err)
	}
	info := shellInfo(resp.Msg.GetSession())
	return &ShellSession{ID: info.ID, Info: info, c: c, user: o.User}, nil
}

// ShellSession returns a handle on the session with this id, made earlier
// by any client, without asking envd: a session that does not exist
// fails each call with ErrNotFound. Its calls are made as the client's
// User.
func (c *Client) ShellSession(id string) *ShellSession {
	return &ShellSession{ID: id, Info: ShellInfo{ID: id}, c: c}
}

// ListShells lists the live sessions the client's user may see (in strict
// mode, its own; otherwise every one), oldest first.
func (c *Client) ListShells(ctx context.Context) ([]ShellInfo, error) {
	c.init()
	resp, err := c.shell.List(ctx, request(c, &shpb.ListRequest{}, ""))
	if err != nil {
		return nil, rpcError("list shells", err)
	}
	out := make([]ShellInfo, 0, len(resp.Msg.GetSessions()))
	for _, s := range resp.Msg.GetSessions() {
		out = append(out, shellInfo(s))
	}
	return out, nil
}

// State reports the session's shell: its working directory, exported
// environment, pid, and the command running now.
func (s *ShellSession) State(ctx context.Context) (*ShellState, error) {
	s.c.init()
	resp, err := s.c.shell.State(ctx, request(s.c, &shpb.StateRequest{SessionId: s.ID}, s.user))
	if err != nil {
		return nil, rpcError("state of shell "+s.ID, err)
	}
	m := resp.Msg
	st := &ShellState{
		ShellInfo: shellInfo(m.GetSession()), Dir: m.GetCwd(), Env: m.GetEnv(),
		Queued: int(m.GetQueued()), LastExitCode: int(m.GetLastExitCode()),
	}
	if r := m.GetRunning(); r != nil {
		st.Running = &ShellCommandInfo{ID: r.GetCommandId(), Seq: r.GetSeq(), Command: r.GetCommand()}
		if t := r.GetStarted(); t != nil {
			st.Running.Started = t.AsTime()
		}
	}
	return st, nil
}

// Close ends the session: the command running now and the shell's whole
// process tree end, and commands still waiting end with
// ShellSessionEnded.
func (s *ShellSession) Close(ctx context.Context) error {
	s.c.init()
	_, err := s.c.shell.Close(ctx, request(s.c, &shpb.CloseRequest{SessionId: s.ID}, s.user))
	return rpcError("close shell "+s.ID, err)
}

// Interrupt ends the command running now in the session, whoever started
// it (SIGINT to its process tree, SIGKILL to what is left after a grace);
// the session stays. It reports whether a command was running. To end a
// command of your own, ShellCommand.Interrupt is safer.
func (s *ShellSession) Interrupt(ctx context.Context) (bool, error) {
	s.c.init()
	resp, err := s.c.shell.Interrupt(ctx, request(s.c, &shpb.InterruptRequest{SessionId: s.ID}, s.user))
	if err != nil {
		return false, rpcError("interrupt shell "+s.ID, err)
	}
	return resp.Msg.GetInterrupted(), nil
}

// SendInput writes data to the stdin of the command running now in the
// session (in a session with a terminal, to the terminal). That command's
// Run must have set ShellRunOptions.Stdin: envd refuses input otherwise.
// Send it once the command has started (OnStarted), not while it waits:
// input goes to whatever command runs when it arrives.
// ShellCommand.SendInput goes to its command only.
func (s *ShellSession) SendInput(ctx context.Context, data []byte) error {
	s.c.init()
	// envd takes at most a few MiB in one message: send more in pieces,
	// in order.
	for first := true; first || len(data) > 0; first = false {
		n := min(len(data), maxInputMessage)
		if _, err := s.c.shell.SendInput(ctx, request(s.c, &shpb.SendInputRequest{SessionId: s.ID, Data: data[:n]}, s.user)); err != nil {
			return rpcError("send input to shell "+s.ID, err)
		}
		data = data[n:]
	}
	return nil
}

// CloseInput closes the stdin of the command running now in the session:
// it reads end-of-file.
func (s *ShellSession) CloseInput(ctx context.Context) error {
	s.c.init()
	_, err := s.c.shell.CloseInput(ctx, request(s.c, &shpb.CloseInputRequest{SessionId: s.ID}, s.user))
	return rpcError("close input of shell "+s.ID, err)
}

// ShellRunOptions configures Run and Start. The zero value runs the
// command with no timeout and no input (it reads end-of-file), and Run
// collects its output into the result.
type ShellRunOptions struct {
	// Timeout, if positive, ends the command (as Interrupt does) once it
	// has run that long: ShellTimedOut. Time spent waiting behind other
	// commands does not count.
	Timeout time.Duration
	// Input is written to the command's stdin first; then it reads
	// end-of-file, unless Stdin. At most 4 MiB: send more with SendInput.
	Input []byte
	// Stdin keeps the command's stdin open after Input, for SendInput and
	// CloseInput on the session.
	Stdin bool
	// Stdout and Stderr receive the command's output as it comes (a
	// terminal's goes to Stdout). A nil one leaves that output to the
	// result's Stdout or Stderr.
	Stdout, Stderr io.Writer
	// MaxOutput bounds what the result keeps of each of stdout and stderr
	// when no writer takes it: the first MaxOutput bytes are kept, the
	// rest counted in ShellResult.Truncated. Zero: 16 MiB; negative: no
	// bound.
	MaxOutput int
	// OnQueued is called while the command waits behind others of its
	// session: ahead is how many run or wait before it.
	OnQueued func(ahead int)
	// OnStarted is called when the command starts: seq numbers the
	// session's commands from 1.
	OnStarted func(seq uint64)
	// KeepRunning makes Run leave the command running when its context
	// ends. Zero: Run interrupts it, as exec.CommandContext kills its
	// process.
	KeepRunning bool
}

// defaultMaxOutput is what a ShellResult keeps of each stream by default.
const defaultMaxOutput = 16 << 20

// ShellEndReason is why a command ended. Its values are the wire's
// (envd.shell.v1.EndReason).
type ShellEndReason int

const (
	ShellEndUnknown   ShellEndReason = iota
	ShellExited                      // the command finished: ExitCode is its $?
	ShellSignaled                    // a signal ended its last process: Signal is it, ExitCode 128+Signal
	ShellTimedOut                    // its Timeout ran out and envd ended it
	ShellInterrupted                 // Interrupt ended it
	ShellSessionEnded                // the session ended (the command ended the shell, Close, the shell died) before it finished or started
)

func (r ShellEndReason) String() string {
	switch r {
	case ShellExited:
		return "exited"
	case ShellSignaled:
		return "signaled"
	case ShellTimedOut:
		return "timed out"
	case ShellInterrupted:
		return "interrupted"
	case ShellSessionEnded:
		return "session ended"
	}
	return "unknown"
}

// ShellResult is how a command ended, and its output.
type ShellResult struct {
	// CommandID is the command's id (for ShellSession.Connect), Seq its
	// number in the session (0 when it never started).
	CommandID string
	Seq       uint64
	Reason    ShellEndReason
	// ExitCode is the command's status as bash sets $?: 128+n when
	// signal n ended it. For ShellSessionEnded, the shell's exit status,
	// or -1 when a signal ended the shell.
	ExitCode int
	// Signal is the signal that ended the command (ShellSignaled), or the
	// shell (ShellSessionEnded); 0 otherwise.
	Signal syscall.Signal
	// Message says what happened in words, when the command did not just
	// exit: "the command ended the session: exit status 3".
	Message string
	// Stdout and Stderr are the output no writer took (a terminal's is in
	// Stdout), at most MaxOutput bytes each; Truncated counts the bytes
	// left out of them.
	Stdout, Stderr []byte
	Truncated      uint64
	// LostBytes counts output envd's log dropped before it was read:
	// missing from the output, wherever it went.
	LostBytes uint64
	// Duration is how long the command ran.
	Duration time.Duration
}

// Success tells whether the command exited with status 0.
func (r *ShellResult) Success() bool { return r.Reason == ShellExited && r.ExitCode == 0 }

// String describes the end in a few words: "exit status 3", "timed out:
// ...".
func (r *ShellResult) String() string {
	var s string
	switch r.Reason {
	case ShellExited:
		return fmt.Sprintf("exit status %d", r.ExitCode)
	case ShellSignaled:
		s = fmt.Sprintf("signal %d", int(r.Signal))
	default:
		s = r.Reason.String()
	}
	if r.Message != "" {
		s += ": " + r.Message
	}
	return s
}

// Run runs command (bash source, one line or many, as if typed) in the
// session, waits for it, and returns its output and how it ended. A status
// other than 0 is not an error, nor is a timeout or the session's end:
// look at ShellResult. An error means the command could not be run or
// followed to its end.
//
// When ctx ends first, Run interrupts the command (unless KeepRunning):
// running, it is ended; still waiting behind others, it never starts. Run
// then returns ctx's error.
func (s *ShellSession) Run(ctx context.Context, command string, o ShellRunOptions) (*ShellResult, error) {
	cmd, err := s.Start(ctx, command, o)
	if err != nil {
		return nil, err
	}
	res, err := cmd.Wait()
	if err != nil && ctx.Err() != nil && !o.KeepRunning {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killGrace)
		defer cancel()
		if _, kerr := cmd.Interrupt(kctx); kerr != nil && !errors.Is(kerr, ErrNotFound) && !errors.Is(kerr, ErrFailedPrecondition) {
			return nil, fmt.Errorf("%w (and interrupting command %s failed: %v)", err, cmd.ID(), kerr)
		}
	}
	return res, err
}

// Start sends command (bash source) to the session and returns once envd
// has taken it: it runs now, or waits behind others of the session. Follow
// it with Events or Wait on the returned handle. The command runs to its
// end (or Timeout) even if nobody follows it.
func (s *ShellSession) Start(ctx context.Context, command string, o ShellRunOptions) (*ShellCommand, error) {
	s.c.init()
	op := "run in shell " + s.ID
	if len(o.Input) > maxInputMessage {
		return nil, &Error{Op: op, Code: connect.CodeInvalidArgument, Message: fmt.Sprintf("input of %d bytes: Input takes at most %d; send more with Stdin and SendInput", len(o.Input), maxInputMessage)}
	}
	req := &shpb.RunRequest{SessionId: s.ID, Command: command, Stdin: o.Stdin, Input: o.Input}
	if o.Timeout != 0 {
		// A negative one goes too: envd says what is wrong with it.
		req.Timeout = durationpb.New(o.Timeout)
	}
	sctx, cancel := streamContext(ctx, 0)
	stream, err := s.c.shellOut.Run(sctx, request(s.c, req, s.user))
	if err != nil {
		cancel()
		return nil, rpcError(op, err)
	}
	cmd := s.newCommand(ctx, op, o, shellReceiver(stream, (*shpb.RunResponse).GetEvent), stream.Close, cancel)
	if err := cmd.awaitFirst(); err != nil {
		return nil, err
	}
	return cmd, nil
}

// Connect follows a command of the session, started earlier by any
// client: commandID's, or with "" the one running now, else the last. It
// replays the command's output from its start (what envd's log still
// holds; the rest is counted in ShellResult.LostBytes), then follows it
// live to its end. o's writers, MaxOutput and callbacks apply; its Timeout
// and input do not.
func (s *ShellSession) Connect(ctx context.Context, commandID string, o ShellRunOptions) (*ShellCommand, error) {
	s.c.init()
	op := "connect to shell " + s.ID
	if commandID != "" {
		op = fmt.Sprintf("connect to command %s of shell %s", commandID, s.ID)
	}
	sctx, cancel := streamContext(ctx, 0)
	stream, err := s.c.shellOut.Connect(sctx, request(s.c, &shpb.ConnectRequest{SessionId: s.ID, CommandId: commandID}, s.user))
	if err != nil {
		cancel()
		return nil, rpcError(op, err)
	}
	cmd := s.newCommand(ctx, op, o, shellReceiver(stream, (*shpb.ConnectResponse).GetEvent), stream.Close, cancel)
	if err := cmd.awaitFirst(); err != nil {
		return nil, err
	}
	return cmd, nil
}

// newCommand is the handle on a command whose events recv reads.
func (s *ShellSession) newCommand(ctx context.Context, op string, o ShellRunOptions, recv func() (*shpb.Event, error), closeFn func() error, cancel context.CancelFunc) *ShellCommand {
	cmd := &ShellCommand{s: s, ctx: ctx, op: op, opts: o, recv: recv, close: closeFn, cancel: cancel}
	limit := o.MaxOutput
	switch {
	case limit == 0:
		limit = defaultMaxOutput
	case limit < 0:
		limit = -1
	}
	cmd.stdout.limit, cmd.stderr.limit = limit, limit
	return cmd
}

// shellReceiver adapts a stream to one function: the next event, or nil
// and the stream's error (nil at a clean end).
func shellReceiver[T any](s serverStream[T], event func(*T) *shpb.Event) func() (*shpb.Event, error) {
	return func() (*shpb.Event, error) {
		if !s.Receive() {
			return nil, s.Err()
		}
		return event(s.Msg()), nil
	}
}

// ShellCommand is a handle on a command of a session, from Start or
// Connect. Events and Wait follow it; call one of them from one goroutine.
// ID, Seq, Interrupt and Close may be called from any goroutine.
type ShellCommand struct {
	s      *ShellSession
	ctx    context.Context
	op     string
	opts   ShellRunOptions
	recv   func() (*shpb.Event, error)
	close  func() error
	cancel context.CancelFunc

	closeOnce sync.Once
	first     *shpb.Event // the event awaitFirst read, not yet handled

	mu    sync.Mutex
	id    string // guarded by mu
	seq   uint64 // guarded by mu: set once started
	ended bool   // guarded by mu: the end arrived

	res            *ShellResult // set when the end arrived
	err            error        // set when the stream failed
	stdout, stderr cappedBuffer
}

// ID is the command's id (for ShellSession.Connect).
func (x *ShellCommand) ID() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.id
}

// Seq is the command's number in its session, from 1: 0 while it waits.
func (x *ShellCommand) Seq() uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.seq
}

// Interrupt ends the command: if it runs, as ShellSession.Interrupt does;
// if it still waits behind others, it never starts (its result says
// ShellInterrupted). It reports whether it did either: a command that has
// ended is left alone. Another command of the session is never hit in its
// place.
func (x *ShellCommand) Interrupt(ctx context.Context) (bool, error) {
	x.mu.Lock()
	id, ended := x.id, x.ended
	x.mu.Unlock()
	if ended || id == "" {
		return false, nil
	}
	s := x.s
	s.c.init()
	resp, err := s.c.shell.Interrupt(ctx, request(s.c, &shpb.InterruptRequest{SessionId: s.ID, CommandId: id}, s.user))
	if err != nil {
		return false, rpcError("interrupt command "+id+" of shell "+s.ID, err)
	}
	return resp.Msg.GetInterrupted(), nil
}

// SendInput writes data to the command's stdin (its terminal, in a session
// with one) while it runs; its Run must have set ShellRunOptions.Stdin.
// Unlike ShellSession.SendInput, input never reaches another command: sent
// before the command started or after it ended, it fails with
// ErrFailedPrecondition.
func (x *ShellCommand) SendInput(ctx context.Context, data []byte) error {
	id := x.ID()
	s := x.s
	s.c.init()
	for first := true; first || len(data) > 0; first = false {
		n := min(len(data), maxInputMessage)
		if _, err := s.c.shell.SendInput(ctx, request(s.c, &shpb.SendInputRequest{SessionId: s.ID, CommandId: id, Data: data[:n]}, s.user)); err != nil {
			return rpcError("send input to command "+id+" of shell "+s.ID, err)
		}
		data = data[n:]
	}
	return nil
}

// CloseInput closes the command's stdin while it runs: it reads
// end-of-file.
func (x *ShellCommand) CloseInput(ctx context.Context) error {
	id := x.ID()
	s := x.s
	s.c.init()
	_, err := s.c.shell.CloseInput(ctx, request(s.c, &shpb.CloseInputRequest{SessionId: s.ID, CommandId: id}, s.user))
	return rpcError("close input of command "+id+" of shell "+s.ID, err)
}

// awaitFirst reads the first event (queued, started or end), which tells
// the command's id; envd's refusal comes instead of it.
func (x *ShellCommand) awaitFirst() error {
	for {
		ev, err := x.recv()
		if ev == nil {
			x.release()
			if err == nil {
				err = errors.New("the stream ended before the command started")
			}
			return streamError(x.ctx, x.op, err)
		}
		switch e := ev.GetEvent().(type) {
		case *shpb.Event_Keepalive:
			continue
		case *shpb.Event_Queued:
			x.setID(e.Queued.GetCommandId())
		case *shpb.Event_Started:
			x.setID(e.Started.GetCommandId())
		case *shpb.Event_End:
			x.setID(e.End.GetCommandId())
		case *shpb.Event_Output:
			// A replay whose start the log dropped: the id comes at the end.
		default:
			continue
		}
		x.first = ev
		return nil
	}
}

func (x *ShellCommand) setID(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.id == "" {
		x.id = id
		x.op = "follow command " + id + " of shell " + x.s.ID
	}
}

// next returns the next output event; false once the command ended (res
// set) or the stream failed (err set).
func (x *ShellCommand) next() (Event, bool) {
	for x.res == nil && x.err == nil {
		ev := x.first
		x.first = nil
		if ev == nil {
			var err error
			ev, err = x.recv()
			if ev == nil {
				x.release()
				if err == nil {
					x.err = &Error{Op: x.op, Code: connect.CodeInternal, Message: "the stream ended without the command's end"}
				} else {
					x.err = streamError(x.ctx, x.op, err)
				}
				return Event{}, false
			}
		}
		switch e := ev.GetEvent().(type) {
		case *shpb.Event_Queued:
			x.setID(e.Queued.GetCommandId())
			if x.opts.OnQueued != nil {
				x.opts.OnQueued(int(e.Queued.GetAhead()))
			}
		case *shpb.Event_Started:
			x.setID(e.Started.GetCommandId())
			x.mu.Lock()
			x.seq = e.Started.GetSeq()
			x.mu.Unlock()
			if x.opts.OnStarted != nil {
				x.opts.OnStarted(e.Started.GetSeq())
			}
		case *shpb.Event_Output:
			switch d := e.Output.GetData().(type) {
			case *shpb.Output_Stdout:
				return Event{Stream: Stdout, Data: d.Stdout}, true
			case *shpb.Output_Stderr:
				return Event{Stream: Stderr, Data: d.Stderr}, true
			case *shpb.Output_Pty:
				return Event{Stream: PTY, Data: d.Pty}, true
			}
		case *shpb.Event_End:
			x.end(e.End)
			x.release()
		}
		// Keepalives carry nothing.
	}
	return Event{}, false
}

// end records the command's end.
func (x *ShellCommand) end(e *shpb.End) {
	x.setID(e.GetCommandId())
	x.mu.Lock()
	x.ended = true
	seq := x.seq
	x.mu.Unlock()
	x.res = &ShellResult{
		CommandID: x.ID(), Seq: seq, Reason: ShellEndReason(e.GetReason()),
		ExitCode: int(e.GetExitCode()), Signal: syscall.Signal(e.GetSignal()), Message: e.GetMessage(),
		LostBytes: e.GetLostBytes(),
	}
	if d := e.GetDuration(); d != nil {
		x.res.Duration = d.AsDuration()
	}
}

// Events iterates over the command's output until it ends; then Wait
// returns its end at once. The output Events yields goes to neither the
// writers of ShellRunOptions nor the result. A failed stream yields its
// error last.
func (x *ShellCommand) Events() iter.Seq2[Event, error] {
	return eventSeq(x.next, func() error { return x.err })
}

// Wait follows the command to its end, its output going to the writers of
// ShellRunOptions (or into the result), and returns how it ended. An
// error means the command could not be followed to its end: it may still
// run (Connect finds it again).
func (x *ShellCommand) Wait() (*ShellResult, error) {
	for {
		ev, ok := x.next()
		if !ok {
			break
		}
		w, buf := x.opts.Stdout, &x.stdout
		if ev.Stream == Stderr {
			w, buf = x.opts.Stderr, &x.stderr
		}
		if w == nil {
			buf.write(ev.Data)
			continue
		}
		if _, err := w.Write(ev.Data); err != nil {
			x.err = &Error{Op: x.op, Code: connect.CodeAborted, Message: "write output: " + err.Error(), Err: err}
			x.release()
			break
		}
	}
	if x.err != nil {
		return nil, x.err
	}
	res := *x.res
	res.Stdout, res.Stderr = x.stdout.b.Bytes(), x.stderr.b.Bytes()
	res.Truncated = x.stdout.dropped + x.stderr.dropped
	return &res, nil
}

// Close stops following the command: a running Events or Wait returns an
// error (ErrCanceled). The command goes on.
func (x *ShellCommand) Close() error {
	x.cancel()
	return nil
}

// release frees the stream; only the reading goroutine calls it.
func (x *ShellCommand) release() {
	x.closeOnce.Do(func() {
		x.cancel()
		x.close()
	})
}

// cappedBuffer keeps the first limit bytes written to it (all of them when
// limit is negative) and counts the rest.
type cappedBuffer struct {
	b       bytes.Buffer
	limit   int
	dropped uint64
}

func (c *cappedBuffer) write(p []byte) {
	if c.limit >= 0 && c.b.Len()+len(p) > c.limit {
		keep := max(c.limit-c.b.Len(), 0)
		c.dropped += uint64(len(p) - keep)
		p = p[:keep]
	}
	c.b.Write(p)
}
