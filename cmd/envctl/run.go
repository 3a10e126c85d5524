package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/envd-dev/envd/client"
)

type runOpts struct {
	pty     bool
	noStdin bool
	verbose bool
	cwd     string
	tag     string
	timeout time.Duration
	env     envFlag
}

// envFlag collects repeated --env KEY=VALUE.
type envFlag map[string]string

func (e *envFlag) String() string { return "" }

// Set takes KEY=VALUE, or KEY alone for the local value of KEY (as
// docker's --env does); a KEY not set locally is left out.
func (e *envFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if k == "" {
		return fmt.Errorf("%q: want KEY=VALUE, or KEY for its local value", v)
	}
	if !ok {
		if val, ok = os.LookupEnv(k); !ok {
			return nil
		}
	}
	if *e == nil {
		*e = envFlag{}
	}
	(*e)[k] = val
	return nil
}

// durationFlag is a flag.Duration whose error shows the form wanted: a
// bare number ("--timeout 1") says to add a unit.
type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string {
	if f.d == nil || *f.d == 0 {
		return ""
	}
	return f.d.String()
}

func (f durationFlag) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		if _, nerr := strconv.ParseFloat(v, 64); nerr == nil {
			return fmt.Errorf("%q has no unit: write e.g. 30s, 5m or 1h", v)
		}
		return fmt.Errorf("%q: want a duration, e.g. 30s, 5m or 1h", v)
	}
	if d < 0 {
		return fmt.Errorf("%q: want a positive duration", v)
	}
	*f.d = d
	return nil
}

var runCommand = &command{
	name:    "run",
	args:    "[--pty] [--cwd DIR] [--env KEY=VALUE]... [--tag TAG] [--timeout DURATION] [--no-stdin] [--verbose] -- CMD [ARG...]",
	summary: "run a command in the sandbox, streaming its output; exit with its code",
	flags: func(fs *flag.FlagSet) any {
		o := &runOpts{}
		fs.BoolVar(&o.pty, "pty", false, "run in a pseudo-terminal: an interactive session (raw mode, resize)")
		fs.BoolVar(&o.noStdin, "no-stdin", false, "give the command /dev/null as stdin instead of envctl's")
		fs.StringVar(&o.cwd, "cwd", "", "working `DIR` (default: the user's home)")
		fs.StringVar(&o.tag, "tag", "", "tag the process with `TAG`, for ps")
		fs.Var(durationFlag{&o.timeout}, "timeout", "kill the command after this `DURATION`, e.g. 30s or 5m (default: none)")
		fs.Var(&o.env, "env", "set an environment variable, `KEY=VALUE`, or KEY for its local value (repeatable)")
		fs.BoolVar(&o.verbose, "verbose", false, "once the command ends, say on stderr why it ended and what it used (CPU time, peak memory)")
		return o
	},
	run: runRun,
}

func runRun(ctx context.Context, e *env, opts any, args []string) error {
	o := opts.(*runOpts)
	if len(args) == 0 {
		return usageError{"run: no command given (usage: envctl run [flags] -- CMD [ARG...])"}
	}
	cmd := client.Command{
		Name: args[0], Args: args[1:], Env: o.env, Dir: o.cwd, Tag: o.tag,
		Timeout: o.timeout, Stdin: !o.noStdin,
		Stdout: e.stdout, Stderr: e.stderr,
	}
	var restore func()
	inFile, inIsFile := e.stdin.(*os.File)
	if o.pty {
		size := client.Size{Cols: 80, Rows: 24}
		if inIsFile && term.IsTerminal(int(inFile.Fd())) {
			if w, h, err := term.GetSize(int(inFile.Fd())); err == nil && w > 0 && h > 0 {
				// A terminal that reports 0x0 (a serial console) keeps 80x24.
				size = client.Size{Cols: uint16(w), Rows: uint16(h)}
			}
		}
		cmd.PTY = &size
		if cmd.Env == nil {
			cmd.Env = map[string]string{}
		}
		if _, ok := cmd.Env["TERM"]; !ok {
			t := os.Getenv("TERM")
			if t == "" || t == "dumb" {
				t = "xterm-256color"
			}
			cmd.Env["TERM"] = t
		}
	}
	// Signals to envctl go to the process: the first INT/TERM/HUP as
	// SIGTERM, the next as SIGKILL. They are caught before Start so none is
	// lost; ctx (cancelled by them too) must not stop following the output.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	ctx = context.WithoutCancel(ctx)

	p, err := e.c.Start(ctx, cmd)
	switch {
	case errors.Is(err, exec.ErrNotFound):
		return exitError{code: exitCommandAbsent, msg: err.Error()}
	case errors.Is(err, client.ErrInvalidArgument), errors.Is(err, client.ErrPermissionDenied):
		// envd refused this command (not executable, a cwd it cannot
		// use, a bad environment name): it cannot be run as given.
		return exitError{code: exitCannotRun, msg: err.Error()}
	case err != nil:
		return err
	}
	defer p.Close()
	if o.pty && inIsFile && term.IsTerminal(int(inFile.Fd())) {
		fd := int(inFile.Fd())
		st, err := term.MakeRaw(fd)
		if err != nil {
			return fmt.Errorf("run: raw mode on the terminal: %w", err)
		}
		restore = func() { term.Restore(fd, st) }
		defer restore()
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for range winch {
				if w, h, err := term.GetSize(fd); err == nil && w > 0 && h > 0 {
					p.Resize(ctx, client.Size{Cols: uint16(w), Rows: uint16(h)})
				}
			}
		}()
	}
	if cmd.Stdin || o.pty {
		go func() {
			// Errors here (the process ended first) show in Wait.
			if err := p.StreamStdin(ctx, e.stdin); err == nil && !o.pty {
				p.CloseStdin(ctx)
			}
		}()
	}
	go func() {
		sig := syscall.SIGTERM
		for range sigs {
			p.Signal(ctx, sig)
			sig = syscall.SIGKILL
		}
	}()
	exit, err := p.Wait()
	if err != nil {
		if errors.Is(err, client.ErrDataLoss) {
			return fmt.Errorf("%w (envctl read the output too slowly; the process goes on: pid %d)", err, p.PID)
		}
		return err
	}
	if restore != nil {
		restore()
	}
	if exit.TimedOut {
		fmt.Fprintf(e.stderr, "envctl: %s ran out of its %v timeout and was killed\n", cmd.Name, o.timeout)
	}
	if o.verbose {
		fmt.Fprintf(e.stderr, "envctl: %s\n", exitText(exit))
	}
	switch {
	case exit.Signal != 0:
		return exitError{code: 128 + int(exit.Signal)}
	case exit.Code < 0 || exit.Code > 255:
		return exitError{code: 255}
	case exit.Code != 0:
		return exitError{code: exit.Code}
	}
	return nil
}

// exitText says why a process ended and what it used: "exited with status
// 3 (user 0.12s, system 0.03s, max RSS 64.1 MiB)", "killed by a client's
// signal: SIGTERM (...)".
func exitText(x *client.Exit) string {
	var why string
	switch {
	case x.Reason == client.ExitReasonExited:
		why = fmt.Sprintf("exited with status %d", x.Code)
	case x.Reason != client.ExitReasonUnknown && x.Signal != 0:
		why = x.Reason.String() + ": " + signalText(x.Signal)
	case x.Reason != client.ExitReasonUnknown:
		why = x.Reason.String()
	case x.Status != "":
		// An envd too old to say why: its description.
		why = x.Status
	default:
		why = "ended"
	}
	if u := x.Usage; u != nil {
		why += fmt.Sprintf(" (user %.2fs, system %.2fs, max RSS %s", u.UserCPU.Seconds(), u.SystemCPU.Seconds(), bytesText(uint64(max(u.MaxRSS, 0))))
		if u.MemoryPeak > 0 {
			why += ", memory peak " + bytesText(uint64(u.MemoryPeak))
		}
		why += ")"
	}
	return why
}

// signalText names a signal as kill -l does, with SIG: "SIGTERM".
func signalText(s syscall.Signal) string {
	if name := unix.SignalName(s); name != "" {
		return name
	}
	return fmt.Sprintf("signal %d", int(s))
}
