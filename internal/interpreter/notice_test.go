package interpreter_test

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/envd-dev/envd/internal/interpreter"
	"github.com/envd-dev/envd/internal/testutil"
)

// notices returns the notices among evs.
func notices(evs []interpreter.Event) []interpreter.Notice {
	var out []interpreter.Notice
	for _, ev := range evs {
		if ev.Kind == interpreter.EventNotice {
			out = append(out, *ev.Notice)
		}
	}
	return out
}

// envdLines returns the lines the HTTP API wrote on stderr for notices.
func envdLines(r *execResult) []string {
	var out []string
	for _, s := range r.stderr {
		if strings.HasPrefix(s, "[envd: ") {
			out = append(out, s)
		}
	}
	return out
}

// TestKernelDiedBetweenRuns: a kernel killed while idle (no execution to
// tell) is restarted by Jupyter; the next execution says the state is
// gone, as a notice (Connect) and a stderr line (HTTP), once.
func TestKernelDiedBetweenRuns(t *testing.T) {
	t.Parallel()
	c := newContext(t, "", "")
	pid, err := strconv.Atoi(strings.TrimSpace(run(t, c.ID, "import os\nkept = 1\nprint(os.getpid())").mustOK(t).out()))
	if err != nil {
		t.Fatal(err)
	}
	restarts, changed, ok := shared.eng.KernelStatusForTest(c.ID)
	if !ok {
		t.Fatal("no kernel")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ctx := testutil.Context(t, kernelTimeout)
	for {
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("Jupyter did not restart the killed kernel")
		}
		var now int
		if now, changed, ok = shared.eng.KernelStatusForTest(c.ID); !ok || now != restarts {
			break
		}
	}
	r := run(t, c.ID, "print('after')\nkept")
	lines := envdLines(r)
	if len(lines) != 1 || !strings.Contains(lines[0], "died since the last execution") {
		t.Errorf("stderr notice lines %q", lines)
	}
	if e := r.lastError(); e == nil || e.Name != "NameError" {
		t.Errorf("state survived: %+v", r.errors)
	}
	if r.out() != "after\n" {
		t.Errorf("stdout %q", r.out())
	}
	// Told once.
	evs := runDirect(t, interpreter.ExecuteRequest{Code: "1", ContextID: c.ID})
	if ns := notices(evs); len(ns) != 0 {
		t.Errorf("second run after the death got notices %+v", ns)
	}
}

// TestNoNoticeWhenTold: a death the execution itself reported, and a
// restart the user asked for, need no notice on the next run.
func TestNoNoticeWhenTold(t *testing.T) {
	t.Parallel()
	c := newContext(t, "", "")
	r := run(t, c.ID, "import os\nos._exit(1)")
	if e := r.lastError(); e == nil || e.Name != "ContextRestarting" {
		t.Fatalf("errors %+v", r.errors)
	}
	if lines := envdLines(run(t, c.ID, "1")); len(lines) != 0 {
		t.Errorf("notice after a reported death: %q", lines)
	}
	ctx := testutil.Context(t, kernelTimeout)
	if _, err := shared.eng.RestartContext(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	evs := runDirect(t, interpreter.ExecuteRequest{Code: "1", ContextID: c.ID})
	if ns := notices(evs); len(ns) != 0 {
		t.Errorf("notice after a restart the user asked for: %+v", ns)
	}
}

// TestServerRestartedBetweenRuns: the Jupyter server killed while a
// context is idle; its next execution runs on a new kernel and says so.
func TestServerRestartedBetweenRuns(t *testing.T) {
	t.Parallel()
	sup, eng, ctx := ownStack(t, nil)
	<-eng.Ready()
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
	drain("kept = 1")
	st := sup.Status()
	if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Wait for the new server, so that the next run cannot reach the old.
	for sup.Status().Generation == st.Generation || sup.Status().PID == 0 {
		select {
		case <-sup.Status().Changed:
		case <-ctx.Done():
			t.Fatal("the server did not come back")
		}
	}
	evs := drain("kept")
	ns := notices(evs)
	if len(ns) != 1 || ns[0].Kind != interpreter.NoticeKernelReplaced || !strings.Contains(ns[0].Text, "Jupyter server restarted") {
		t.Errorf("notices %+v", ns)
	}
	if kinds(evs)[0] != "started" || kinds(evs)[1] != "notice" {
		t.Errorf("the notice is not first: %v", kinds(evs))
	}
	if names := errorNames(evs); len(names) != 1 || names[0] != "NameError" {
		t.Errorf("errors %v, want NameError (fresh state)", names)
	}
}

// TestLoadedAndNotice: what kernels loaded, asked in their turn, and a
// notice queued for a context's next execution.
func TestLoadedAndNotice(t *testing.T) {
	t.Parallel()
	py := newContext(t, "python", "")
	idle := newContext(t, "python", "")
	r := newContext(t, "r", "")
	run(t, py.ID, "import json, email.mime").mustOK(t)
	// Every name but IPython's input history (_i1, _i2...).
	const names = `print(sorted(k for k in globals() if not __import__("re").fullmatch(r"_i\d+", k)))`
	before := run(t, py.ID, names).mustOK(t).out()
	run(t, r.ID, "1").mustOK(t)
	ctx := testutil.Context(t, kernelTimeout)
	got, err := shared.eng.Loaded(ctx, "python", []string{"json", "email.mime", "no_such_module_xyz"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got[py.ID], []string{"json", "email.mime"}) {
		t.Errorf("loaded in %s: %v (all %v)", py.ID, got[py.ID], got)
	}
	if slices.Contains(got[idle.ID], "email.mime") {
		t.Errorf("a context that did not import email.mime: %v", got[idle.ID])
	}
	rgot, err := shared.eng.Loaded(ctx, "r", []string{"stats", "noSuchPkgXyz"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rgot[r.ID], []string{"stats"}) {
		t.Errorf("R loaded: %v", rgot)
	}
	if got, err := shared.eng.Loaded(ctx, "python", []string{"os; import x", "json\nimport x"}); err != nil || len(got) != 0 {
		t.Errorf("module names with code in them: %v, %v; want them ignored", got, err)
	}
	// The probes left nothing in the user's namespace.
	if after := run(t, py.ID, names).mustOK(t).out(); after != before {
		t.Errorf("user namespace after probes: %s, before %s", after, before)
	}
	// Nor counted: R's execution count goes on from where it was.
	rcount := func() int {
		evs := runDirect(t, interpreter.ExecuteRequest{Code: "1", ContextID: r.ID})
		for _, ev := range evs {
			if ev.Kind == interpreter.EventStarted && ev.Started.Counted {
				return ev.Started.ExecutionCount
			}
			if ev.Kind == interpreter.EventExecutionCount {
				return ev.ExecutionCount
			}
		}
		t.Fatalf("no execution count in %v", kinds(evs))
		return 0
	}
	n := rcount()
	if _, err := shared.eng.Loaded(ctx, "r", []string{"stats"}); err != nil {
		t.Fatal(err)
	}
	if m := rcount(); m != n+1 {
		t.Errorf("R execution count %d after a probe, want %d", m, n+1)
	}

	const text = "package json changed from 1.0 to 2.0 after this context imported it"
	if err := shared.eng.Notice(py.ID, text); err != nil {
		t.Fatal(err)
	}
	if err := shared.eng.Notice(py.ID, text); err != nil { // told once
		t.Fatal(err)
	}
	evs := runDirect(t, interpreter.ExecuteRequest{Code: "print('x')", ContextID: py.ID})
	ns := notices(evs)
	if len(ns) != 1 || ns[0].Kind != interpreter.NoticePackagesChanged || ns[0].Text != text {
		t.Errorf("notices %+v", ns)
	}
	if err := shared.eng.Notice("no-such-context", text); err == nil {
		t.Error("notice for an unknown context accepted")
	}
}
