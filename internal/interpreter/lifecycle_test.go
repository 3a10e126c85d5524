package interpreter_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/internal/interpreter"
	"github.com/envd-dev/envd/internal/interpreter/codehttp"
	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/testutil"
)

// ownEngine is an engine of the test's own on the shared Jupyter server:
// for tests that shut it down or drive its clock. At cleanup its contexts
// are removed (their kernels deleted) and it is closed.
func ownEngine(t testing.TB, opts interpreter.Options) *interpreter.Engine {
	t.Helper()
	opts.Supervisor = shared.sup
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	if opts.DefaultCwd == nil {
		opts.DefaultCwd = func() string { return "/tmp" }
	}
	eng := interpreter.New(opts)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, c := range eng.Contexts() {
			_ = eng.RemoveContext(ctx, c.ID)
		}
		eng.Close()
	})
	return eng
}

// readUntil reads events until one satisfies stop, and returns them all.
func readUntil(t testing.TB, rd *interpreter.Reader, stop func(interpreter.Event) bool) []interpreter.Event {
	t.Helper()
	ctx := testutil.Context(t, execTimeout)
	var out []interpreter.Event
	for {
		evs, err := rd.Read()
		for _, ev := range evs {
			out = append(out, ev)
			if stop(ev) {
				return out
			}
		}
		if err != nil {
			t.Fatalf("read events: %v; so far %v", err, kinds(out))
		}
		if len(evs) > 0 {
			continue
		}
		select {
		case <-rd.Wait():
		case <-ctx.Done():
			t.Fatalf("no such event; so far %v", kinds(out))
		}
	}
}

func isKind(k interpreter.EventKind) func(interpreter.Event) bool {
	return func(ev interpreter.Event) bool { return ev.Kind == k }
}

// Shutdown publishes every execution's end, then waits for the readers
// following it to read it, up to DrainGrace: a stream is never cut before
// its end by a shutdown.
func TestShutdownDrainsReaders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		reads bool // the follower reads its end; else it is stuck
	}{
		{"reader reads its end", true},
		{"stuck reader", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testutil.Context(t, execTimeout)
			clock := quartz.NewMock(t)
			eng := ownEngine(t, interpreter.Options{Clock: clock, DrainGrace: 10 * time.Second})
			c, err := eng.CreateContext(ctx, "python", "")
			if err != nil {
				t.Fatal(err)
			}
			_, rd, err := eng.Execute(ctx, interpreter.ExecuteRequest{ContextID: c.ID, Code: "import time\nprint('go', flush=True)\ntime.sleep(300)"})
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			readUntil(t, rd, isKind(interpreter.EventStdout))

			drain := clock.Trap().AfterFunc("drain")
			defer drain.Close()
			done := make(chan struct{})
			go func() {
				defer close(done)
				eng.Shutdown(context.Background())
			}()
			// Shutdown waits for rd: every end is published by now.
			drain.MustWait(ctx).MustRelease(ctx)
			select {
			case <-done:
				t.Fatal("Shutdown returned while a reader was still following")
			default:
			}
			if tc.reads {
				evs := readUntil(t, rd, isKind(interpreter.EventEnd))
				end := endOf(evs)
				if end.Reason != interpreter.EndInterrupted || !strings.Contains(end.Message, "shutting down") {
					t.Errorf("end %+v", end)
				}
				rd.Close()
			} else {
				clock.Advance(10 * time.Second).MustWait(ctx)
			}
			select {
			case <-done:
			case <-ctx.Done():
				t.Fatal("Shutdown did not return")
			}
			if _, _, err := eng.Execute(ctx, interpreter.ExecuteRequest{ContextID: c.ID, Code: "1"}); !errors.Is(err, interpreter.ErrClosed) {
				t.Errorf("Execute after Shutdown: %v", err)
			}
		})
	}
}

// A SIGINT the kernel swallows (as ipykernel does when it lands outside
// user code) is sent again while the kernel stays silent: the code stops
// and the context keeps its state, instead of a restart.
func TestInterruptResent(t *testing.T) {
	t.Parallel()
	ctx := testutil.Context(t, execTimeout)
	clock := quartz.NewMock(t)
	eng := ownEngine(t, interpreter.Options{Clock: clock, InterruptResend: time.Second, InterruptGrace: 30 * time.Second})
	c, err := eng.CreateContext(ctx, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	_, rd, err := eng.Execute(ctx, interpreter.ExecuteRequest{ContextID: c.ID, Code: "kept = 11"})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, rd)
	x, rd, err := eng.Execute(ctx, interpreter.ExecuteRequest{ContextID: c.ID, Code: `import signal, time
def swallow(*_):
    signal.signal(signal.SIGINT, signal.default_int_handler)  # before the print the test waits for
    print('swallowed', flush=True)
signal.signal(signal.SIGINT, swallow)
print('ready', flush=True)
time.sleep(300)`})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	readUntil(t, rd, func(ev interpreter.Event) bool {
		return ev.Kind == interpreter.EventStdout && strings.Contains(ev.Text, "ready")
	})

	resend := clock.Trap().AfterFunc("execution", "resend")
	defer resend.Close()
	x.Interrupt()
	resend.MustWait(ctx).MustRelease(ctx) // the first interrupt was sent
	readUntil(t, rd, func(ev interpreter.Event) bool {
		return ev.Kind == interpreter.EventStdout && strings.Contains(ev.Text, "swallowed")
	})
	clock.Advance(time.Second).MustWait(ctx) // the kernel stayed silent
	resend.MustWait(ctx).MustRelease(ctx)    // the second interrupt was sent

	evs := readUntil(t, rd, isKind(interpreter.EventEnd))
	if end := endOf(evs); end.Reason != interpreter.EndInterrupted {
		t.Errorf("end %+v", end)
	}
	if names := errorNames(evs); len(names) != 1 || names[0] != "KeyboardInterrupt" {
		t.Errorf("errors %v, want KeyboardInterrupt only", names)
	}
	_, rd, err = eng.Execute(ctx, interpreter.ExecuteRequest{ContextID: c.ID, Code: "kept"})
	if err != nil {
		t.Fatal(err)
	}
	evs = collect(t, rd)
	if endOf(evs).Reason != interpreter.EndOK {
		t.Fatalf("after the interrupt: %v %v", kinds(evs), errorNames(evs))
	}
	for _, ev := range evs {
		if ev.Kind == interpreter.EventResult {
			if text, _ := ev.Result.Text(); text != "11" {
				t.Errorf("kept = %q after the interrupt", text)
			}
		}
	}
}

// A request is checked before any kernel starts, or anything waits for
// Jupyter: a bad env var name or a bad cwd is answered at once even while
// Jupyter is down. Which languages exist only Jupyter knows (any installed
// kernelspec is one): a language that is not envd's own waits for it.
func TestValidateBeforeKernel(t *testing.T) {
	t.Parallel()
	sup := newUnstarted()
	eng := interpreter.New(interpreter.Options{Supervisor: sup, Logger: testLogger()})
	t.Cleanup(eng.Close)
	ctx := testutil.Context(t, time.Minute)
	if _, _, err := eng.Execute(ctx, interpreter.ExecuteRequest{Code: "echo", Language: "bash", Env: map[string]string{"NOT-A-NAME": "x"}}); !errors.Is(err, interpreter.ErrBadEnv) {
		t.Errorf("bad env name: %v", err)
	}
	if _, err := eng.CreateContext(ctx, "python", "/does/not/exist"); !errors.Is(err, interpreter.ErrBadCwd) {
		t.Errorf("bad cwd: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, _, err := eng.Execute(short, interpreter.ExecuteRequest{Code: "1", Language: "cobol"}); !errors.Is(err, interpreter.ErrNotReady) ||
		!strings.Contains(err.Error(), "waiting for the Jupyter server to list the installed kernels") {
		t.Errorf("unknown language: %v", err)
	}
	if _, _, err := eng.Execute(ctx, interpreter.ExecuteRequest{Code: "1", ContextID: "c", Language: "python"}); !errors.Is(err, interpreter.ErrContextAndLanguage) {
		t.Errorf("context and language: %v", err)
	}
	if n := len(eng.Contexts()); n != 0 {
		t.Errorf("%d contexts created", n)
	}
}

// A caller that stops waiting for its context is told which phase of the
// context's creation it gave up in.
func TestNotReadyNamesPhase(t *testing.T) {
	t.Parallel()
	eng := interpreter.New(interpreter.Options{Supervisor: newUnstarted(), Logger: testLogger()})
	t.Cleanup(eng.Close)
	wait, cancel := context.WithCancel(testutil.Context(t, time.Minute))
	cancel() // the wait is over at once: Jupyter is not up
	for name, call := range map[string]func() error{
		"Execute": func() error {
			_, _, err := eng.Execute(wait, interpreter.ExecuteRequest{Code: "1"})
			return err
		},
		"CreateContext": func() error {
			_, err := eng.CreateContext(wait, "python", "/tmp")
			return err
		},
	} {
		err := call()
		if !errors.Is(err, interpreter.ErrNotReady) || !strings.Contains(err.Error(), phase) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Both adapters say it: 503 on HTTP (unavailable on Connect: see
	// TestServiceNotReady).
	base := serveHTTP(t, eng, codehttp.Options{ReadyWait: 200 * time.Millisecond})
	for _, path := range []string{"/execute", "/contexts"} {
		status, body := callAt(t, base, http.MethodPost, path, map[string]any{"code": "1"})
		if status != http.StatusServiceUnavailable || !strings.Contains(body, phase) {
			t.Errorf("POST %s: %d %s", path, status, body)
		}
	}
}

// phase is how a not-ready answer names the wait for Jupyter.
const phase = `phase "wait for the Jupyter server" (the Jupyter server is starting)`

// newUnstarted is a supervisor that is never started: Jupyter never comes
// up.
func newUnstarted() *jupyter.Supervisor {
	return jupyter.New(jupyter.Options{Env: shared.layout.Env(), Logger: testLogger()})
}

// EarlyKernel names the default Python context's kernel and directory (/
// when the default directory is unusable, as for the context itself) until
// that context exists; then none.
func TestEarlyKernel(t *testing.T) {
	t.Parallel()
	for cwd, want := range map[string]string{"/tmp": "/tmp", "/does/not/exist": "/"} {
		eng := interpreter.New(interpreter.Options{Supervisor: newUnstarted(), Logger: testLogger(), DefaultCwd: func() string { return cwd }})
		t.Cleanup(eng.Close)
		if name, dir := eng.EarlyKernel(); name != "python3" || dir != want {
			t.Errorf("default directory %s: early kernel %q in %q, want python3 in %s", cwd, name, dir, want)
		}
	}
	eng := ownEngine(t, interpreter.Options{})
	eng.Start()
	select {
	case <-eng.Ready():
	case <-testutil.Context(t, time.Minute).Done():
		t.Fatal("no default context")
	}
	if name, dir := eng.EarlyKernel(); name != "" || dir != "" {
		t.Errorf("with a default context: early kernel %q in %q, want none", name, dir)
	}
}
