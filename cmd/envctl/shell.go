package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/envd-dev/envd/client"
)

// envctl shell: persistent shell sessions (envd.shell.v1). A session is a
// bash whose state (cwd, variables, functions, options) carries from one
// command to the next; `shell run` runs one command in it as if it were
// local, `shell attach` is a prompt over it.

type shellOpts struct {
	cwd     string
	tag     string
	env     envFlag
	pty     bool
	timeout time.Duration
	noStdin bool
	json    bool
}

const shellUsage = "create [--cwd DIR] [--user USER] [--env KEY=VALUE]... [--tag TAG] [--pty] | run ID [--timeout DURATION] [--no-stdin] -- COMMAND... | attach ID | list [--json] | state ID [--json] | close ID..."

var shellCommand = &command{
	words:        []string{"create", "run", "attach", "list", "state", "close"},
	noFiles:      true,
	name:         "shell",
	args:         shellUsage,
	summary:      "persistent shell sessions (cwd and variables carry over): create one, run a command in it (exit with its code), attach (a prompt), list, state, close",
	interspersed: true,
	flags: func(fs *flag.FlagSet) any {
		o := &shellOpts{}
		fs.StringVar(&o.cwd, "cwd", "", "create: the shell's first working `DIR` (default: the user's home)")
		fs.Var(&o.env, "env", "create: export an environment variable, `KEY=VALUE`, or KEY for its local value (repeatable)")
		fs.StringVar(&o.tag, "tag", "", "create: name the session with `TAG`, for shell list")
		fs.BoolVar(&o.pty, "pty", false, "create: give the shell a terminal (its commands' stdout and stderr then come together)")
		fs.Var(durationFlag{&o.timeout}, "timeout", "run: end the command after this `DURATION`, e.g. 30s or 5m (default: none); envctl then exits 124")
		fs.BoolVar(&o.noStdin, "no-stdin", false, "run: give the command no input instead of envctl's stdin")
		fs.BoolVar(&o.json, "json", false, "list, state: print JSON (snake_case names)")
		return o
	},
	run: runShell,
}

// Exit codes of `shell run` and `shell attach` beyond the command's own.
const (
	exitTimedOut    = 124 // the command ran out of its --timeout, as timeout(1)
	exitInterrupted = 130 // Ctrl-C (an Interrupt) ended the command, as a shell says 128+SIGINT
	exitNoStatus    = 255 // the session ended without a status (a signal we cannot name), as ssh
)

func runShell(ctx context.Context, e *env, opts any, args []string) error {
	o := opts.(*shellOpts)
	if len(args) == 0 {
		return usageError{"shell: give create, run, attach, list, state or close (usage: envctl shell " + shellUsage + ")"}
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "ls":
		sub = "list"
	case "rm":
		sub = "close"
	}
	only := func(flagName string, set bool, subs ...string) error {
		if set && !slices.Contains(subs, sub) {
			return usageError{fmt.Sprintf("shell %s: --%s is for shell %s", sub, flagName, strings.Join(subs, ", shell "))}
		}
		return nil
	}
	for _, err := range []error{
		only("cwd", o.cwd != "", "create"), only("env", o.env != nil, "create"), only("tag", o.tag != "", "create"),
		only("pty", o.pty, "create"), only("timeout", o.timeout != 0, "run"), only("no-stdin", o.noStdin, "run"),
		only("json", o.json, "list", "state"),
	} {
		if err != nil {
			return err
		}
	}
	oneID := func(usage string) (string, error) {
		switch {
		case len(rest) == 0:
			return "", usageError{fmt.Sprintf("shell %s: give the ID of a session (usage: envctl shell %s; envctl shell list lists them)", sub, usage)}
		case len(rest) > 1:
			return "", usageError{fmt.Sprintf("shell %s: unexpected argument %q (usage: envctl shell %s)", sub, rest[1], usage)}
		}
		return rest[0], nil
	}
	switch sub {
	case "create":
		if len(rest) > 0 {
			return usageError{fmt.Sprintf("shell create: unexpected argument %q (usage: envctl shell create [--cwd DIR] [--user USER] [--env KEY=VALUE]... [--tag TAG] [--pty])", rest[0])}
		}
		return shellCreate(ctx, e, o)
	case "run":
		if len(rest) == 0 {
			return usageError{"shell run: give the ID of a session and a command (usage: envctl shell run ID [--timeout DURATION] -- COMMAND...)"}
		}
		if len(rest) == 1 {
			return usageError{"shell run: no command given (usage: envctl shell run ID [--timeout DURATION] -- COMMAND...)"}
		}
		return shellRun(ctx, e, o, rest[0], strings.Join(rest[1:], " "))
	case "attach":
		id, err := oneID("attach ID")
		if err != nil {
			return err
		}
		return shellAttach(ctx, e, id)
	case "list":
		if len(rest) > 0 {
			return usageError{fmt.Sprintf("shell list: unexpected argument %q (usage: envctl shell list [--json])", rest[0])}
		}
		return shellList(ctx, e, o.json)
	case "state":
		id, err := oneID("state ID [--json]")
		if err != nil {
			return err
		}
		return shellState(ctx, e, id, o.json)
	case "close":
		if len(rest) == 0 {
			return usageError{"shell close: give the ID of a session (usage: envctl shell close ID...; envctl shell list lists them)"}
		}
		for _, id := range rest {
			if err := e.c.ShellSession(id).Close(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	return usageError{fmt.Sprintf("shell: unknown subcommand %q: give create, run, attach, list, state or close", sub)}
}

// shellCreate starts a session and prints its id alone.
func shellCreate(ctx context.Context, e *env, o *shellOpts) error {
	so := client.ShellOptions{Dir: o.cwd, Env: o.env, Tag: o.tag}
	if o.pty {
		size := client.Size{Cols: 80, Rows: 24}
		if f, ok := e.stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			if w, h, err := term.GetSize(int(f.Fd())); err == nil && w > 0 && h > 0 {
				size = client.Size{Cols: uint16(w), Rows: uint16(h)}
			}
		}
		so.PTY = &size
		if so.Env == nil {
			so.Env = map[string]string{}
		}
		if _, ok := so.Env["TERM"]; !ok {
			t := os.Getenv("TERM")
			if t == "" || t == "dumb" {
				t = "xterm-256color"
			}
			so.Env["TERM"] = t
		}
	}
	s, err := e.c.CreateShell(ctx, so)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(e.stdout, s.ID)
	return err
}

// maxInlineInput is the most of a file given as stdin that `shell run`
// sends with the command itself (ShellRunOptions.Input takes 4 MiB): a
// larger file, a pipe or a socket is streamed once the command starts.
const maxInlineInput = 1 << 20

// shellInput is how `shell run` gives envctl's stdin to the command: as
// Input (inline), streamed from r once the command starts, or not at all
// (both nil).
func shellInput(stdin io.Reader, noStdin bool) (inline []byte, r io.Reader, err error) {
	if noStdin || stdin == nil {
		return nil, nil, nil
	}
	f, ok := stdin.(*os.File)
	if !ok {
		return nil, stdin, nil
	}
	if term.IsTerminal(int(f.Fd())) {
		// Typing is for attach: a command run here reads end-of-file.
		return nil, nil, nil
	}
	st, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("shell run: stdin: %w", err)
	}
	if null, err := os.Stat(os.DevNull); err == nil && os.SameFile(st, null) {
		return nil, nil, nil
	}
	if st.Mode().IsRegular() && st.Size() <= maxInlineInput {
		b, err := io.ReadAll(io.LimitReader(f, maxInlineInput+1))
		if err != nil {
			return nil, nil, fmt.Errorf("shell run: read stdin: %w", err)
		}
		if len(b) <= maxInlineInput {
			return b, nil, nil
		}
		// It grew while read: send what came, then the rest.
		return nil, io.MultiReader(bytes.NewReader(b), f), nil
	}
	return nil, f, nil
}

// shellRun runs one command in session id as if it ran here: its stdout
// and stderr to envctl's, envctl's stdin (not a terminal) as its input,
// and envctl exits with its code (shellExitCode).
func shellRun(ctx context.Context, e *env, o *shellOpts, id, command string) error {
	inline, stream, err := shellInput(e.stdin, o.noStdin)
	if err != nil {
		return err
	}
	// Signals to envctl interrupt the command: INT, TERM or HUP, once it
	// runs; a second one stops following it. They are caught before Start
	// so none is lost; ctx (cancelled by them too) must not end the calls.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	ctx = context.WithoutCancel(ctx)

	s := e.c.ShellSession(id)
	f := newShellFollower(ctx, e, s)
	f.leaveOnSecond = true
	defer f.stopPipe()
	ro := client.ShellRunOptions{
		Timeout: o.timeout, Input: inline, Stdin: stream != nil,
		Stdout: f.stdout, Stderr: f.stderr,
		OnQueued: f.queued,
	}
	var copyDone chan struct{}
	stopCopy := func() {}
	// OnStarted may come before Start returns the command, which the
	// copy's input goes to (never to a later command of the session).
	started := make(chan *client.ShellCommand, 1)
	ro.OnStarted = func(uint64) {
		f.started()
		if stream == nil {
			return
		}
		cctx, cancel := context.WithCancel(ctx)
		stopCopy = cancel
		copyDone = make(chan struct{})
		go func() {
			defer close(copyDone)
			select {
			case cmd := <-started:
				sendInput(cctx, cmd, stream)
			case <-cctx.Done():
			}
		}()
	}
	cmd, err := s.Start(ctx, command, ro)
	if err != nil {
		stopCopy()
		return err
	}
	started <- cmd
	defer cmd.Close()
	f.watch(cmd, sigs)
	defer f.stop()
	res, err := cmd.Wait()
	stopCopy()
	if copyDone != nil && !isFile(stream) {
		// A reader of envctl's own (a test's) can be waited for; a file
		// may block in read for good, and envctl exits anyway.
		<-copyDone
	}
	if err != nil {
		return f.failed(cmd, err)
	}
	explainEnd(e, res, o.timeout)
	if code := shellExitCode(res); code != 0 {
		return exitError{code: code}
	}
	return nil
}

func isFile(r io.Reader) bool {
	_, ok := r.(*os.File)
	return ok
}

// sendInput copies r to the command's stdin, then closes it, until ctx
// ends (the command's end). Failures are left to the command's end to
// explain: it ended before reading it all.
func sendInput(ctx context.Context, s *client.ShellCommand, r io.Reader) {
	buf := make([]byte, 256<<10)
	for ctx.Err() == nil {
		n, err := r.Read(buf)
		if n > 0 && ctx.Err() == nil {
			if s.SendInput(ctx, buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) && ctx.Err() == nil {
				s.CloseInput(ctx)
			}
			return
		}
	}
}

// shellFollower follows a command for shell run and attach. It turns
// signals into interrupts of the command (once it has started: a command
// still waiting is interrupted as it starts); with leaveOnSecond the next
// signal stops following it. And it writes the command's output, ending
// the command when envctl's stdout or stderr fails, as SIGPIPE would end
// it here, rather than leave it running and the session busy.
type shellFollower struct {
	ctx            context.Context
	e              *env
	s              *client.ShellSession
	stdout, stderr *outWriter
	pipe           chan os.Signal // SIGPIPE: writes to a closed pipe fail instead
	// leaveOnSecond: a second signal stops following the command (shell
	// run); otherwise each one interrupts it again (attach).
	leaveOnSecond bool

	mu      sync.Mutex
	cmd     *client.ShellCommand // guarded by mu
	run     bool                 // guarded by mu: the command has started
	want    bool                 // guarded by mu: a signal asked to interrupt it
	left    bool                 // guarded by mu: a second signal stopped following it
	queuedN int                  // guarded by mu: 1 + the last ahead told, 0 before any

	done chan struct{}
	wg   sync.WaitGroup
}

func newShellFollower(ctx context.Context, e *env, s *client.ShellSession) *shellFollower {
	f := &shellFollower{ctx: ctx, e: e, s: s, stdout: &outWriter{w: e.stdout}, stderr: &outWriter{w: e.stderr}}
	// Without this, a write to a closed stdout would end envctl (Go's
	// SIGPIPE rule for fds 1 and 2) and leave the command running.
	f.pipe = make(chan os.Signal, 1)
	signal.Notify(f.pipe, syscall.SIGPIPE)
	return f
}

func (f *shellFollower) stopPipe() { signal.Stop(f.pipe) }

// outWriter is a writer of the command's output that remembers its
// failure: the reader of envctl's output went away.
type outWriter struct {
	w      io.Writer
	failed error
}

func (o *outWriter) Write(p []byte) (int, error) {
	n, err := o.w.Write(p)
	if err != nil && o.failed == nil {
		o.failed = err
	}
	return n, err
}

// failed is the error of a command that could not be followed to its end.
// After a second signal it runs on; when its output could not be written,
// it is interrupted, and a closed pipe is exit 141 (128+SIGPIPE) without a
// word, as a shell's pipeline says nothing of it.
func (f *shellFollower) failed(cmd *client.ShellCommand, err error) error {
	if f.leaving() {
		return exitError{code: exitInterrupted, msg: fmt.Sprintf("stopped following command %s; it may still run in session %s", cmd.ID(), f.s.ID)}
	}
	werr := f.stdout.failed
	if werr == nil {
		werr = f.stderr.failed
	}
	if werr == nil {
		return err
	}
	ictx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	cmd.Interrupt(ictx)
	if errors.Is(werr, syscall.EPIPE) {
		return exitError{code: 128 + int(syscall.SIGPIPE)}
	}
	return err
}

// queued says, once for each change, that the command waits.
func (f *shellFollower) queued(ahead int) {
	f.mu.Lock()
	same := f.queuedN == ahead+1
	f.queuedN = ahead + 1
	f.mu.Unlock()
	if !same {
		fmt.Fprintf(f.e.stderr, "envctl: waiting for %d command(s) ahead in session %s\n", ahead, f.s.ID)
	}
}

// started records the command's start, and interrupts it if a signal
// came while it waited.
func (f *shellFollower) started() {
	f.mu.Lock()
	f.run = true
	want, cmd := f.want, f.cmd
	f.mu.Unlock()
	if want && cmd != nil {
		f.interrupt(cmd)
	}
}

func (f *shellFollower) interrupt(cmd *client.ShellCommand) {
	f.wg.Go(func() {
		ictx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
		defer cancel()
		cmd.Interrupt(ictx)
	})
}

// watch follows sigs for cmd until stop.
func (f *shellFollower) watch(cmd *client.ShellCommand, sigs <-chan os.Signal) {
	f.mu.Lock()
	f.cmd = cmd
	f.mu.Unlock()
	f.done = make(chan struct{})
	f.wg.Go(func() {
		for {
			select {
			case <-sigs:
			case <-f.done:
				return
			}
			f.mu.Lock()
			second := f.want && f.leaveOnSecond
			f.want = true
			run := f.run
			if second {
				f.left = true
			}
			f.mu.Unlock()
			switch {
			case second:
				cmd.Close()
			case run:
				f.interrupt(cmd)
			}
		}
	})
}

// stop ends watch and waits for the interrupts sent.
func (f *shellFollower) stop() {
	if f.done != nil {
		close(f.done)
	}
	f.wg.Wait()
}

// leaving tells whether a second signal stopped following the command.
func (f *shellFollower) leaving() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.left
}

// explainEnd says on stderr why a command ended when it did not just
// exit (or was signalled), and what of its output was lost.
func explainEnd(e *env, res *client.ShellResult, timeout time.Duration) {
	if res.LostBytes > 0 {
		fmt.Fprintf(e.stderr, "envctl: %s of the command's output were lost: envd's log dropped them before envctl read them\n", bytesText(res.LostBytes))
	}
	// envd's words, else the reason's.
	why := res.Message
	if why == "" {
		why = res.Reason.String()
	}
	switch {
	case res.Reason == client.ShellTimedOut && timeout > 0:
		fmt.Fprintf(e.stderr, "envctl: the command ran out of its %v timeout and was ended\n", timeout)
	case res.Reason == client.ShellTimedOut, res.Reason == client.ShellInterrupted, res.Reason == client.ShellSessionEnded:
		fmt.Fprintf(e.stderr, "envctl: %s\n", oneLine(why))
	}
}

// shellExitCode is envctl's exit code for how a command ended: its status
// as bash gives it ($?, 128+N when signal N ended it), 124 when it ran out
// of its timeout (as timeout(1)), 130 when it was interrupted (as a shell
// after Ctrl-C), and when the session ended, the shell's status (as ssh
// exits with the remote shell's), 128+N for a signal, else 255.
func shellExitCode(res *client.ShellResult) int {
	clamp := func(c int) int {
		if c < 0 || c > 255 {
			return exitNoStatus
		}
		return c
	}
	switch res.Reason {
	case client.ShellExited:
		return clamp(res.ExitCode)
	case client.ShellSignaled:
		if res.Signal != 0 {
			return clamp(128 + int(res.Signal))
		}
		return clamp(res.ExitCode)
	case client.ShellTimedOut:
		return exitTimedOut
	case client.ShellInterrupted:
		return exitInterrupted
	case client.ShellSessionEnded:
		if res.ExitCode >= 0 {
			return clamp(res.ExitCode)
		}
		if res.Signal != 0 {
			return clamp(128 + int(res.Signal))
		}
	}
	return exitNoStatus
}

// shellAttach is a prompt over a session: each line (a line ending in \
// goes on on the next) runs as a command, its output printed as it comes;
// Ctrl-C interrupts it, Ctrl-D leaves. Commands read end-of-file on
// stdin. On a terminal the prompt shows the shell's cwd and the last
// status when not 0; from a pipe or a file, lines run one after another
// without prompts, as bash reads a script. envctl leaves with the last
// command's code (as shell run gives it), or the session's when a command
// ended it.
func shellAttach(ctx context.Context, e *env, id string) error {
	ctx = context.WithoutCancel(ctx)
	s := e.c.ShellSession(id)
	st, err := s.State(ctx)
	if err != nil {
		return err
	}
	var lines lineReader
	interactive := false
	if in, ok := e.stdin.(*os.File); ok && term.IsTerminal(int(in.Fd())) {
		interactive = true
		if out, ok := e.stdout.(*os.File); ok && term.IsTerminal(int(out.Fd())) {
			lines = newTermLines(in, out)
		} else {
			lines = newPlainLines(in, e.stderr)
		}
		fmt.Fprintf(e.stderr, "envctl shell attach: session %s (user %s, pid %d) on %s; Ctrl-D to leave, Ctrl-C to interrupt\n",
			id, st.User, st.PID, e.c.Target())
	} else if e.stdin != nil {
		lines = &plainLines{in: bufio.NewReader(e.stdin), out: io.Discard}
	} else {
		return nil
	}
	// last is the status the prompt shows (the session's, until a
	// command runs here); code is envctl's exit, from this attach's
	// commands only.
	last, code := st.LastExitCode, 0
	for {
		prompt := ""
		if interactive {
			prompt = shellPrompt(st, last)
		}
		command, err := readShellLine(lines, prompt)
		if errors.Is(err, errInterrupted) {
			continue // Ctrl-C at the prompt drops the line
		}
		if errors.Is(err, io.EOF) {
			if interactive {
				fmt.Fprintln(e.stderr)
			}
			if code != 0 {
				return exitError{code: code}
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("shell attach: read: %w", err)
		}
		if strings.TrimSpace(command) == "" {
			continue
		}
		res, err := attachRun(ctx, e, s, command)
		if ee, ok := errors.AsType[exitError](err); ok {
			return ee // envctl's output is gone, or a second Ctrl-C left
		}
		if err != nil {
			fmt.Fprintln(e.stderr, "envctl: "+oneLine(err.Error()))
			if errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrFailedPrecondition) || errors.Is(err, client.ErrUnavailable) {
				// The session is gone, or envd: nothing more can run.
				return exitError{code: exitCode(err)}
			}
			continue
		}
		last = shellExitCode(res)
		code = last
		if res.Reason == client.ShellSessionEnded {
			if code != 0 {
				return exitError{code: code}
			}
			return nil
		}
		if interactive {
			if ns, err := s.State(ctx); err == nil {
				st = ns
			}
		}
	}
}

// attachRun runs one command of attach, Ctrl-C interrupting it.
func attachRun(ctx context.Context, e *env, s *client.ShellSession, command string) (*client.ShellResult, error) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	f := newShellFollower(ctx, e, s)
	defer f.stopPipe()
	cmd, err := s.Start(ctx, command, client.ShellRunOptions{
		Stdout: f.stdout, Stderr: f.stderr,
		OnQueued: f.queued, OnStarted: func(uint64) { f.started() },
	})
	if err != nil {
		return nil, err
	}
	defer cmd.Close()
	f.watch(cmd, sigs)
	defer f.stop()
	res, err := cmd.Wait()
	if err != nil {
		return nil, f.failed(cmd, err)
	}
	explainEnd(e, res, 0)
	return res, nil
}

// readShellLine reads a command: a line, and the next ones while a line
// ends in a backslash (bash joins them).
func readShellLine(lines lineReader, prompt string) (string, error) {
	var b strings.Builder
	for {
		line, err := lines.readLine(prompt)
		if err != nil {
			if errors.Is(err, io.EOF) && b.Len() > 0 {
				return b.String(), nil
			}
			return "", err
		}
		b.WriteString(line)
		if !strings.HasSuffix(line, "\\") {
			return b.String(), nil
		}
		b.WriteByte('\n')
		if prompt != "" {
			prompt = "> "
		}
	}
}

// shellPrompt shows the shell's cwd (~ for its home) and the last status
// when it is not 0: "~/src [1] $ ".
func shellPrompt(st *client.ShellState, last int) string {
	dir := st.Dir
	if home := st.Env["HOME"]; home != "" && home != "/" {
		if dir == home {
			dir = "~"
		} else if rest, ok := strings.CutPrefix(dir, home+"/"); ok {
			dir = "~/" + rest
		}
	}
	if last != 0 {
		return fmt.Sprintf("%s [%d] $ ", dir, last)
	}
	return dir + " $ "
}

func shellList(ctx context.Context, e *env, asJSON bool) error {
	ss, err := e.c.ListShells(ctx)
	if err != nil {
		return err
	}
	slices.SortFunc(ss, func(a, b client.ShellInfo) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if asJSON {
		out := make([]shellJSON, len(ss))
		for i, s := range ss {
			out[i] = toShellJSON(s)
		}
		return printJSON(e.stdout, out)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTAG\tUSER\tPID\tPTY\tBUSY\tCOMMANDS\tCREATED")
	for _, s := range ss {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\n", s.ID, dash(s.Tag), s.User, s.PID, yesNo(s.PTY), yesNo(s.Busy), s.Commands, timeText(s.Created))
	}
	return tw.Flush()
}

func shellState(ctx context.Context, e *env, id string, asJSON bool) error {
	st, err := e.c.ShellSession(id).State(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(e.stdout, toShellStateJSON(st))
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	running := "-"
	if r := st.Running; r != nil {
		running = fmt.Sprintf("#%d %s", r.Seq, quoteIfNeeded(r.Command))
		if !r.Started.IsZero() {
			running += " (since " + r.Started.Local().Format(time.TimeOnly) + ")"
		}
	}
	for _, kv := range [][2]string{
		{"id", st.ID}, {"tag", dash(st.Tag)}, {"user", st.User}, {"pid", strconv.FormatUint(uint64(st.PID), 10)},
		{"pty", yesNo(st.PTY)}, {"created", timeText(st.Created)},
		{"commands", strconv.FormatUint(st.Commands, 10)}, {"cwd", st.Dir},
		{"last status", strconv.Itoa(st.LastExitCode)}, {"running", running}, {"queued", strconv.Itoa(st.Queued)},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, "env:")
	for _, k := range slices.Sorted(maps.Keys(st.Env)) {
		fmt.Fprintf(e.stdout, "  %s=%s\n", k, quoteIfNeeded(st.Env[k]))
	}
	return nil
}

// timeText is t in local time, "-" when unknown.
func timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// quoteIfNeeded quotes s when it holds a line break or another control
// character, so that it stays on its line.
func quoteIfNeeded(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return strconv.Quote(s)
	}
	return s
}
