package jupyter_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/testutil"
)

// Shared timeouts. Generous: the machine has two cores and runs -race.
const (
	kernelTimeout = 60 * time.Second // start + connect a kernel
	execTimeout   = 60 * time.Second // one execution
)

// startKernel starts a kernel of the given spec on c in a fresh directory,
// connects to it, and deletes it at cleanup.
func startKernel(t testing.TB, c *jupyter.Client, spec string, opts jupyter.KernelOptions) (*jupyter.Kernel, string) {
	t.Helper()
	dir := t.TempDir()
	return startKernelIn(t, c, spec, dir, opts), dir
}

// startKernelIn is startKernel in dir.
func startKernelIn(t testing.TB, c *jupyter.Client, spec, dir string, opts jupyter.KernelOptions) *jupyter.Kernel {
	t.Helper()
	ctx := testutil.Context(t, kernelTimeout)
	m, err := c.StartKernel(ctx, spec, dir)
	if err != nil {
		t.Fatalf("start %s kernel: %v", spec, err)
	}
	k, err := c.Connect(ctx, m.ID, opts)
	if err != nil {
		t.Fatalf("connect kernel: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() && c == shared.client {
			// What the kernel printed (an R error, a traceback) says why
			// it died or did not answer.
			shared.sup.LogOutputSince(m.ID, t.Name()+" failed")
		}
		_ = k.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.DeleteKernel(ctx, m.ID); err != nil &&
			!errors.Is(err, jupyter.ErrKernelNotFound) && !errors.Is(err, jupyter.ErrServerRestarted) &&
			!errors.Is(err, jupyter.ErrStopped) {
			t.Errorf("delete kernel: %v", err)
		}
	})
	return k
}

// result is what an execution produced, collected from its messages.
type result struct {
	msgs    []*jupyter.Message
	stdout  string
	stderr  string
	errors  []jupyter.ErrorContent
	outputs []output // display_data and execute_result, in order
	count   int      // from execute_input
	status  string   // execute_reply status
	err     error    // why the execution ended (nil: completed)
}

type output struct {
	typ  string // display_data or execute_result
	data map[string]json.RawMessage
}

// text returns the text/plain of the outputs, decoded, one per line.
func (r *result) text() string {
	var b strings.Builder
	for _, o := range r.outputs {
		var s string
		if raw, ok := o.data["text/plain"]; ok && json.Unmarshal(raw, &s) == nil {
			b.WriteString(s)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func (r *result) types() []string {
	var ts []string
	for _, m := range r.msgs {
		ts = append(ts, m.Channel+"/"+m.Type())
	}
	return ts
}

// execute runs code and collects everything until the execution ends.
func execute(t testing.TB, k *jupyter.Kernel, code string) *result {
	t.Helper()
	ctx := testutil.Context(t, execTimeout)
	e, err := k.Execute(ctx, code, jupyter.ExecuteOptions{})
	if err != nil {
		t.Fatalf("execute %q: %v", short(code), err)
	}
	return collect(t, ctx, e)
}

func collect(t testing.TB, ctx context.Context, e *jupyter.Execution) *result {
	t.Helper()
	r := &result{}
	for {
		m, err := e.Next(ctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("execution %s did not end: got %v", e.ID, r.types())
			}
			if !errors.Is(err, io.EOF) {
				r.err = err
			}
			return r
		}
		r.msgs = append(r.msgs, m)
		switch m.Type() {
		case "stream":
			var s jupyter.StreamContent
			mustDecode(t, m, &s)
			if s.Name == "stdout" {
				r.stdout += s.Text
			} else {
				r.stderr += s.Text
			}
		case "error":
			var ec jupyter.ErrorContent
			mustDecode(t, m, &ec)
			r.errors = append(r.errors, ec)
		case "display_data", "execute_result":
			var d jupyter.DisplayDataContent
			mustDecode(t, m, &d)
			r.outputs = append(r.outputs, output{typ: m.Type(), data: d.Data})
		case "execute_input":
			var in jupyter.ExecuteInputContent
			mustDecode(t, m, &in)
			r.count = in.ExecutionCount
		case "execute_reply":
			var rep jupyter.ExecuteReplyContent
			mustDecode(t, m, &rep)
			r.status = rep.Status
		}
	}
}

func mustDecode(t testing.TB, m *jupyter.Message, v any) {
	t.Helper()
	if err := m.DecodeContent(v); err != nil {
		t.Fatal(err)
	}
}

// mustOK fails the test unless the execution completed without a Python
// error.
func mustOK(t testing.TB, r *result) *result {
	t.Helper()
	if r.err != nil || len(r.errors) > 0 || r.status != "ok" {
		t.Fatalf("execution failed: err=%v errors=%+v status=%q stderr=%q", r.err, r.errors, r.status, r.stderr)
	}
	return r
}

// pidOf runs os.getpid() in a python kernel.
func pidOf(t testing.TB, k *jupyter.Kernel) int {
	t.Helper()
	r := mustOK(t, execute(t, k, "import os; print(os.getpid())"))
	pid, err := strconv.Atoi(strings.TrimSpace(r.stdout))
	if err != nil {
		t.Fatalf("pid: %q", r.stdout)
	}
	return pid
}

// waitGone waits until none of pids is alive, up to d. It waits on a
// pidfd, which becomes readable when the process exits, child or not.
func waitGone(t testing.TB, d time.Duration, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(d)
	for _, p := range pids {
		fd, err := unix.PidfdOpen(p, 0)
		if errors.Is(err, unix.ESRCH) {
			continue // already reaped
		}
		if err != nil {
			t.Fatalf("pidfd_open %d: %v", p, err)
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, int(max(time.Until(deadline).Milliseconds(), 0)))
			if errors.Is(err, unix.EINTR) {
				continue
			}
			unix.Close(fd)
			if err != nil {
				t.Fatalf("poll pidfd %d: %v", p, err)
			}
			if n == 0 && testutil.Alive(p) {
				t.Fatalf("process %d still alive after %s", p, d)
			}
			break
		}
	}
}

func short(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

// newServerWorks checks that s's current server starts a python3 kernel
// that computes (after a restart, say).
func newServerWorks(t testing.TB, ctx context.Context, s *jupyter.Supervisor) {
	t.Helper()
	c, err := s.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := startKernel(t, c, "python3", jupyter.KernelOptions{})
	if got := mustOK(t, execute(t, k, "6 * 7")).text(); got != "42\n" {
		t.Errorf("a kernel of the new server: %q", got)
	}
}

// runUntil starts code and returns once the kernel has published a message
// of type typ for it: execute_input (every message before the code runs
// has been delivered), stream (the code runs and has printed).
func runUntil(t testing.TB, ctx context.Context, k *jupyter.Kernel, typ, code string) *jupyter.Execution {
	t.Helper()
	e, err := k.Execute(ctx, code, jupyter.ExecuteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := e.Next(ctx)
		if err != nil {
			t.Fatalf("execution ended before its %s: %v", typ, err)
		}
		if m.Type() == typ {
			return e
		}
	}
}
