package jupyter_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/testutil"
)

// directKernel starts a python3 kernel connected with the direct path and
// waits until the path is up.
func directKernel(t *testing.T, opts jupyter.KernelOptions) *jupyter.Kernel {
	t.Helper()
	opts.Direct = true
	k, _ := startKernel(t, shared.client, "python3", opts)
	waitDirect(t, k)
	return k
}

func waitDirect(t *testing.T, k *jupyter.Kernel) {
	t.Helper()
	if !testutil.PollFor(kernelTimeout, func() bool { up, _ := jupyter.DirectForTest(k); return up }) {
		t.Fatal("the kernel's direct path never came up")
	}
}

// directSent runs code and reports whether it went on the direct path.
func directSent(t *testing.T, k *jupyter.Kernel, code string) (*result, bool) {
	t.Helper()
	_, before := jupyter.DirectForTest(k)
	r := execute(t, k, code)
	_, after := jupyter.DirectForTest(k)
	return r, after > before
}

// TestDirectExecutions: on the direct path an execution keeps the kernel's
// state and counts, its output arrives once each and in order (the
// server's copies are dropped), errors come as errors, and a 50 MB print
// arrives intact, in pieces, as on the WebSocket.
func TestDirectExecutions(t *testing.T) {
	t.Parallel()
	k := directKernel(t, jupyter.KernelOptions{ReaderGrace: time.Minute})

	first, ok := directSent(t, k, "x = 41")
	mustOK(t, first)
	if !ok {
		t.Fatal("the execution did not go on the direct path")
	}
	second, _ := directSent(t, k, "x + 1")
	if got := mustOK(t, second).text(); got != "42\n" || second.count != first.count+1 {
		t.Errorf("x + 1 = %q, count %d after %d", got, second.count, first.count)
	}

	r, ok := directSent(t, k, `
import sys
for i in range(300):
    print(i, flush=True)
    if i % 50 == 0:
        print("e", i, file=sys.stderr, flush=True)
`)
	mustOK(t, r)
	var want, wantErr strings.Builder
	for i := range 300 {
		fmt.Fprintln(&want, i)
		if i%50 == 0 {
			fmt.Fprintln(&wantErr, "e", i)
		}
	}
	if !ok || r.stdout != want.String() || r.stderr != wantErr.String() {
		t.Errorf("direct %v; stdout %q; stderr %q", ok, short(r.stdout), r.stderr)
	}

	r, ok = directSent(t, k, "1/0")
	if !ok || r.err != nil || len(r.errors) != 1 || r.errors[0].EName != "ZeroDivisionError" || r.status != "error" {
		t.Errorf("1/0: direct %v, err %v, errors %+v, status %q", ok, r.err, r.errors, r.status)
	}

	const n = 50 << 20
	r, ok = directSent(t, k, fmt.Sprintf(
		"s = ''.join(chr(97 + i %% 26) for i in range(26)) * (%d // 26 + 1)\nprint(s[:%d])", n, n))
	mustOK(t, r)
	pattern := strings.Repeat("abcdefghijklmnopqrstuvwxyz", n/26+1)[:n] + "\n"
	if !ok || len(r.stdout) != len(pattern) || sha256.Sum256([]byte(r.stdout)) != sha256.Sum256([]byte(pattern)) {
		t.Fatalf("50 MB print: direct %v, %d bytes, want %d intact", ok, len(r.stdout), len(pattern))
	}
}

// TestDirectRestartAndDeath: a kernel that dies during a direct execution
// ends it as restarted (the server's notice), and one restarted through
// the server comes back on a fresh process; either way executions work at
// once (through the server while the path reconnects) and then go direct
// again.
func TestDirectRestartAndDeath(t *testing.T) {
	t.Parallel()
	k := directKernel(t, jupyter.KernelOptions{})
	mustOK(t, execute(t, k, "x = 1"))

	r, ok := directSent(t, k, "import os; os._exit(1)")
	if !ok || !errors.Is(r.err, jupyter.ErrKernelRestarted) {
		t.Fatalf("death: direct %v, ended with %v, want ErrKernelRestarted", ok, r.err)
	}
	r = execute(t, k, "x")
	if r.err != nil || len(r.errors) != 1 || r.errors[0].EName != "NameError" {
		t.Fatalf("x after the death: err=%v errors=%+v", r.err, r.errors)
	}
	waitDirect(t, k)
	if r, ok := directSent(t, k, "x = 2"); !ok || r.err != nil {
		t.Fatalf("after the death: direct %v, err %v", ok, r.err)
	}

	for i := range 3 {
		if err := k.Restart(testutil.Context(t, kernelTimeout)); err != nil {
			t.Fatalf("restart %d: %v", i, err)
		}
		r := execute(t, k, "print('alive', "+strconv.Itoa(i)+")\nx")
		if r.err != nil || r.stdout != fmt.Sprintf("alive %d\n", i) || len(r.errors) != 1 || r.errors[0].EName != "NameError" {
			t.Fatalf("after restart %d: err=%v stdout=%q errors=%+v", i, r.err, r.stdout, r.errors)
		}
		waitDirect(t, k)
		if r, ok := directSent(t, k, "x = 3\nprint('direct')"); !ok || r.err != nil || r.stdout != "direct\n" {
			t.Fatalf("after restart %d: direct %v, err %v, stdout %q", i, ok, r.err, r.stdout)
		}
	}
	if st := k.Status(); st.Restarts != 4 || st.Err != nil {
		t.Errorf("status %+v, want 4 restarts", st)
	}
}

// TestDirectWithoutConnectionFiles: a client that does not know the
// server's connection files has no direct path; Direct kernels then work
// through the server.
func TestDirectWithoutConnectionFiles(t *testing.T) {
	t.Parallel()
	c, err := jupyter.NewClient(shared.sup.URL(), shared.sup.Token(), jupyter.ClientOptions{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	k, _ := startKernel(t, c, "python3", jupyter.KernelOptions{Direct: true})
	r, ok := directSent(t, k, "print(6 * 7)")
	if ok || r.err != nil || r.stdout != "42\n" {
		t.Errorf("direct %v, err %v, stdout %q: want 42 through the server", ok, r.err, r.stdout)
	}
}
