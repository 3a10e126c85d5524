package client_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"iter"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/client"

	"github.com/envd-dev/envd/internal/testutil"
)

// newClient is a client of the shared envd, closed when the test ends.
func newClient(t *testing.T, o client.Options) *client.Client {
	t.Helper()
	if o.Addr == "" && o.Dialer == nil {
		o.Addr = envdAddr
	}
	c := client.New(o)
	t.Cleanup(func() { c.Close() })
	return c
}

func sh(script string) client.Command {
	return client.Command{Name: "/bin/sh", Args: []string{"-c", script}}
}

func TestRunExitCodes(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{})
	tests := []struct {
		name       string
		script     string
		wantOut    string
		wantErr    string
		wantCode   int
		wantSignal syscall.Signal
	}{
		{name: "success", script: "echo out; echo err >&2", wantOut: "out\n", wantErr: "err\n"},
		{name: "exit 3", script: "echo three; exit 3", wantOut: "three\n", wantCode: 3},
		{name: "killed", script: "kill -KILL $$", wantCode: -1, wantSignal: syscall.SIGKILL},
		{name: "terminated", script: "kill -TERM $$", wantCode: -1, wantSignal: syscall.SIGTERM},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, err := c.Run(testContext(t, testutil.Wait), sh(tt.script))
			if err != nil {
				t.Fatal(err)
			}
			if string(res.Stdout) != tt.wantOut || string(res.Stderr) != tt.wantErr {
				t.Errorf("stdout %q, stderr %q; want %q, %q", res.Stdout, res.Stderr, tt.wantOut, tt.wantErr)
			}
			if res.Exit.Code != tt.wantCode || res.Exit.Signal != tt.wantSignal {
				t.Errorf("exit %+v; want code %d, signal %v", res.Exit, tt.wantCode, tt.wantSignal)
			}
			if res.Exit.Success() != (tt.wantCode == 0 && tt.wantSignal == 0) {
				t.Errorf("Success() = %v for %+v", res.Exit.Success(), res.Exit)
			}
		})
	}
}

func TestEventsInOrder(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{})
	p, err := c.Start(testContext(t, testutil.Wait), sh("for i in $(seq 1 500); do echo line $i; done; echo done >&2"))
	if err != nil {
		t.Fatal(err)
	}
	if p.PID == 0 {
		t.Fatal("no pid")
	}
	var out, errb strings.Builder
	for ev, err := range p.Events() {
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Stream {
		case client.Stdout:
			out.Write(ev.Data)
		case client.Stderr:
			errb.Write(ev.Data)
		default:
			t.Fatalf("event on %v", ev.Stream)
		}
	}
	var want strings.Builder
	for i := 1; i <= 500; i++ {
		want.WriteString("line " + strconv.Itoa(i) + "\n")
	}
	if out.String() != want.String() || errb.String() != "done\n" {
		t.Errorf("stdout %d bytes (want %d), stderr %q", out.Len(), want.Len(), errb.String())
	}
	exit, err := p.Wait()
	if err != nil || !exit.Success() {
		t.Errorf("Wait after Events: %v, %v", exit, err)
	}
}

func TestStdin(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{})
	// Each subtest has its own deadline: they run at once, and the
	// shared one ran out for the last under load.

	t.Run("send and close", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t, testutil.Wait)
		var out bytes.Buffer
		cmd := client.Command{Name: "cat", Stdin: true, Stdout: &out}
		p, err := c.Start(ctx, cmd)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.SendStdin(ctx, []byte("abc\n")); err != nil {
			t.Fatal(err)
		}
		if err := p.SendStdin(ctx, []byte("def")); err != nil {
			t.Fatal(err)
		}
		if err := p.CloseStdin(ctx); err != nil {
			t.Fatal(err)
		}
		exit, err := p.Wait()
		if err != nil || !exit.Success() || out.String() != "abc\ndef" {
			t.Errorf("cat: %q, %v, %v", out.String(), exit, err)
		}
	})
	t.Run("stream", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t, testutil.Wait)
		var out bytes.Buffer
		p, err := c.Start(ctx, client.Command{Name: "sha256sum", Stdin: true, Stdout: &out})
		if err != nil {
			t.Fatal(err)
		}
		in := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
		if err := p.StreamStdin(ctx, bytes.NewReader(in)); err != nil {
			t.Fatal(err)
		}
		if err := p.CloseStdin(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Wait(); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%x  -\n", sha256.Sum256(in)); out.String() != want {
			t.Errorf("sha256sum of the streamed stdin %q, want %q", out.String(), want)
		}
	})
	t.Run("larger than one message", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t, testutil.Wait)
		var out bytes.Buffer
		p, err := c.Start(ctx, client.Command{Name: "sha256sum", Stdin: true, Stdout: &out})
		if err != nil {
			t.Fatal(err)
		}
		in := bytes.Repeat([]byte("fedcba9876543210"), 10<<16) // 10 MiB: over envd's 6 MiB message cap
		if err := p.SendStdin(ctx, in); err != nil {
			t.Fatal(err)
		}
		if err := p.CloseStdin(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Wait(); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%x  -\n", sha256.Sum256(in)); out.String() != want {
			t.Errorf("sha256sum of 10 MiB sent at once %q, want %q", out.String(), want)
		}
	})
	t.Run("no stdin", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t, testutil.Wait)
		p, err := c.Start(ctx, client.Command{Name: "cat"})
		if err != nil {
			t.Fatal(err)
		}
		// Without Command.Stdin, cat reads /dev/null and ends at once.
		exit, err := p.Wait()
		if err != nil || !exit.Success() {
			t.Errorf("cat without stdin: %v, %v", exit, err)
		}
		if err := p.SendStdin(ctx, []byte("x")); err == nil {
			t.Error("SendStdin to an ended process succeeded")
		}
	})
}

func TestPTY(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{})
	ctx := testContext(t, testutil.Wait)
	p, err := c.Start(ctx, client.Command{Name: "/bin/sh", PTY: &client.Size{Cols: 100, Rows: 30}, Env: map[string]string{"PS1": "$ "}})
	if err != nil {
		t.Fatal(err)
	}
	if !p.PTY {
		t.Error("PTY not set on the handle")
	}
	var screen strings.Builder
	next, stop := iter.Pull2(p.Events())
	defer stop()
	waitFor := func(want string) {
		t.Helper()
		for !strings.Contains(screen.String(), want) {
			ev, err, ok := next()
			if !ok {
				t.Fatalf("output ended before %q: %q", want, screen.String())
			}
			if err != nil {
				t.Fatal(err)
			}
			if ev.Stream != client.PTY {
				t.Fatalf("event on %v from a PTY process", ev.Stream)
			}
			screen.Write(ev.Data)
		}
	}
	if err := p.SendStdin(ctx, []byte("stty size\n")); err != nil {
		t.Fatal(err)
	}
	waitFor("30 100")
	if err := p.Resize(ctx, client.Size{Cols: 120, Rows: 40}); err != nil {
		t.Fatal(err)
	}
	if err := p.SendStdin(ctx, []byte("stty size; exit 5\n")); err != nil {
		t.Fatal(err)
	}
	waitFor("40 120")
	for {
		if _, err, ok := next(); !ok || err != nil {
			break
		}
	}
	exit, err := p.Wait()
	if err != nil || exit.Code != 5 {
		t.Errorf("exit %v, %v; want 5", exit, err)
	}
	// Resizing a process without a terminal is refused.
	q, err := c.Start(ctx, sh("sleep 0.2"))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Resize(ctx, client.Size{Cols: 10, Rows: 10}); err == nil {
		t.Error("Resize of a process without a PTY succeeded")
	}
	q.Wait()
}

func TestSignalAndTimeout(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{})
	// Each subtest makes its own deadline: a parallel subtest may wait for
	// its turn longer than a deadline set here.
	t.Run("SIGTERM", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t, testutil.Wait)
		p, err := c.Start(ctx, client.Command{Name: "sleep", Args: []string{"30"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Signal(ctx, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		exit, err := p.Wait()
		if err != nil || exit.Signal != syscall.SIGTERM || exit.Code != -1 || exit.Status != "signal: terminated" {
			t.Errorf("exit %+v, %v; want SIGTERM", exit, err)
		}
	})
	t.Run("unsupported signal", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t, testutil.Wait)
		p, err := c.Start(ctx, client.Command{Name: "sleep", Args: []string{"0.5"}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Wait()
		if err := p.Signal(ctx, syscall.SIGSEGV); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("SIGSEGV: %v, want invalid argument", err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t, testutil.Wait)
		// Long enough for the shell to say it started on a loaded machine.
		res, err := c.Run(ctx, client.Command{Name: "/bin/sh", Args: []string{"-c", "echo started; sleep 30"}, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Exit.TimedOut || res.Exit.Signal != syscall.SIGKILL || string(res.Stdout) != "started\n" {
			t.Errorf("exit %+v, stdout %q; want timed out, SIGKILL, started", res.Exit, res.Stdout)
		}
	})
	t.Run("deadline of the caller does not kill", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t, testutil.Wait)
		// Long enough for Start to succeed on a loaded machine; the process
		// outlives it.
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		p, err := c.Start(short, client.Command{Name: "/bin/sh", Args: []string{"-c", "sleep 3; exit 4"}, Tag: "outlives-" + t.Name()})
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Wait()
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, client.ErrDeadlineExceeded) {
			t.Fatalf("Wait past the caller's deadline: %v, want context.DeadlineExceeded", err)
		}
		if want := fmt.Sprintf("follow process %d (/bin/sh)", p.PID); !strings.HasPrefix(err.Error(), want+": ") {
			t.Errorf("Wait past the caller's deadline: %q, want it to name the step: %q", err, want)
		}
		q, err := c.Connect(ctx, client.Selector{PID: p.PID})
		if err != nil {
			t.Fatal(err)
		}
		exit, err := q.Wait()
		if err != nil || exit.Code != 4 {
			t.Errorf("the process after its caller's deadline: %v, %v; want exit 4", exit, err)
		}
	})
}

func TestConnectAndList(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{})
	ctx := testContext(t, testutil.Wait)
	tag := "tagged-" + t.Name()
	p, err := c.Start(ctx, client.Command{Name: "/bin/sh", Args: []string{"-c", "echo early; read x; echo got $x; exit 2"}, Tag: tag, Stdin: true, Env: map[string]string{"K": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	p.Close() // stop following; the process waits for its input
	ps, err := c.ListProcesses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var found *client.ProcessInfo
	for i := range ps {
		if ps[i].PID == p.PID {
			found = &ps[i]
		}
	}
	if found == nil || found.Tag != tag || found.Name != "/bin/sh" || found.Env["K"] != "v" {
		t.Fatalf("List: %+v, want pid %d tagged %s", ps, p.PID, tag)
	}
	q, err := c.Connect(ctx, client.Selector{Tag: tag})
	if err != nil {
		t.Fatal(err)
	}
	if q.PID != p.PID {
		t.Errorf("Connect by tag: pid %d, want %d", q.PID, p.PID)
	}
	if err := q.SendStdin(ctx, []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for ev, err := range q.Events() {
		if err != nil {
			t.Fatal(err)
		}
		out.Write(ev.Data)
	}
	exit, _ := q.Wait()
	// The output from before the Connect is replayed.
	if out.String() != "early\ngot hello\n" || exit.Code != 2 {
		t.Errorf("Connect: %q, %v; want the whole output and exit 2", out.String(), exit)
	}
	if _, err := c.Connect(ctx, client.Selector{PID: 1 << 30}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Connect to a missing pid: %v, want not found", err)
	}
	if err := c.Signal(ctx, client.Selector{Tag: "no-such-tag"}, syscall.SIGKILL); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Signal a missing tag: %v, want not found", err)
	}
}

func TestStartErrors(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{})
	tests := []struct {
		name string
		c    *client.Client
		cmd  client.Command
		want error
		msg  string
	}{
		{name: "no name", c: c, cmd: client.Command{}, want: client.ErrInvalidArgument, msg: "Command.Name is empty"},
		{name: "missing program", c: c, cmd: client.Command{Name: "/no/such/program"}, want: client.ErrInvalidArgument, msg: "no such file"},
		{name: "missing program on PATH", c: c, cmd: client.Command{Name: "no-such-program-envd-test"}, want: client.ErrInvalidArgument, msg: "executable not found"},
		{name: "missing cwd", c: c, cmd: client.Command{Name: "true", Dir: "/no/such/dir"}, want: client.ErrInvalidArgument, msg: "/no/such/dir"},
		{name: "unknown user", c: c, cmd: client.Command{Name: "true", User: "nobody-at-all"}, want: client.ErrUnauthenticated, msg: "nobody-at-all"},
		{name: "unknown client user", c: newClient(t, client.Options{User: "nobody-either"}), cmd: client.Command{Name: "true"}, want: client.ErrUnauthenticated, msg: "nobody-either"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Its own deadline: a parallel subtest may wait for its turn
			// longer than a deadline set before it.
			ctx := testContext(t, testutil.Wait)
			_, err := tt.c.Start(ctx, tt.cmd)
			// A missing program matches exec.ErrNotFound, as exec's own
			// error does; nothing else does.
			if missing := strings.HasPrefix(tt.name, "missing program"); errors.Is(err, exec.ErrNotFound) != missing {
				t.Errorf("Start: errors.Is(%v, exec.ErrNotFound) = %v, want %v", err, !missing, missing)
			}
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Start: %v; want %v mentioning %q", err, tt.want, tt.msg)
			}
			var e *client.Error
			if !errors.As(err, &e) || e.Op == "" || strings.Contains(err.Error(), "\n") {
				t.Errorf("Start: %#v is not a one-line *client.Error", err)
			}
		})
	}
}

func TestRunAsUser(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{User: "root"})
	res, err := c.Run(testContext(t, testutil.Wait), sh("id -un; echo $HOME; pwd"))
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "root\n/root\n/root\n" {
		t.Errorf("as root: %q", res.Stdout)
	}
}

// TestRunKillsWhenItsContextEnds: as exec.CommandContext, Run kills the
// process when its context ends; with KeepRunning it leaves it running.
func TestRunKillsWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{})
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep running %v", keep), func(t *testing.T) {
			t.Parallel()
			// Its own deadline: a parallel subtest may wait for its turn
			// longer than a deadline set before it.
			ctx := testContext(t, testutil.Wait)
			tag := fmt.Sprintf("run-ctx-%v-%d", keep, time.Now().UnixNano())
			short, cancel := context.WithCancel(ctx)
			started := make(chan struct{})
			var once sync.Once
			go func() {
				<-started
				cancel()
			}()
			_, err := c.Run(short, client.Command{
				Name: "/bin/sh", Args: []string{"-c", "echo up; exec sleep 30"}, Tag: tag, KeepRunning: keep,
				Stdout: writerFunc(func(b []byte) (int, error) { once.Do(func() { close(started) }); return len(b), nil }),
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Run: %v, want context.Canceled", err)
			}
			p, err := c.Connect(ctx, client.Selector{Tag: tag})
			if err != nil {
				t.Fatal(err)
			}
			if keep {
				if err := c.Signal(ctx, client.Selector{PID: p.PID}, syscall.SIGTERM); err != nil {
					t.Fatalf("the process left running: %v", err)
				}
			}
			exit, err := p.Wait()
			if err != nil {
				t.Fatal(err)
			}
			want := syscall.SIGKILL
			if keep {
				want = syscall.SIGTERM // it ran until we ended it
			}
			if exit.Signal != want {
				t.Errorf("exit %+v, want by %v", exit, want)
			}
		})
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// Bulk output comes whole through Wait, whose buffers take the next
// messages' output once written, over h2c and with OutputHTTP1; and the
// output streams of OutputHTTP1 work with stdin and Connect.
func TestBulkOutput(t *testing.T) {
	t.Parallel()
	var want bytes.Buffer
	for i := 1; i <= 1_000_000; i++ {
		want.WriteString(strconv.Itoa(i) + "\n")
	}
	for _, o := range []client.Options{{}, {OutputHTTP1: true}} {
		t.Run(fmt.Sprintf("OutputHTTP1=%v", o.OutputHTTP1), func(t *testing.T) {
			t.Parallel()
			c := newClient(t, o)
			// Not one step but two 6.9 MB streams, through -race builds
			// on a machine the suite loads: bounded as a program is.
			ctx := testContext(t, testutil.Program)
			var out bytes.Buffer
			p, err := c.Start(ctx, client.Command{Name: "seq", Args: []string{"1000000"}, Stdout: &out})
			if err != nil {
				t.Fatal(err)
			}
			if exit, err := p.Wait(); err != nil || !exit.Success() {
				t.Fatalf("seq: %v, %v", exit, err)
			}
			if !bytes.Equal(out.Bytes(), want.Bytes()) {
				t.Fatalf("seq 1000000: %d bytes, not the %d expected", out.Len(), want.Len())
			}

			tag := "bulk-" + strconv.FormatBool(o.OutputHTTP1)
			p, err = c.Start(ctx, client.Command{Name: "/bin/sh", Args: []string{"-c", "read x; seq $x"}, Stdin: true, Tag: tag})
			if err != nil {
				t.Fatal(err)
			}
			p.Close()
			q, err := c.Connect(ctx, client.Selector{Tag: tag})
			if err != nil {
				t.Fatal(err)
			}
			if err := q.SendStdin(ctx, []byte("1000000\n")); err != nil {
				t.Fatal(err)
			}
			out.Reset()
			for ev, err := range q.Events() {
				if err != nil {
					t.Fatal(err)
				}
				out.Write(ev.Data)
			}
			if exit, err := q.Wait(); err != nil || !exit.Success() {
				t.Fatalf("after Connect: %v, %v", exit, err)
			}
			if !bytes.Equal(out.Bytes(), want.Bytes()) {
				t.Fatalf("after Connect: %d bytes, not the %d expected", out.Len(), want.Len())
			}
		})
	}
}
