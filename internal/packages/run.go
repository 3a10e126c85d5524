package packages

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/reaper"
)

// command is one program envd runs for an operation: no shell, ever.
type command struct {
	argv []string // argv[0] is an absolute path
	dir  string
	user *identity.User
	env  []string
	m    Manager // whose output it prints (see lastError)
}

// Output kinds of an operation's log (outbuf.Record.Kind).
const (
	KindStdout  uint8 = 1
	KindStderr  uint8 = 2
	KindStarted uint8 = 3 // a command starts: its StartedCommand as JSON
)

// chunkSize bounds each piece of output read from an installer.
const chunkSize = 32 << 10

// drainGrace is how long, after an installer exited, its output pipes are
// still read: a process it left behind (a daemon a Debian package started)
// may hold them open for ever.
const drainGrace = 2 * time.Second

// tailBytes is how much of an installer's stderr is kept for the message
// of its failure.
const tailBytes = 8 << 10

// exitInfo is how a command ended.
type exitInfo struct {
	exit   reaper.Exit
	killed bool    // ctx ended and envd killed its process group
	tail   string  // the end of its stderr (of its stdout when stderr was empty)
	m      Manager // whose command it was
}

// run runs c until it exits or ctx ends (then its process group is
// killed), handing its output to out as it comes, in chunks of at most
// chunkSize bytes, from two goroutines (stdout's and stderr's). The
// bytes passed to out are reused after it returns.
func run(ctx context.Context, c command, out func(kind uint8, p []byte)) (exitInfo, error) {
	cmd := &exec.Cmd{Path: c.argv[0], Args: c.argv, Dir: c.dir, Env: c.env}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if c.user != nil {
		cmd.SysProcAttr.Credential = c.user.Credential()
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return exitInfo{}, fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return exitInfo{}, fmt.Errorf("stderr pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	exitc, err := reaper.Start(cmd)
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return exitInfo{}, fmt.Errorf("start %s: %w", c.argv[0], err)
	}
	pid := cmd.Process.Pid
	errTail, outTail := &tail{max: tailBytes}, &tail{max: tailBytes}
	var readers sync.WaitGroup
	for _, p := range []struct {
		r    *os.File
		kind uint8
		t    *tail
	}{{outR, KindStdout, outTail}, {errR, KindStderr, errTail}} {
		readers.Go(func() {
			buf := make([]byte, chunkSize)
			for {
				n, err := p.r.Read(buf)
				if n > 0 {
					p.t.write(buf[:n])
					out(p.kind, buf[:n])
				}
				if err != nil {
					return
				}
			}
		})
	}
	info := exitInfo{m: c.m}
	select {
	case info.exit = <-exitc:
	case <-ctx.Done():
		reaper.SignalChild(pid, syscall.SIGKILL, true) // nothing once it is reaped
		info.killed = true
		info.exit = <-exitc
	}
	cmd.Process.Release()
	drained := make(chan struct{})
	go func() {
		readers.Wait()
		close(drained)
	}()
	t := time.NewTimer(drainGrace)
	select {
	case <-drained:
	case <-t.C:
		// Something it left holds the pipes: stop reading them.
		outR.SetReadDeadline(time.Now())
		errR.SetReadDeadline(time.Now())
		<-drained
	}
	t.Stop()
	outR.Close()
	errR.Close()
	info.tail = errTail.lines()
	if info.tail == "" {
		info.tail = outTail.lines()
	}
	return info, nil
}

// capture runs c and returns its stdout, at most limit bytes of it; a
// command that fails is an error with its exit status and the end of its
// stderr. what names it in messages.
func capture(ctx context.Context, what string, c command, limit int) ([]byte, error) {
	var mu sync.Mutex
	var buf bytes.Buffer
	over := false
	info, err := run(ctx, c, func(kind uint8, p []byte) {
		if kind != KindStdout {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if buf.Len()+len(p) > limit {
			over = true
			return
		}
		buf.Write(p)
	})
	if err != nil {
		return nil, startError(what, c, err)
	}
	if err := exitError(ctx, what, info); err != nil {
		return buf.Bytes(), err
	}
	if over {
		return nil, errorf(ErrInternal, "%s: printed more than %d bytes", what, limit)
	}
	return buf.Bytes(), nil
}

// exitError is nil for a command that exited 0, else the error that says
// how it ended: killed at its deadline (context.DeadlineExceeded), killed
// because envd is shutting down (ErrUnavailable), or failed (ErrFailed,
// with its exit status and the one line of its output that says why, see
// lastError; the whole output is the operation's to stream).
func exitError(ctx context.Context, what string, info exitInfo) error {
	if !info.killed && info.exit.Code() == 0 {
		return nil
	}
	last := ""
	if l := lastError(info.m, info.tail); l != "" {
		last = ": " + l
	}
	if info.killed {
		if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			return errorf(context.DeadlineExceeded, "%s was killed at the request's deadline%s", what, last)
		}
		return errorf(ErrUnavailable, "%s was killed: envd is shutting down%s", what, last)
	}
	return errorf(ErrFailed, "%s failed (%s)%s", what, info.exit, last)
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) write(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
}

// lines returns the non-empty lines kept, without a line cut in the
// middle by the bound (unless it is the only one).
func (t *tail) lines() string {
	t.mu.Lock()
	s := string(t.b)
	full := len(t.b) < t.max
	t.mu.Unlock()
	s = strings.ToValidUTF8(s, "\uFFFD")
	ls := strings.Split(strings.ReplaceAll(s, "\r", "\n"), "\n")
	if !full && len(ls) > 1 {
		ls = ls[1:] // cut by the bound
	}
	var keep []string
	for _, l := range ls {
		if l = strings.TrimRight(l, " \t"); l != "" {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// startError is the error of a command that could not start: the request's
// user lacking the right to enter its directory or run its program is
// theirs to fix (ErrPermission); anything else is envd's side
// (ErrUnavailable).
func startError(what string, c command, err error) error {
	if errors.Is(err, fs.ErrPermission) {
		who, where := "envd", c.dir
		if c.user != nil {
			who = c.user.Name
		}
		if where == "" {
			where = c.argv[0]
		}
		return errorf(ErrPermission, "%s: %s may not run %s in %s (permission denied): ask as a user who may, or name a directory of theirs", what, who, filepath.Base(c.argv[0]), where)
	}
	return errorf(ErrUnavailable, "%s: %v", what, err)
}
