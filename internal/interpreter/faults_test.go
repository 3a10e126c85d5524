package interpreter_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/interpreter"
	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/testutil"
)

// collect reads an execution's events until its end.
func collect(t testing.TB, rd *interpreter.Reader) []interpreter.Event {
	t.Helper()
	defer rd.Close()
	ctx := testutil.Context(t, execTimeout)
	var out []interpreter.Event
	for {
		evs, err := rd.Read()
		out = append(out, evs...)
		for _, ev := range evs {
			if ev.Kind == interpreter.EventEnd {
				return out
			}
		}
		if err != nil {
			t.Fatalf("read events: %v", err)
		}
		if len(evs) > 0 {
			continue
		}
		select {
		case <-rd.Wait():
		case <-ctx.Done():
			t.Fatalf("execution did not end; events so far: %v", kinds(out))
		}
	}
}

func kinds(evs []interpreter.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Kind.String())
	}
	return out
}

func endOf(evs []interpreter.Event) *interpreter.End {
	return evs[len(evs)-1].End
}

func errorNames(evs []interpreter.Event) []string {
	var out []string
	for _, ev := range evs {
		if ev.Kind == interpreter.EventError {
			out = append(out, ev.Error.Name)
		}
	}
	return out
}

func checkSeq(t testing.TB, evs []interpreter.Event) {
	t.Helper()
	for i, ev := range evs {
		if ev.Seq != uint64(i) {
			t.Fatalf("event %d has seq %d: %v", i, ev.Seq, kinds(evs))
		}
	}
}

// runDirect runs code through the engine itself.
func runDirect(t testing.TB, req interpreter.ExecuteRequest) []interpreter.Event {
	t.Helper()
	_, rd, err := shared.eng.Execute(testutil.Context(t, kernelTimeout), req)
	if err != nil {
		t.Fatalf("execute %q: %v", short(req.Code), err)
	}
	evs := collect(t, rd)
	checkSeq(t, evs)
	return evs
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	c := newContext(t, "", "")
	run(t, c.ID, "kept = 7").mustOK(t)
	evs := runDirect(t, interpreter.ExecuteRequest{Code: "while True: pass", ContextID: c.ID, Timeout: time.Second})
	if end := endOf(evs); end.Reason != interpreter.EndTimedOut {
		t.Fatalf("end %+v, events %v", end, kinds(evs))
	}
	if names := errorNames(evs); len(names) != 2 || names[0] != "KeyboardInterrupt" || names[1] != "TimeoutError" {
		t.Errorf("errors %v, want KeyboardInterrupt then TimeoutError", names)
	}
	// Interrupted, not restarted: the state is kept.
	if got := run(t, c.ID, "kept").mustOK(t).text(); got != "7" {
		t.Errorf("after the timeout: %q", got)
	}
}

// A client that goes away interrupts its code; the context keeps its
// state (ipykernel may swallow the SIGINT: it is sent again, never
// answered by a restart within the grace).
func TestInterruptOnClientDisconnect(t *testing.T) {
	t.Parallel()
	c := newContext(t, "", "")
	run(t, c.ID, "kept = 8").mustOK(t)
	ctx, cancel := context.WithCancel(testutil.Context(t, execTimeout))
	resp := postJSON(t, ctx, "/execute", map[string]any{"code": "import time\ntime.sleep(300)", "context_id": c.ID})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// Once the kernel has the code, go away.
	first, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.Contains(first, "number_of_executions") {
		t.Fatalf("first line %q: %v", first, err)
	}
	cancel()
	resp.Body.Close()
	r := run(t, c.ID, "kept + 1")
	if r.mustOK(t).text() != "9" {
		t.Errorf("after the disconnect: %q", r.text())
	}
}

func TestInterruptQueued(t *testing.T) {
	t.Parallel()
	c := newContext(t, "", "")
	first, rd1, err := shared.eng.Execute(testutil.Context(t, time.Minute), interpreter.ExecuteRequest{Code: "import time; time.sleep(1); ran1 = True", ContextID: c.ID})
	if err != nil {
		t.Fatal(err)
	}
	second, rd2, err := shared.eng.Execute(testutil.Context(t, time.Minute), interpreter.ExecuteRequest{Code: "ran2 = True", ContextID: c.ID})
	if err != nil {
		t.Fatal(err)
	}
	second.Interrupt()
	evs2 := collect(t, rd2)
	if end := endOf(evs2); end.Reason != interpreter.EndInterrupted || len(evs2) != 2 || evs2[0].Kind != interpreter.EventStarted {
		t.Errorf("queued and interrupted: %v %+v", kinds(evs2), end)
	}
	if evs := collect(t, rd1); endOf(evs).Reason != interpreter.EndOK {
		t.Errorf("first: %+v", endOf(evs))
	}
	<-first.Done()
	if got := run(t, c.ID, "'ran2' in globals()").mustOK(t).text(); got != "False" {
		t.Errorf("the interrupted queued code ran: %s", got)
	}
	if x, err := shared.eng.Execution(second.ID); err != nil || x.End() == nil || x.End().Reason != interpreter.EndInterrupted {
		t.Errorf("finished execution not findable by id")
	}
	if ok, err := shared.eng.Interrupt(c.ID); ok || err != nil {
		t.Errorf("interrupt of an idle context: %v %v", ok, err)
	}
}

func TestInterruptIgnoredRestartsKernel(t *testing.T) {
	t.Parallel()
	c := newContext(t, "", "")
	run(t, c.ID, "lost = 1").mustOK(t)
	code := "import time\nwhile True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        pass"
	evs := runDirect(t, interpreter.ExecuteRequest{Code: code, ContextID: c.ID, Timeout: 500 * time.Millisecond})
	if end := endOf(evs); end.Reason != interpreter.EndTimedOut {
		t.Errorf("end %+v", end)
	}
	names := errorNames(evs)
	if len(names) == 0 || names[0] != "ContextRestarting" {
		t.Errorf("errors %v, want ContextRestarting first", names)
	}
	r := run(t, c.ID, "lost")
	if e := r.lastError(); e == nil || e.Name != "NameError" {
		t.Errorf("after the restart: %+v", r.errors)
	}
	if got := run(t, c.ID, "1 + 1").mustOK(t).text(); got != "2" {
		t.Errorf("context unusable after the restart: %q", got)
	}
}

func TestDenoIgnoresInterrupt(t *testing.T) {
	t.Parallel()
	c := newContext(t, "javascript", "")
	evs := runDirect(t, interpreter.ExecuteRequest{Code: "while (true) {}", ContextID: c.ID, Timeout: 500 * time.Millisecond})
	if end := endOf(evs); end.Reason != interpreter.EndTimedOut {
		t.Errorf("end %+v (%v)", end, errorNames(evs))
	}
	r := run(t, c.ID, "console.log(1 + 1)").mustOK(t)
	if r.out() != "2\n" {
		t.Errorf("after the restart: %q", r.out())
	}
	if got := strings.TrimSpace(run(t, c.ID, "console.log(process.cwd())").mustOK(t).out()); got != c.Cwd {
		t.Errorf("cwd after restart %q, want %q", got, c.Cwd)
	}
}

func TestKernelKilledMidRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, code, says string }{
		{"exit", "import os, time\nprint('before', flush=True)\ntime.sleep(0.2)\nos._exit(1)", "exited while running the code (exit status 1"},
		{"segfault", "import ctypes\nctypes.string_at(0)", "died while running the code (killed by signal SIGSEGV)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := trickyDir(t)
			c := newContext(t, "", dir)
			run(t, c.ID, "lost = 1").mustOK(t)
			r := run(t, c.ID, tc.code)
			e := r.lastError()
			if e == nil || e.Name != "ContextRestarting" || !strings.Contains(e.Value, tc.says) {
				t.Fatalf("errors %+v, lines %v", r.errors, r.types())
			}
			r = run(t, c.ID, "import os\nprint(os.getcwd())\nprint(os.environ.get('ENVD_TEST_GLOBAL'))\nlost")
			if e := r.lastError(); e == nil || e.Name != "NameError" {
				t.Errorf("state survived the death: %+v", r.errors)
			}
			if r.out() != dir+"\nglobal value\n" {
				t.Errorf("cwd/env not re-applied after the death: %q", r.out())
			}
		})
	}
}

// TestServerKilled kills the Jupyter server (only the pid its supervisor
// started) with SIGKILL while code runs, on a stack of its own.
func TestServerKilled(t *testing.T) {
	t.Parallel()
	sup, eng, ctx := ownStack(t, func() map[string]string { return map[string]string{"ENVD_TEST_GLOBAL": "g2"} })
	<-eng.Ready()
	dir := trickyDir(t)
	c, err := eng.CreateContext(ctx, "python", dir)
	if err != nil {
		t.Fatal(err)
	}
	drain := func(req interpreter.ExecuteRequest) []interpreter.Event {
		_, rd, err := eng.Execute(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return collect(t, rd)
	}
	drain(interpreter.ExecuteRequest{Code: "lost = 1", ContextID: c.ID})
	x, rd, err := eng.Execute(ctx, interpreter.ExecuteRequest{Code: "import time\nprint('started', flush=True)\ntime.sleep(120)", ContextID: c.ID})
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the code to run, then SIGKILL the server.
	readUntil(t, rd, isKind(interpreter.EventStdout))
	st := sup.Status()
	if st.PID == 0 {
		t.Fatal("no server pid")
	}
	if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, rd)
	end := endOf(evs)
	if end.Reason != interpreter.EndServerRestarted {
		t.Errorf("end %+v, errors %v", end, errorNames(evs))
	}
	if names := errorNames(evs); len(names) != 1 || names[0] != "ContextRestarting" {
		t.Errorf("errors %v", names)
	}
	<-x.Done()

	// Same context id, a new kernel: fresh state, same cwd, env re-set.
	evs = drain(interpreter.ExecuteRequest{Code: "import os\nprint(os.getcwd(), os.environ['ENVD_TEST_GLOBAL'])\nlost", ContextID: c.ID})
	var out string
	for _, ev := range evs {
		if ev.Kind == interpreter.EventStdout {
			out += ev.Text
		}
	}
	if out != dir+" g2\n" {
		t.Errorf("after the server restart: stdout %q (%v)", out, kinds(evs))
	}
	if names := errorNames(evs); len(names) != 1 || names[0] != "NameError" {
		t.Errorf("errors %v, want NameError (fresh state)", names)
	}
	if st := sup.Status(); st.Generation < 2 {
		t.Errorf("generation %d", st.Generation)
	}
	// New contexts and the default one work.
	c2, err := eng.CreateContext(ctx, "python", "")
	if err != nil {
		t.Fatalf("new context after the restart: %v", err)
	}
	for _, id := range []string{c2.ID, ""} {
		evs := drain(interpreter.ExecuteRequest{Code: "1 + 1", ContextID: id})
		if endOf(evs).Reason != interpreter.EndOK {
			t.Errorf("context %q after the restart: %v %+v", id, kinds(evs), endOf(evs))
		}
	}
	if err := eng.Health(); err != nil {
		t.Errorf("health: %v", err)
	}
}

// heapPeak samples the heap while it runs; stop returns the peak growth
// over the heap at start (after a GC) and the growth left after a GC.
func heapPeak() (stop func() (peak, after int64)) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		for {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	}()
	return func() (int64, int64) {
		close(done)
		wg.Wait()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return int64(peak.Load()) - int64(base), int64(ms.HeapInuse) - int64(base)
	}
}

// streamStdout posts code and counts the stdout bytes of the stream as it
// arrives, without keeping it. What is bounded is silence, not the whole:
// a hundred megabytes through -race builds on a loaded machine take
// minutes, and the stream fails only when no line comes for execTimeout.
func streamStdout(t *testing.T, contextID, code string) (total, lines int) {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	silent := time.AfterFunc(execTimeout, func() {
		cancel(fmt.Errorf("no line of the /execute stream for %v", execTimeout))
	})
	defer silent.Stop()
	resp := postJSON(t, ctx, "/execute", map[string]any{"code": code, "context_id": contextID})
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 1<<20)
	for {
		l, err := br.ReadSlice('\n')
		silent.Reset(execTimeout)
		if err != nil && context.Cause(ctx) != nil {
			t.Fatal(context.Cause(ctx))
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			t.Fatalf("a line longer than 1 MiB")
		}
		if errors.Is(err, io.EOF) {
			return total, lines
		}
		if err != nil {
			t.Fatal(err)
		}
		lines++
		if bytes.HasPrefix(l, []byte(`{"type": "stdout"`)) {
			var v struct{ Text string }
			if err := json.Unmarshal(l, &v); err != nil {
				t.Fatal(err)
			}
			total += len(v.Text)
		}
	}
}

// TestBigPrint streams a 100 MB print through the HTTP API: the kernel
// sends it as one message, which envd stores and sends in pieces as the
// client reads them; memory holds that one message (a few copies while it
// is decoded), nothing more, and nothing is kept afterwards.
func TestBigPrint(t *testing.T) {
	c := newContext(t, "", "")
	const size = 100_000_000
	stop := heapPeak()
	total, lines := streamStdout(t, c.ID, fmt.Sprintf("print('x' * %d)", size))
	peak, after := stop()
	if total != size+1 {
		t.Errorf("got %d bytes of output, want %d", total, size+1)
	}
	t.Logf("100 MB print: %d lines; heap peak +%d MiB, after +%d MiB", lines, peak>>20, after>>20)
	// The kernel's one message is read whole by the WebSocket layer and
	// decoded (frame, raw content, text: ~3 copies plus their garbage).
	if peak > 8*size {
		t.Errorf("heap grew by %d MiB streaming one 100 MB message", peak>>20)
	}
	if after > 32<<20 {
		t.Errorf("%d MiB still held after the print", after>>20)
	}
	if r := run(t, c.ID, "1 + 1").mustOK(t); r.text() != "2" {
		t.Errorf("after the big print: %q", r.text())
	}
}

// TestManyPrints: 256 MiB (128 under -race) in 1 MiB flushes; memory does
// not follow the total.
func TestManyPrints(t *testing.T) {
	c := newContext(t, "", "")
	n := 256
	if raceEnabled {
		n = 128
	}
	stop := heapPeak()
	total, _ := streamStdout(t, c.ID, fmt.Sprintf("import sys\nfor i in range(%d):\n    sys.stdout.write('y' * (1 << 20)); sys.stdout.flush()\nprint()", n))
	peak, after := stop()
	if total != n<<20+1 {
		t.Errorf("got %d bytes, want %d", total, n<<20+1)
	}
	t.Logf("%d x 1 MiB prints: heap peak +%d MiB, after +%d MiB", n, peak>>20, after>>20)
	if peak > 160<<20 {
		t.Errorf("heap grew by %d MiB streaming %d MiB of small messages", peak>>20, n)
	}
	if after > 32<<20 {
		t.Errorf("%d MiB still held after the prints", after>>20)
	}
}

func TestTenContextsAtOnce(t *testing.T) {
	t.Parallel()
	const n = 10
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i] = newContext(t, "", "").ID
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// Each execution checks in, then waits until all have: they can only
	// all see ten if they run at the same time.
	dir := t.TempDir()
	outs := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i] = run(t, ids[i], fmt.Sprintf(`import os, time
open(os.path.join(%[1]q, "%[2]d"), "w").close()
deadline = time.monotonic() + 100
while len(os.listdir(%[1]q)) < %[3]d and time.monotonic() < deadline:
    time.sleep(0.01)
print(%[2]d, os.getpid(), len(os.listdir(%[1]q)))`, dir, i, n)).mustOK(t).out()
		}()
	}
	wg.Wait()
	pids := map[string]bool{}
	for i, out := range outs {
		f := strings.Fields(out)
		if len(f) != 3 || f[0] != fmt.Sprint(i) || f[2] != fmt.Sprint(n) {
			t.Errorf("context %d printed %q, want its number, its pid and %d executions seen running", i, out, n)
			continue
		}
		pids[f[1]] = true
	}
	if len(pids) != n {
		t.Errorf("%d distinct kernels, want %d", len(pids), n)
	}
}

func TestBadInputs(t *testing.T) {
	t.Parallel()
	file := t.TempDir() + "/file"
	if err := writeFile(file); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, method, path string
		body               any
		status             int
		want               []string // substrings of the body
	}{
		{"unknown context", "POST", "/execute", `{"code": "1", "context_id": "nope"}`, 404, []string{"Context nope not found"}},
		{"context and language", "POST", "/execute", `{"code": "1", "context_id": "x", "language": "python"}`, 400, []string{"Only one of context_id or language can be provided"}},
		{"code not a string", "POST", "/execute", `{"code": {"a": 1}}`, 422, []string{`"code"`, "valid string"}},
		{"code missing", "POST", "/execute", `{"language": "python"}`, 422, []string{`"code"`, "Field required"}},
		{"code null", "POST", "/execute", `{"code": null}`, 422, []string{`"code"`}},
		{"unknown language", "POST", "/execute", `{"code": "1", "language": "cobol"}`, 400, []string{`"cobol"`, "python, javascript, typescript, r, bash"}},
		{"malformed JSON", "POST", "/execute", `{"code": `, 422, []string{"json_invalid", "JSON decode error"}},
		{"not an object", "POST", "/execute", `[1]`, 422, []string{"dictionary"}},
		{"env value not a string", "POST", "/execute", `{"code": "1", "env_vars": {"FOO": 1}}`, 422, []string{`"env_vars"`, `"FOO"`}},
		{"env not an object", "POST", "/execute", `{"code": "1", "env_vars": "x"}`, 422, []string{`"env_vars"`}},
		{"language not a string", "POST", "/execute", `{"code": "1", "language": 3}`, 422, []string{`"language"`}},
		{"bash env name", "POST", "/execute", `{"code": "1", "language": "bash", "env_vars": {"NOT-AN-ID": "x"}}`, 400, []string{"NOT-AN-ID"}},
		{"missing cwd", "POST", "/contexts", `{"cwd": "/does/not/exist"}`, 400, []string{"/does/not/exist does not exist"}},
		{"cwd is a file", "POST", "/contexts", fmt.Sprintf(`{"cwd": %q}`, file), 400, []string{"is not a directory"}},
		{"context unknown language", "POST", "/contexts", `{"language": "cobol"}`, 400, []string{`"cobol"`, "available languages"}},
		{"context language not a string", "POST", "/contexts", `{"language": ["python"]}`, 422, []string{`"language"`}},
		{"delete unknown", "DELETE", "/contexts/nope", nil, 404, []string{"Context nope not found"}},
		{"restart unknown", "POST", "/contexts/nope/restart", nil, 404, []string{"Context nope not found"}},
		{"unknown path", "GET", "/nope", nil, 404, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			status, body := call(t, tc.method, tc.path, tc.body)
			if status != tc.status {
				t.Errorf("status %d, want %d: %s", status, tc.status, body)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("body %q does not contain %q", body, w)
				}
			}
		})
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	resp := do(t, testutil.Context(t, time.Minute), http.MethodGet, "/health", nil)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != `"OK"` || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("health: %d %s %q", resp.StatusCode, b, resp.Header.Get("Content-Type"))
	}
}

// IRkernel answers an interrupt with an "abort" reply (E2B's server hangs
// there: it checks for "abort" while kernels send "aborted"); the state is
// kept.
func TestRInterruptAborts(t *testing.T) {
	t.Parallel()
	c := newContext(t, "r", "")
	run(t, c.ID, "kept <- 3").mustOK(t)
	evs := runDirect(t, interpreter.ExecuteRequest{Code: "Sys.sleep(60)", ContextID: c.ID, Timeout: time.Second})
	if end := endOf(evs); end.Reason != interpreter.EndTimedOut {
		t.Errorf("end %+v, errors %v", end, errorNames(evs))
	}
	if names := errorNames(evs); len(names) != 2 || names[0] != "ExecutionAborted" || names[1] != "TimeoutError" {
		t.Errorf("errors %v, want ExecutionAborted then TimeoutError", names)
	}
	if got := strings.TrimSpace(run(t, c.ID, "cat(kept + 1)").mustOK(t).out()); got != "4" {
		t.Errorf("after the interrupt: %q", got)
	}
}

// TestRemoveWhileRunning: removing a context ends its running and its
// queued code with the removal, however the kernel's shutdown ends the
// running code (its channels going first, or an interrupt's error reply
// first: at least 5 runs in 80 beside two CPU burners, before finishRun
// knew).
func TestRemoveWhileRunning(t *testing.T) {
	t.Parallel()
	ctx := testutil.Context(t, time.Minute)
	c, err := shared.eng.CreateContext(ctx, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	_, running, err := shared.eng.Execute(ctx, interpreter.ExecuteRequest{Code: "import time\nprint('go', flush=True)\ntime.sleep(60)", ContextID: c.ID})
	if err != nil {
		t.Fatal(err)
	}
	_, queued, err := shared.eng.Execute(ctx, interpreter.ExecuteRequest{Code: "1", ContextID: c.ID})
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, running, isKind(interpreter.EventStdout)) // the code runs
	if err := shared.eng.RemoveContext(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	for name, rd := range map[string]*interpreter.Reader{"running": running, "queued": queued} {
		evs := collect(t, rd)
		end := endOf(evs)
		if end.Reason != interpreter.EndContextRestarted || !strings.Contains(end.Message, "removed") {
			t.Errorf("%s: end %+v (%v)", name, end, kinds(evs))
		}
	}
}

// TestServerFailingAnswersAtOnce: while the Jupyter server fails to start,
// code requests are refused at once with the cause, not after waiting for
// a server that is not coming.
func TestServerFailingAnswersAtOnce(t *testing.T) {
	t.Parallel()
	sup := jupyter.New(jupyter.Options{
		Command:    []string{"/bin/sh", "-c", "echo no jupyter here >&2; exit 3", "sh"},
		MinBackoff: 10 * time.Millisecond,
		MaxBackoff: 50 * time.Millisecond,
		Logger:     testLogger(),
	})
	eng := interpreter.New(interpreter.Options{Supervisor: sup, Logger: testLogger(), DefaultCwd: func() string { return "/tmp" }})
	ctx := testutil.Context(t, 3*time.Minute)
	if err := sup.Start(ctx); err == nil {
		t.Fatal("a server that exits started")
	}
	eng.Start()
	t.Cleanup(func() {
		eng.Close()
		_ = sup.Stop(context.Background())
	})
	if st := sup.Status(); !st.StartFailing {
		t.Fatalf("status %+v", st)
	}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, interpreter.ErrNotReady) || !strings.Contains(err.Error(), "exit status 3") {
			t.Errorf("%s: %v, want not ready with the cause", what, err)
		}
		if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: answered only when the request's context ended", what)
		}
	}
	_, _, err := eng.Execute(ctx, interpreter.ExecuteRequest{Code: "1"})
	check("execute", err)
	_, err = eng.CreateContext(ctx, "python", "")
	check("create context", err)
	_, err = eng.Languages(ctx)
	check("languages", err)
	check("health", eng.Health())
}
