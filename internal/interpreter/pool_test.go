package interpreter_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/internal/interpreter"
	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/testutil"
)

// poolEngine is an engine of the test's own on the shared Jupyter server
// (see ownEngine), started, with prestarted kernels: its pool fills once
// its default Python context exists.
func poolEngine(t testing.TB, opts interpreter.Options) *interpreter.Engine {
	t.Helper()
	if opts.ReaderGrace == 0 {
		opts.ReaderGrace = 5 * time.Second
	}
	if opts.InterruptGrace == 0 {
		opts.InterruptGrace = 3 * time.Second
	}
	eng := ownEngine(t, opts)
	eng.Start()
	return eng
}

// waitWarm waits until n prestarted kernels of lang wait in eng's pool and
// returns their ids. It fails if the pool ever holds more than n.
func waitWarm(t testing.TB, eng *interpreter.Engine, lang string, n int) []string {
	t.Helper()
	ctx := testutil.Context(t, kernelTimeout)
	for {
		ids, changed := eng.WarmForTest(lang)
		if len(ids) > n {
			t.Fatalf("%d prestarted %s kernels, more than the %d configured", len(ids), lang, n)
		}
		if len(ids) == n {
			return ids
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("the pool never had %d prestarted %s kernels (it has %d)", n, lang, len(ids))
		}
	}
}

// runOn runs code on a context of eng and returns its stdout, failing on
// an error, and its execution count.
func runOn(t testing.TB, eng *interpreter.Engine, contextID, code string) (string, int) {
	t.Helper()
	_, rd, err := eng.Execute(testutil.Context(t, kernelTimeout), interpreter.ExecuteRequest{Code: code, ContextID: contextID})
	if err != nil {
		t.Fatalf("execute %q: %v", short(code), err)
	}
	evs := collect(t, rd)
	var out strings.Builder
	count := 0
	for _, ev := range evs {
		switch ev.Kind {
		case interpreter.EventStdout:
			out.WriteString(ev.Text)
		case interpreter.EventStarted:
			if ev.Started.Counted {
				count = ev.Started.ExecutionCount
			}
		case interpreter.EventExecutionCount:
			count = ev.ExecutionCount
		case interpreter.EventError:
			t.Fatalf("%q raised %s: %s\n%s", short(code), ev.Error.Name, ev.Error.Value, ev.Error.Traceback)
		}
	}
	if end := endOf(evs); end.Reason != interpreter.EndOK {
		t.Fatalf("%q ended %+v", short(code), end)
	}
	return out.String(), count
}

// envMap is a sandbox-wide environment the test changes as it goes.
type envMap struct{ m sync.Map }

func (e *envMap) get() map[string]string {
	out := map[string]string{}
	e.m.Range(func(k, v any) bool {
		out[k.(string)] = v.(string)
		return true
	})
	return out
}

// probes print, on their first execution in a context, one line per fact
// a kernel could owe to where and how it started: environment, working
// directories, ids, paths, namespace, loaded modules.
var probes = []struct{ lang, code string }{
	{"python", `import os as __o, sys as __s, json as __j
for __k, __v in sorted(__o.environ.items()): print("env", __k, __j.dumps(__v))
print("cwd", __o.getcwd(), __o.path.realpath("."))
print("ids", __o.getuid(), __o.geteuid(), __o.getgid(), sorted(__o.getgroups()))
print("umask", __o.umask(__o.umask(0o22)))
print("path", __j.dumps(__s.path))
print("argv", __j.dumps(__s.argv))
print("dh", __j.dumps([str(d) for d in _dh]), __j.dumps(get_ipython().starting_dir))
print("ns", sorted(k for k in get_ipython().user_ns if not k.startswith("__")))
print("modules", sorted(__s.modules))
print("count", get_ipython().execution_count)`},
	{"r", `local({
e <- Sys.getenv(); e <- e[names(e) != "R_SESSION_TMPDIR"]; for (k in sort(names(e))) cat("env", k, jsonlite::toJSON(unname(e[[k]]), auto_unbox = TRUE), "\n")
cat("cwd", getwd(), normalizePath("."), "\n")
cat("ids", system("id", intern = TRUE), "\n")
cat("umask", format(Sys.umask()), "\n")
cat("ns", ls(globalenv(), all.names = TRUE), "\n")
cat("search", search(), "\n")
cat("libpaths", .libPaths(), "\n")
cat("tempdir", tempdir() == Sys.getenv("R_SESSION_TMPDIR"), "\n")
cat("args", commandArgs(), "\n")
cat("loaded", sort(loadedNamespaces()), "\n")
o <- options(); for (k in sort(names(o))) cat("option", k, deparse(o[[k]], width.cutoff = 500L), "\n")
})`},
	{"bash", `env | LC_ALL=C sort | sed 's/^/env /'
echo "cwd $PWD $(pwd -P)"
echo "oldpwd ${OLDPWD-unset} $(declare -p OLDPWD 2>&1)"
echo "ids $(id)"
echo "umask $(umask)"
echo "dirs $(dirs -l)"
echo "vars $(compgen -v | grep -v -x -e BASHPID -e RANDOM -e SRANDOM -e SECONDS -e EPOCHREALTIME -e EPOCHSECONDS -e LINENO -e BASH_COMMAND -e _ | LC_ALL=C sort | tr '\n' ' ')"
echo "shopt $(shopt -p | tr '\n' ' ')"
echo "set $-"
echo "jobs $(jobs -p)"`},
}

// TestPoolHandoverLikeFresh: a context that takes a prestarted kernel is
// the same as one whose kernel started for it, in the same directory and
// with the same sandbox-wide env, changed after the pool was filled: same
// working directory, env, user, paths, an empty namespace, execution
// count 1. In the default directory (which the pool sets its kernels up
// for ahead of their handover) and in another.
func TestPoolHandoverLikeFresh(t *testing.T) {
	t.Parallel()
	env := &envMap{}
	env.m.Store("ENVD_POOL_FILL", "at fill")
	env.m.Store("ENVD_POOL_GONE", "removed after the fill")
	warm := poolEngine(t, interpreter.Options{GlobalEnv: env.get,
		WarmKernels: interpreter.WarmKernels{"python": 2, "r": 2, "bash": 2}})
	fresh := ownEngine(t, interpreter.Options{GlobalEnv: env.get})
	for _, p := range probes {
		waitWarm(t, warm, p.lang, 2)
	}
	env.m.Store("ENVD_POOL_FILL", "changed after the fill")
	env.m.Delete("ENVD_POOL_GONE")
	env.m.Store("ENVD_POOL_LATE", "set after the fill")

	for _, p := range probes {
		t.Run(p.lang, func(t *testing.T) {
			t.Parallel()
			ctx := testutil.Context(t, kernelTimeout)
			// The default directory first: its context and the fresh one
			// compared as below, without the restart.
			dc, err := warm.CreateContext(ctx, p.lang, "")
			if err != nil {
				t.Fatal(err)
			}
			fdc, err := fresh.CreateContext(ctx, p.lang, "")
			if err != nil {
				t.Fatal(err)
			}
			if !warm.PrestartedForTest(dc.ID) {
				t.Fatal("the context in the default directory did not take a prestarted kernel")
			}
			dout, dcount := runOn(t, warm, dc.ID, p.code)
			fdout, fdcount := runOn(t, fresh, fdc.ID, p.code)
			dout = pointer.ReplaceAllString(strings.ReplaceAll(dout, dc.ID, "KERNEL_ID"), "<pointer>")
			fdout = pointer.ReplaceAllString(strings.ReplaceAll(fdout, fdc.ID, "KERNEL_ID"), "<pointer>")
			if d := lineDiff(fdout, dout); d != "" || dcount != 1 || fdcount != 1 {
				t.Errorf("in the default directory, the prestarted kernel differs from a fresh one (counts %d, %d; - fresh, + prestarted):\n%s", dcount, fdcount, d)
			}
			if !strings.Contains(dout, "changed after the fill") || !strings.Contains(dout, "set after the fill") || strings.Contains(dout, "ENVD_POOL_GONE") {
				t.Errorf("in the default directory, the sandbox-wide env is not the one after the fill:\n%s", dout)
			}

			dir := trickyDir(t)
			wc, err := warm.CreateContext(ctx, p.lang, dir)
			if err != nil {
				t.Fatal(err)
			}
			if !warm.PrestartedForTest(wc.ID) {
				t.Fatal("the context did not take the prestarted kernel")
			}
			fc, err := fresh.CreateContext(ctx, p.lang, dir)
			if err != nil {
				t.Fatal(err)
			}
			if fresh.PrestartedForTest(fc.ID) {
				t.Fatal("a context of an engine without a pool took a prestarted kernel")
			}
			wout, wcount := runOn(t, warm, wc.ID, p.code)
			fout, fcount := runOn(t, fresh, fc.ID, p.code)
			if wcount != 1 || fcount != 1 {
				t.Errorf("first execution counts: prestarted %d, fresh %d; want 1", wcount, fcount)
			}
			// What differs between any two kernels: ids, addresses.
			wout = pointer.ReplaceAllString(strings.ReplaceAll(wout, wc.ID, "KERNEL_ID"), "<pointer>")
			fout = pointer.ReplaceAllString(strings.ReplaceAll(fout, fc.ID, "KERNEL_ID"), "<pointer>")
			if d := lineDiff(fout, wout); d != "" {
				t.Errorf("the prestarted kernel differs from a fresh one (- fresh, + prestarted):\n%s", d)
			}
			for _, want := range []string{"cwd " + dir, "changed after the fill", "set after the fill"} {
				if !strings.Contains(wout, want) {
					t.Errorf("the prestarted kernel's probe lacks %q:\n%s", want, wout)
				}
			}
			if strings.Contains(wout, "ENVD_POOL_GONE") {
				t.Errorf("a sandbox-wide var removed after the fill is still set:\n%s", wout)
			}

			// Jupyter restarts a kernel where it first started: the
			// prestarted one in /, then setup moves it again.
			for _, e := range []struct {
				eng *interpreter.Engine
				id  string
			}{{warm, wc.ID}, {fresh, fc.ID}} {
				if _, err := e.eng.RestartContext(ctx, e.id); err != nil {
					t.Fatal(err)
				}
			}
			wout, wcount = runOn(t, warm, wc.ID, p.code)
			fout, fcount = runOn(t, fresh, fc.ID, p.code)
			if wcount != 1 || fcount != 1 {
				t.Errorf("first execution counts after a restart: prestarted %d, fresh %d; want 1", wcount, fcount)
			}
			wout = pointer.ReplaceAllString(strings.ReplaceAll(wout, wc.ID, "KERNEL_ID"), "<pointer>")
			fout = pointer.ReplaceAllString(strings.ReplaceAll(fout, fc.ID, "KERNEL_ID"), "<pointer>")
			if d := lineDiff(fout, wout); d != "" {
				t.Errorf("after a restart, the prestarted kernel differs from a fresh one (- fresh, + prestarted):\n%s", d)
			}
		})
	}
}

var pointer = regexp.MustCompile(`<pointer: 0x[0-9a-f]+>`)

// lineDiff lists the lines only in a (-) or only in b (+), in order.
func lineDiff(a, b string) string {
	count := func(s string) map[string]int {
		m := map[string]int{}
		for l := range strings.SplitSeq(s, "\n") {
			m[l]++
		}
		return m
	}
	ca, cb := count(a), count(b)
	var out strings.Builder
	for l := range strings.SplitSeq(a, "\n") {
		if cb[l] == 0 {
			fmt.Fprintf(&out, "- %s\n", l)
		}
	}
	for l := range strings.SplitSeq(b, "\n") {
		if ca[l] == 0 {
			fmt.Fprintf(&out, "+ %s\n", l)
		}
	}
	return out.String()
}

// TestPoolRefills: a context takes the prestarted kernel (its id is the
// kernel's), the pool starts another, and the next context takes that
// one; so does a language default's first use. Languages reports the
// kernels ready.
func TestPoolRefills(t *testing.T) {
	t.Parallel()
	eng := poolEngine(t, interpreter.Options{WarmKernels: interpreter.WarmKernels{"py": 1}})
	ctx := testutil.Context(t, kernelTimeout)
	first := waitWarm(t, eng, "python", 1)
	langs, err := eng.Languages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range langs {
		if want := map[string]int{"python": 1}[l.Language]; l.WarmKernels != want {
			t.Errorf("Languages: %s has %d prestarted kernels, want %d", l.Language, l.WarmKernels, want)
		}
	}
	c1, err := eng.CreateContext(ctx, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	if c1.ID != first[0] || !eng.PrestartedForTest(c1.ID) {
		t.Fatalf("context %s did not take the prestarted kernel %s", c1.ID, first[0])
	}
	second := waitNewWarm(t, eng, "python", first[0])
	c2, err := eng.CreateContext(ctx, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	if c2.ID != second {
		t.Fatalf("context %s did not take the refilled kernel %s", c2.ID, second)
	}

	// The default Python context, removed, comes back on its next use
	// with the next prestarted kernel.
	third := waitNewWarm(t, eng, "python", second)
	def, err := eng.Context("default")
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.RemoveContext(ctx, def.ID); err != nil {
		t.Fatal(err)
	}
	if out, count := runOn(t, eng, "", "import os\nprint(os.getcwd())"); out != "/tmp\n" || count != 1 {
		t.Errorf("the new default context printed %q (execution count %d)", out, count)
	}
	if def, err = eng.Context("default"); err != nil || def.ID != third {
		t.Errorf("default context %v (%v), want the prestarted kernel %s", def, err, third)
	}
	for _, c := range []*interpreter.Context{c1, c2, def} {
		if out, _ := runOn(t, eng, c.ID, "print(1 + 1)"); out != "2\n" {
			t.Errorf("context %s printed %q", c.ID, out)
		}
	}
}

// waitNewWarm waits until the one prestarted kernel of lang in eng's pool
// is another than old, and returns its id.
func waitNewWarm(t testing.TB, eng *interpreter.Engine, lang, old string) string {
	t.Helper()
	ctx := testutil.Context(t, kernelTimeout)
	for {
		ids, changed := eng.WarmForTest(lang)
		if len(ids) > 1 {
			t.Fatalf("%d prestarted %s kernels, more than the 1 configured", len(ids), lang)
		}
		if len(ids) == 1 && ids[0] != old {
			return ids[0]
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("the pool was not refilled (prestarted %s kernels: %v)", lang, ids)
		}
	}
}

// TestPoolDisabled: with every count 0 there is no pool: contexts start
// their own kernels.
func TestPoolDisabled(t *testing.T) {
	t.Parallel()
	warm, err := interpreter.ParseWarmKernels("python=0,r=0,javascript=0")
	if err != nil {
		t.Fatal(err)
	}
	eng := poolEngine(t, interpreter.Options{WarmKernels: warm})
	ctx := testutil.Context(t, kernelTimeout)
	select {
	case <-eng.Ready():
	case <-ctx.Done():
		t.Fatal(eng.Health())
	}
	if _, changed := eng.WarmForTest("python"); changed != nil {
		t.Fatal("the engine has a pool")
	}
	c, err := eng.CreateContext(ctx, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	if eng.PrestartedForTest(c.ID) {
		t.Error("the context took a prestarted kernel")
	}
	langs, err := eng.Languages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range langs {
		if l.WarmKernels != 0 {
			t.Errorf("Languages: %s has %d prestarted kernels", l.Language, l.WarmKernels)
		}
	}
}

// kernelPID is the pid of the kernel process of Jupyter kernel id (found
// by its connection file on its command line).
func kernelPID(t testing.TB, id string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), "kernel-"+id+".json") {
			return pid
		}
	}
	t.Fatalf("no process of kernel %s", id)
	return 0
}

// TestPoolDiscardsDeadKernel: a prestarted kernel killed while it waits
// (Jupyter restarts it in place) leaves the pool, never to be handed
// over; the pool waits its backoff before starting another (a kernel that
// keeps dying is not restarted in a loop).
func TestPoolDiscardsDeadKernel(t *testing.T) {
	t.Parallel()
	clock := quartz.NewMock(t)
	backoff := clock.Trap().NewTimer("pool", "backoff")
	eng := poolEngine(t, interpreter.Options{Clock: clock, WarmKernels: interpreter.WarmKernels{"python": 1}})
	t.Cleanup(backoff.Close) // before the engine's cleanup: a trapped timer would block its filler
	ctx := testutil.Context(t, kernelTimeout)
	dead := waitWarm(t, eng, "python", 1)[0]
	if err := syscall.Kill(kernelPID(t, dead), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	call, err := backoff.Wait(ctx)
	if err != nil {
		t.Fatalf("the pool did not back off after its kernel died: %v", err)
	}
	if call.Duration != time.Second {
		t.Errorf("backoff %s, want 1s", call.Duration)
	}
	call.MustRelease(ctx)
	backoff.Close() // the next waits (a context taken pokes the pool) need no release
	if ids, _ := eng.WarmForTest("python"); len(ids) != 0 {
		t.Errorf("the dead kernel is still in the pool: %v", ids)
	}
	c, err := eng.CreateContext(ctx, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	if c.ID == dead || eng.PrestartedForTest(c.ID) {
		t.Errorf("context %s took a prestarted kernel (the dead one is %s)", c.ID, dead)
	}
	clock.Advance(time.Second).MustWait(ctx)
	next := waitNewWarm(t, eng, "python", dead)
	c, err = eng.CreateContext(ctx, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != next {
		t.Errorf("context %s did not take the new prestarted kernel %s", c.ID, next)
	}
	if out, count := runOn(t, eng, c.ID, "print(1 + 1)"); out != "2\n" || count != 1 {
		t.Errorf("printed %q (execution count %d)", out, count)
	}
}

// TestPoolServerRestart: a Jupyter server restart (SIGKILL) ends the
// prestarted kernels with it; the pool refills from the new server, and
// a context takes the new kernel. On a stack of its own.
func TestPoolServerRestart(t *testing.T) {
	t.Parallel()
	sup, eng, ctx := ownStack(t, nil, func(o *interpreter.Options) {
		o.WarmKernels = interpreter.WarmKernels{"python": 1}
	})
	old := waitWarm(t, eng, "python", 1)[0]
	st := sup.Status()
	if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	fresh := waitNewWarm(t, eng, "python", old)
	if now := sup.Status(); now.Generation <= st.Generation || now.State != jupyter.ServerReady {
		t.Errorf("server %s, generation %d (was %d)", now.State, now.Generation, st.Generation)
	}
	c, err := eng.CreateContext(ctx, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != fresh {
		t.Errorf("context %s did not take the new prestarted kernel %s", c.ID, fresh)
	}
	if out, count := runOn(t, eng, c.ID, "print(1 + 1)"); out != "2\n" || count != 1 {
		t.Errorf("printed %q (execution count %d)", out, count)
	}
}

// TestPoolShutdown: Shutdown deletes the prestarted kernels, a start in
// flight included, and leaves the contexts' kernels to the supervisor.
// On a stack of its own, so that its kernels are all the server has.
func TestPoolShutdown(t *testing.T) {
	t.Parallel()
	sup, eng := newStack(shared.layout, nil, func(o *interpreter.Options) {
		o.WarmKernels = interpreter.WarmKernels{"python": 2, "bash": 1}
	})
	ctx := testutil.Context(t, 3*time.Minute)
	if err := startSupervisor(ctx, sup); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sup.Stop(context.Background()) })
	eng.Start()
	t.Cleanup(eng.Close)
	warm := waitWarm(t, eng, "python", 1) // the next start is under way
	def, err := eng.Context("default")
	if err != nil {
		t.Fatal(err)
	}
	eng.Shutdown(ctx)
	client, err := sup.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kernels, err := client.Kernels(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, k := range kernels {
		ids = append(ids, k.ID)
	}
	if len(ids) != 1 || ids[0] != def.ID {
		t.Errorf("kernels after Shutdown: %v; want only the default context's %s (prestarted: %v)", ids, def.ID, warm)
	}
}

func TestParseWarmKernels(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "", want: ""},
		{in: "python=1", want: "python=1"},
		{in: " py = 2 , r=1,sh=0 ", want: "bash=0,python=2,r=1"},
		{in: "python3=1,ir=1,bash=1,", want: "bash=1,python=1,r=1"},
		{in: "python=0,javascript=0,ts=0,java=0", want: "java=0,javascript=0,python=0,typescript=0"},
		{in: "python=8", want: "python=8"},
		{in: "python", err: `python: want language=count items separated by commas, e.g. python=1,r=0`},
		{in: "=1", err: `=1: want language=count`},
		{in: "python=x", err: `python=x: the count must be a whole number from 0 to 8`},
		{in: "python=-1", err: `python=-1: the count must be a whole number from 0 to 8`},
		{in: "python=9", err: `python=9: the count must be a whole number from 0 to 8`},
		{in: "python=1,py=0", err: `py=0: python is given twice`},
		{in: "javascript=1", err: `javascript=1: JavaScript and TypeScript kernels (Deno) cannot be prestarted: Deno resolves npm packages`},
		{in: "deno=2", err: `deno=2: JavaScript and TypeScript kernels (Deno) cannot be prestarted`},
		{in: "java=1", err: `java=1: Java kernels cannot be prestarted: their JVMs keep the directory they start in`},
		{in: "julia=1", err: `julia=1: unknown language "julia": kernels can be prestarted for python, r and bash`},
		{in: "julia=0", err: `julia=0: unknown language "julia"`},
	} {
		got, err := interpreter.ParseWarmKernels(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.err)):
			t.Errorf("ParseWarmKernels(%q) = %v, %v; want the error %q...", tc.in, got, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("ParseWarmKernels(%q): %v", tc.in, err)
		case tc.err == "" && got.String() != tc.want:
			t.Errorf("ParseWarmKernels(%q) = %q, want %q", tc.in, got, tc.want)
		case tc.err == "" && got.Validate() != nil:
			t.Errorf("ParseWarmKernels(%q) is not valid: %v", tc.in, got.Validate())
		}
	}
	if err := (interpreter.WarmKernels{"python": 1, "javascript": 1}).Validate(); err == nil {
		t.Error("a pool of JavaScript kernels is valid")
	}
	if got := interpreter.DefaultWarmKernels().String(); got != "python=1" {
		t.Errorf("default %q, want python=1", got)
	}
}
