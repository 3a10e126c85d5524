package interpreter_test

import (
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/envd-dev/envd/internal/interpreter"
	"github.com/envd-dev/envd/internal/testutil"
)

// memoryBlame is what a death must not be put down to unless envd knows
// of an OOM kill.
const memoryBlame = "too much memory"

// TestCodeExitsKernel: code that exits its kernel (IPython's exit() and
// quit(): the execute_reply's ask_exit payload, then the kernel stops and
// Jupyter restarts it; IRkernel's quit() sends the same payload and leaves
// the ending to the frontend, envd) ends with a KernelExited error that
// says so; the next execution runs on the new kernel at once, with fresh
// state and no notice of a death it was already told of.
func TestCodeExitsKernel(t *testing.T) {
	t.Parallel()
	py := struct{ set, print, get, undefined string }{"kept = 1", "print(1 + 1)", "kept", "is not defined"}
	r := struct{ set, print, get, undefined string }{"kept <- 1", "cat(1 + 1, '\\n', sep = '')", "kept", "not found"}
	for _, tc := range []struct {
		lang, code                 string
		set, print, get, undefined string
	}{
		{"python", "exit()", py.set, py.print, py.get, py.undefined},
		{"python", "quit()", py.set, py.print, py.get, py.undefined},
		{"python", "print('bye')\nexit()", py.set, py.print, py.get, py.undefined},
		{"python", "exit()\n1/0", py.set, py.print, py.get, py.undefined},
		{"r", "quit()", r.set, r.print, r.get, r.undefined},
	} {
		t.Run(tc.lang+" "+tc.code, func(t *testing.T) {
			t.Parallel()
			c := newContext(t, tc.lang, "")
			run(t, c.ID, tc.set).mustOK(t)
			r := run(t, c.ID, tc.code)
			e := r.lastError()
			if e == nil || e.Name != "KernelExited" || !strings.Contains(e.Value, "exited the kernel") ||
				!strings.Contains(e.Value, "gone") {
				t.Fatalf("errors %+v, lines %v", r.errors, r.types())
			}
			if strings.Contains(tc.code, "1/0") && (len(r.errors) != 2 || r.errors[0].Name != "ZeroDivisionError") {
				t.Errorf("the code's own error is not first: %+v", r.errors)
			}
			if strings.Contains(tc.code, "bye") && r.out() != "bye\n" {
				t.Errorf("stdout %q", r.out())
			}
			// At once: the next run must not go to the dying kernel.
			r = run(t, c.ID, tc.print).mustOK(t)
			if r.out() != "2\n" {
				t.Errorf("after the exit: stdout %q", r.out())
			}
			if lines := envdLines(r); len(lines) != 0 {
				t.Errorf("notice after a reported exit: %q", lines)
			}
			if e := run(t, c.ID, tc.get).lastError(); e == nil || !strings.Contains(e.Value, tc.undefined) {
				t.Errorf("state survived the exit: %+v", e)
			}
		})
	}
}

// TestCodeExitsKernelEngine: the same through the engine (the Connect
// service's events): a kernel_died end whose message says the code
// exited the kernel, and no notice next time.
func TestCodeExitsKernelEngine(t *testing.T) {
	t.Parallel()
	c := newContext(t, "", "")
	evs := runDirect(t, interpreter.ExecuteRequest{Code: "kept = 1\nexit()", ContextID: c.ID})
	if end := endOf(evs); end.Reason != interpreter.EndKernelDied || !strings.Contains(end.Message, "exited the kernel") {
		t.Errorf("end %+v, errors %v", end, errorNames(evs))
	}
	if names := errorNames(evs); len(names) != 1 || names[0] != "KernelExited" {
		t.Errorf("errors %v", names)
	}
	evs = runDirect(t, interpreter.ExecuteRequest{Code: "'kept' in globals()", ContextID: c.ID})
	if ns := notices(evs); len(ns) != 0 {
		t.Errorf("notices after a reported exit: %+v", ns)
	}
	if end := endOf(evs); end.Reason != interpreter.EndOK {
		t.Errorf("after the exit: end %+v, errors %v", end, errorNames(evs))
	}
	for _, ev := range evs {
		if ev.Kind == interpreter.EventResult && ev.Result.IsMain {
			if text, _ := ev.Result.Text(); text != "False" {
				t.Errorf("state survived the exit: 'kept' in globals() is %s", text)
			}
		}
	}
}

// TestExitKeepKernel: exit(keep_kernel=True) asks for no exit: the
// kernel and its state stay.
func TestExitKeepKernel(t *testing.T) {
	t.Parallel()
	c := newContext(t, "", "")
	run(t, c.ID, "kept = 1\nexit(keep_kernel=True)").mustOK(t)
	if got := run(t, c.ID, "kept").mustOK(t).text(); got != "1" {
		t.Errorf("kept = %q", got)
	}
}

// TestKernelExitsMidRun: a kernel whose process exits while it runs the
// code, with no reply (os._exit, Deno.exit): the error says it exited,
// with its exit status, and blames no memory; the name stays E2B's
// (ContextRestarting); the next run works on a fresh kernel, untold.
func TestKernelExitsMidRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ lang, set, exit, status, get, undefined string }{
		{"python", "kept = 1", "import os\nos._exit(3)", "exit status 3", "kept", "NameError"},
		{"javascript", "var kept = 1", "Deno.exit(0)", "exit status 0", "kept", "ReferenceError"},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			t.Parallel()
			c := newContext(t, tc.lang, "")
			run(t, c.ID, tc.set).mustOK(t)
			r := run(t, c.ID, tc.exit)
			e := r.lastError()
			if e == nil || e.Name != "ContextRestarting" || !strings.Contains(e.Value, "exited") ||
				!strings.Contains(e.Value, tc.status) || strings.Contains(e.Value, memoryBlame) {
				t.Fatalf("errors %+v (want one that says %q), lines %v", r.errors, tc.status, r.types())
			}
			r = run(t, c.ID, tc.get)
			if e := r.lastError(); e == nil || e.Name != tc.undefined {
				t.Errorf("state survived the exit: %+v", r.errors)
			}
			if lines := envdLines(r); len(lines) != 0 {
				t.Errorf("notice after a reported exit: %q", lines)
			}
		})
	}
}

// TestIdleDeathNotice: a kernel killed while idle; the next run's notice
// blames the out-of-memory killer only when envd's count of OOM kills
// (Options.OOMKills) went up meanwhile, and says how the kernel ended.
func TestIdleDeathNotice(t *testing.T) {
	t.Parallel()
	for _, oom := range []bool{false, true} {
		t.Run("oom="+strconv.FormatBool(oom), func(t *testing.T) {
			t.Parallel()
			var kills atomic.Uint64
			eng := ownEngine(t, interpreter.Options{OOMKills: kills.Load})
			ctx := testutil.Context(t, kernelTimeout)
			c, err := eng.CreateContext(ctx, "python", "")
			if err != nil {
				t.Fatal(err)
			}
			drain := func(code string) []interpreter.Event {
				_, rd, err := eng.Execute(ctx, interpreter.ExecuteRequest{Code: code, ContextID: c.ID})
				if err != nil {
					t.Fatal(err)
				}
				return collect(t, rd)
			}
			var pid int
			for _, ev := range drain("import os\nprint(os.getpid())") {
				if ev.Kind == interpreter.EventStdout {
					pid, _ = strconv.Atoi(strings.TrimSpace(ev.Text))
				}
			}
			restarts, changed, ok := eng.KernelStatusForTest(c.ID)
			if pid == 0 || !ok {
				t.Fatalf("no kernel pid (%d) or kernel (%v)", pid, ok)
			}
			if oom {
				kills.Add(1)
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			for now := restarts; now == restarts; {
				select {
				case <-changed:
				case <-ctx.Done():
					t.Fatal("Jupyter did not restart the killed kernel")
				}
				if now, changed, ok = eng.KernelStatusForTest(c.ID); !ok {
					t.Fatal("no kernel")
				}
			}
			ns := notices(drain("1"))
			if len(ns) != 1 || ns[0].Kind != interpreter.NoticeKernelRestarted || !strings.Contains(ns[0].Text, "died since the last execution") {
				t.Fatalf("notices %+v", ns)
			}
			text := ns[0].Text
			if oom {
				if !strings.Contains(text, "out-of-memory killer") {
					t.Errorf("notice %q does not name the OOM kill envd knows of", text)
				}
			} else if strings.Contains(text, memoryBlame) || strings.Contains(text, "out-of-memory") || !strings.Contains(text, "SIGKILL") {
				t.Errorf("notice %q: want the signal, and no memory blamed", text)
			}
		})
	}
}
