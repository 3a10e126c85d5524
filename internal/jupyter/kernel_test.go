package jupyter_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/testutil"
)

func TestExecuteKeepsStateAndCountsExecutions(t *testing.T) {
	t.Parallel()
	k, dir := startKernel(t, shared.client, "python3", jupyter.KernelOptions{})

	first := mustOK(t, execute(t, k, "x = 41"))
	second := mustOK(t, execute(t, k, "x + 1"))
	if got := second.text(); got != "42\n" {
		t.Errorf("x + 1 = %q, want 42", got)
	}
	if second.count != first.count+1 {
		t.Errorf("execution counts %d then %d", first.count, second.count)
	}
	if len(second.outputs) != 1 || second.outputs[0].typ != "execute_result" {
		t.Errorf("outputs = %+v, want one execute_result", second.outputs)
	}
	// The kernel's cwd is the directory it was started in.
	cwd := mustOK(t, execute(t, k, "import os; print(os.getcwd())"))
	if got := strings.TrimSpace(cwd.stdout); got != dir {
		t.Errorf("cwd = %q, want %q", got, dir)
	}
	// The environment is the supervisor's clean one, not the test's.
	env := mustOK(t, execute(t, k, "import os; print(os.environ['PATH'], os.environ.get('PIP_FIND_LINKS'))"))
	if got := strings.TrimSpace(env.stdout); got != "/usr/local/bin:/usr/bin:/bin None" {
		t.Errorf("kernel env = %q", got)
	}
}

func TestExecuteMessageOrder(t *testing.T) {
	t.Parallel()
	k, _ := startKernel(t, shared.client, "python3", jupyter.KernelOptions{})

	r := mustOK(t, execute(t, k, `
import sys
for i in range(300):
    print(i, flush=True)
    if i % 50 == 0:
        print("e", i, file=sys.stderr, flush=True)
`))
	var want strings.Builder
	for i := range 300 {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if r.stdout != want.String() {
		t.Errorf("stdout out of order or incomplete: %d bytes, want %d", len(r.stdout), want.Len())
	}
	if !strings.HasPrefix(r.stderr, "e 0\ne 50\n") {
		t.Errorf("stderr = %q", r.stderr)
	}
	// busy and execute_input come first and idle last. The reply is on
	// another channel: it may come before the outputs, which is why an
	// execution waits for both.
	// The reply may even come first: shell and iopub are separate sockets,
	// so order is only promised within iopub.
	ts := r.types()
	var iopub []string
	for _, m := range ts {
		if strings.HasPrefix(m, "iopub/") {
			iopub = append(iopub, m)
		}
	}
	if len(iopub) < 3 || iopub[0] != "iopub/status" || iopub[1] != "iopub/execute_input" || iopub[len(iopub)-1] != "iopub/status" {
		t.Errorf("iopub messages %v", iopub)
	}
	if !slices.Contains(ts, "shell/execute_reply") {
		t.Errorf("no reply in %v", ts)
	}
}

// ansi matches the colour escapes in IPython tracebacks.
var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

func TestExecuteError(t *testing.T) {
	t.Parallel()
	k, _ := startKernel(t, shared.client, "python3", jupyter.KernelOptions{})

	r := execute(t, k, "def f():\n    return 1/0\nf()")
	if r.err != nil {
		t.Fatalf("execution ended with %v; a Python error is a completed execution", r.err)
	}
	if len(r.errors) != 1 {
		t.Fatalf("errors = %+v", r.errors)
	}
	e := r.errors[0]
	if e.EName != "ZeroDivisionError" || e.EValue != "division by zero" {
		t.Errorf("error = %s: %s", e.EName, e.EValue)
	}
	tb := ansi.ReplaceAllString(strings.Join(e.Traceback, "\n"), "")
	if !strings.Contains(tb, "ZeroDivisionError") || !strings.Contains(tb, "----> 3 f()") {
		t.Errorf("traceback = %q", tb)
	}
	if r.status != "error" {
		t.Errorf("reply status = %q, want error", r.status)
	}
	// The kernel is fine afterwards.
	mustOK(t, execute(t, k, "pass"))
}

func TestExecuteDisplayDataPNG(t *testing.T) {
	t.Parallel()
	k, _ := startKernel(t, shared.client, "python3", jupyter.KernelOptions{})

	r := mustOK(t, execute(t, k, `
import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [1, 4, 9])
plt.show()
from IPython.display import clear_output
clear_output()
`))
	var png string
	for _, o := range r.outputs {
		if raw, ok := o.data["image/png"]; ok && o.typ == "display_data" {
			if err := json.Unmarshal(raw, &png); err != nil {
				t.Fatal(err)
			}
		}
	}
	img, err := base64.StdEncoding.DecodeString(strings.TrimSpace(png))
	if err != nil || !bytes.HasPrefix(img, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("no PNG display_data (%d outputs, decode err %v)", len(r.outputs), err)
	}
	if !strings.Contains(strings.Join(r.types(), " "), "iopub/clear_output") {
		t.Errorf("clear_output not delivered: %v", r.types())
	}
}

// TestInterrupt: an execution is interrupted through the server, sent
// through it or on the direct path alike, and the kernel's state survives.
func TestInterrupt(t *testing.T) {
	t.Parallel()
	for _, direct := range []bool{false, true} {
		t.Run(map[bool]string{false: "websocket", true: "direct"}[direct], func(t *testing.T) {
			t.Parallel()
			var k *jupyter.Kernel
			if direct {
				k = directKernel(t, jupyter.KernelOptions{})
			} else {
				k, _ = startKernel(t, shared.client, "python3", jupyter.KernelOptions{})
			}
			mustOK(t, execute(t, k, "y = 7"))

			ctx := testutil.Context(t, execTimeout)
			_, before := jupyter.DirectForTest(k)
			// Interrupt once the user code runs (its first output has arrived).
			e := runUntil(t, ctx, k, "stream", "print('running', flush=True)\nwhile True: pass")
			if _, after := jupyter.DirectForTest(k); (after > before) != direct {
				t.Fatalf("sent on the direct path: %v, want %v", after > before, direct)
			}
			if err := k.Interrupt(ctx); err != nil {
				t.Fatal(err)
			}
			r := collect(t, ctx, e)
			if r.err != nil || len(r.errors) != 1 || r.errors[0].EName != "KeyboardInterrupt" {
				t.Fatalf("interrupted execution: err=%v errors=%+v", r.err, r.errors)
			}
			// The next execution works and the state survived.
			if got := mustOK(t, execute(t, k, "y")).text(); got != "7\n" {
				t.Errorf("y = %q after interrupt", got)
			}
		})
	}
}

func TestKernelDeathEndsExecution(t *testing.T) {
	t.Parallel()
	k, _ := startKernel(t, shared.client, "python3", jupyter.KernelOptions{})
	mustOK(t, execute(t, k, "x = 1"))
	pid := pidOf(t, k)

	r := execute(t, k, "import os; os._exit(1)")
	if !errors.Is(r.err, jupyter.ErrKernelRestarted) {
		t.Fatalf("execution ended with %v, want ErrKernelRestarted", r.err)
	}
	// How the process ended comes with the restart (kernel_exit.py).
	if st := k.Status(); st.Restarts != 1 || st.Err != nil || st.Exit == nil || *st.Exit != (jupyter.ExitStatus{Code: 1}) {
		t.Errorf("status after death = %+v (exit %v)", st, st.Exit)
	}
	// Same kernel id, fresh process, fresh state.
	r = execute(t, k, "x")
	if r.err != nil || len(r.errors) != 1 || r.errors[0].EName != "NameError" {
		t.Fatalf("x after restart: err=%v errors=%+v", r.err, r.errors)
	}
	newPID := pidOf(t, k)
	if newPID == pid {
		t.Errorf("kernel pid unchanged (%d)", newPID)
	}
	// Killed by a signal.
	restarts := k.Status().Restarts
	if err := unix.Kill(newPID, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ctx := testutil.Context(t, kernelTimeout)
	for st := k.Status(); st.Restarts == restarts; st = k.Status() {
		select {
		case <-st.Changed:
		case <-ctx.Done():
			t.Fatal("the killed kernel was not restarted")
		}
	}
	if st := k.Status(); st.Exit == nil || st.Exit.String() != "signal SIGKILL" {
		t.Errorf("exit after SIGKILL = %v", st.Exit)
	}
	// Up again (a kernel deleted while it restarts fails the delete).
	mustOK(t, execute(t, k, "1"))
}

func TestRestartThenExecuteGetsOutput(t *testing.T) {
	t.Parallel()
	k, _ := startKernel(t, shared.client, "python3", jupyter.KernelOptions{})
	// Without the post-restart nudge, about half of these lose every iopub
	// message of the first execution (runtime.md §7).
	for i := range 5 {
		mustOK(t, execute(t, k, "z = 1"))
		ctx := testutil.Context(t, kernelTimeout)
		if err := k.Restart(ctx); err != nil {
			t.Fatalf("restart %d: %v", i, err)
		}
		r := execute(t, k, "print('alive', "+strconv.Itoa(i)+")\nz")
		if r.err != nil || r.stdout != fmt.Sprintf("alive %d\n", i) {
			t.Fatalf("after restart %d: err=%v stdout=%q types=%v", i, r.err, r.stdout, r.types())
		}
		if len(r.errors) != 1 || r.errors[0].EName != "NameError" {
			t.Fatalf("state survived restart %d: %+v", i, r.errors)
		}
	}
	if st := k.Status(); st.Restarts != 5 || st.Exit != nil {
		t.Errorf("restarts = %d, want 5; exit %v, want none (asked for)", st.Restarts, st.Exit)
	}
}

func TestBigOutputArrivesIntact(t *testing.T) {
	t.Parallel()
	// A reader that keeps up gets every byte: under -race beside other
	// work this one can take more than the default second for a piece,
	// and dropping is TestStalledReaderIsBounded's subject.
	k, _ := startKernel(t, shared.client, "python3", jupyter.KernelOptions{ReaderGrace: time.Minute})

	// 50 MB in one print: one stream message in one WebSocket frame, over
	// MaxMessageBytes, so delivered in pieces as it is read. The pattern
	// makes reordering or truncation visible in the hash.
	const n = 50 << 20
	r := mustOK(t, execute(t, k, fmt.Sprintf(
		"s = ''.join(chr(97 + i %% 26) for i in range(26)) * (%d // 26 + 1)\nprint(s[:%d])", n, n)))
	pattern := strings.Repeat("abcdefghijklmnopqrstuvwxyz", n/26+1)[:n] + "\n"
	if len(r.stdout) != len(pattern) {
		t.Fatalf("got %d bytes of stdout, want %d (stderr %q)", len(r.stdout), len(pattern), short(r.stderr))
	}
	if sha256.Sum256([]byte(r.stdout)) != sha256.Sum256([]byte(pattern)) {
		t.Fatal("stdout differs from what was printed")
	}
}

func TestTenKernelsConcurrently(t *testing.T) {
	t.Parallel()
	const n = 10
	var wg sync.WaitGroup
	errs := make(chan error, n)
	kernels := make([]*jupyter.Kernel, n)
	for i := range n {
		kernels[i], _ = startKernel(t, shared.client, "python3", jupyter.KernelOptions{})
	}
	for i, k := range kernels {
		wg.Go(func() {
			ctx := testutil.Context(t, execTimeout)
			for j := range 5 {
				e, err := k.Execute(ctx, fmt.Sprintf("v = %d * %d\nprint(v)", i, j), jupyter.ExecuteOptions{})
				if err != nil {
					errs <- err
					return
				}
				var out strings.Builder
				for {
					m, err := e.Next(ctx)
					if err != nil {
						if e.Err() != nil {
							errs <- fmt.Errorf("kernel %d: %w", i, e.Err())
							return
						}
						break
					}
					var s jupyter.StreamContent
					if m.Type() == "stream" && m.DecodeContent(&s) == nil {
						out.WriteString(s.Text)
					}
				}
				if want := fmt.Sprintf("%d\n", i*j); out.String() != want {
					errs <- fmt.Errorf("kernel %d run %d: stdout %q, want %q", i, j, out.String(), want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestConcurrentExecutesOnOneKernel(t *testing.T) {
	t.Parallel()
	k, _ := startKernel(t, shared.client, "python3", jupyter.KernelOptions{})
	// The kernel queues them; the client routes each output to its request.
	ctx := testutil.Context(t, execTimeout)
	execs := make([]*jupyter.Execution, 8)
	for i := range execs {
		e, err := k.Execute(ctx, fmt.Sprintf("print(%d)", i), jupyter.ExecuteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		execs[i] = e
	}
	for i, e := range execs {
		if got := mustOK(t, collect(t, ctx, e)).stdout; got != fmt.Sprintf("%d\n", i) {
			t.Errorf("execution %d got %q", i, got)
		}
	}
}

func TestKernelInfo(t *testing.T) {
	t.Parallel()
	k, _ := startKernel(t, shared.client, "python3", jupyter.KernelOptions{})
	info, err := k.KernelInfo(testutil.Context(t, execTimeout))
	if err != nil {
		t.Fatal(err)
	}
	if info.Implementation != "ipython" || info.LanguageInfo.Name != "python" || info.Status != "ok" {
		t.Errorf("kernel info = %+v", info)
	}
}

// Complete and Inspect send their shell requests and decode the replies;
// user expressions come back in the execute_reply, and a silent request
// leaves the execution count alone.
func TestCompleteInspect(t *testing.T) {
	t.Parallel()
	k, _ := startKernel(t, shared.client, "python3", jupyter.KernelOptions{})
	ctx := testutil.Context(t, execTimeout)
	mustOK(t, execute(t, k, "héllo_world = 41"))
	comp, err := k.Complete(ctx, "é; héllo_w", 10)
	if err != nil {
		t.Fatal(err)
	}
	if comp.Status != "ok" || len(comp.Matches) != 1 || comp.Matches[0] != "héllo_world" || comp.CursorStart != 3 || comp.CursorEnd != 10 {
		t.Errorf("complete = %+v", comp)
	}
	if len(comp.Metadata.Types) != 1 || comp.Metadata.Types[0].Type != "instance" {
		t.Errorf("types = %+v", comp.Metadata.Types)
	}
	in, err := k.Inspect(ctx, "héllo_world", 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !in.Found || !strings.Contains(string(in.Data["text/plain"]), "41") {
		t.Errorf("inspect = %+v", in)
	}
	x, err := k.Execute(ctx, "", jupyter.ExecuteOptions{Silent: true, UserExpressions: map[string]string{"v": "héllo_world + 1"}})
	if err != nil {
		t.Fatal(err)
	}
	r := mustOK(t, collect(t, ctx, x))
	var rep jupyter.ExecuteReplyContent
	for _, m := range r.msgs {
		if m.Type() == "execute_reply" {
			mustDecode(t, m, &rep)
		}
	}
	var v struct {
		Status string            `json:"status"`
		Data   map[string]string `json:"data"`
	}
	if err := json.Unmarshal(rep.UserExpressions["v"], &v); err != nil || v.Status != "ok" || v.Data["text/plain"] != "42" {
		t.Errorf("user expression = %s (%v)", rep.UserExpressions["v"], err)
	}
	if c := mustOK(t, execute(t, k, "1")).count; c != 2 {
		t.Errorf("execution count %d after a silent request, want 2", c)
	}
}

func TestDeletedKernel(t *testing.T) {
	t.Parallel()
	ctx := testutil.Context(t, kernelTimeout)
	m, err := shared.client.StartKernel(ctx, "python3", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	k, err := shared.client.Connect(ctx, m.ID, jupyter.KernelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if err := shared.client.DeleteKernel(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	// The server leaves the WebSocket open; the kernel's shutdown_reply
	// tells the connection it is gone.
	for st := k.Status(); st.Err == nil; st = k.Status() {
		select {
		case <-st.Changed:
		case <-ctx.Done():
			t.Fatal("deleted kernel still looks alive")
		}
	}
	if _, err := k.Execute(ctx, "1", jupyter.ExecuteOptions{}); !errors.Is(err, jupyter.ErrKernelDied) {
		t.Errorf("execute on deleted kernel: %v", err)
	}
	if _, err := shared.client.Kernel(ctx, m.ID); !errors.Is(err, jupyter.ErrKernelNotFound) {
		t.Errorf("get deleted kernel: %v", err)
	}
}

func TestClosedKernel(t *testing.T) {
	t.Parallel()
	k, _ := startKernel(t, shared.client, "python3", jupyter.KernelOptions{})
	ctx := testutil.Context(t, execTimeout)
	e, err := k.Execute(ctx, "import time; time.sleep(30)", jupyter.ExecuteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Wait(ctx); !errors.Is(err, jupyter.ErrClosed) {
		t.Errorf("in-flight execution after Close: %v", err)
	}
	if _, err := k.Execute(ctx, "1", jupyter.ExecuteOptions{}); !errors.Is(err, jupyter.ErrClosed) {
		t.Errorf("execute after Close: %v", err)
	}
	_ = k.Close() // idempotent
	// Don't leave the sleep running in the shared server.
	_ = shared.client.InterruptKernel(ctx, k.ID())
}

func TestReconnectAfterConnectionDrop(t *testing.T) {
	t.Parallel()
	k, _ := startKernel(t, shared.client, "python3", jupyter.KernelOptions{})
	mustOK(t, execute(t, k, "w = 3"))
	// Kill the WebSocket under the kernel connection; the next request
	// must reconnect by itself.
	jupyter.DropConnectionForTest(k)
	if got := mustOK(t, execute(t, k, "w")).text(); got != "3\n" {
		t.Errorf("w = %q after reconnect", got)
	}
}

func TestRKernel(t *testing.T) {
	t.Parallel()
	requireSpec(t, "ir")
	k, _ := startKernel(t, shared.client, "ir", jupyter.KernelOptions{})
	mustOK(t, execute(t, k, "x <- 41"))
	r := mustOK(t, execute(t, k, "x + 1"))
	if !strings.Contains(r.text(), "42") {
		t.Errorf("x + 1 = %q", r.text())
	}
	r = execute(t, k, `stop("boom")`)
	if r.err != nil || len(r.errors) != 1 || !strings.Contains(r.errors[0].EValue, "boom") {
		t.Errorf("stop(): err=%v errors=%+v", r.err, r.errors)
	}
}

func TestDenoKernel(t *testing.T) {
	t.Parallel()
	requireSpec(t, "deno")
	// Deno publishes about one execution's result in ten after idle, later
	// the more loaded the machine: the flush after idle waits for them.
	k, _ := startKernel(t, shared.client, "deno", jupyter.KernelOptions{FlushAfterIdle: time.Minute})
	for i := range 20 {
		r := mustOK(t, execute(t, k, fmt.Sprintf("console.log(%d); %d + 1", i, i)))
		if r.stdout != fmt.Sprintf("%d\n", i) || !strings.Contains(r.text(), strconv.Itoa(i+1)) {
			t.Fatalf("run %d: stdout %q result %q types %v", i, r.stdout, r.text(), r.types())
		}
	}
}

func requireSpec(t *testing.T, name string) {
	t.Helper()
	specs, err := shared.client.KernelSpecs(testutil.Context(t, execTimeout))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := specs.Specs[name]; !ok {
		t.Skipf("kernelspec %q is not installed", name)
	}
}
