package jupyter_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/testutil"
)

// earlySupervisor starts a supervisor whose servers launch an early
// python3 kernel in dir (its zygote, if z forks python3 kernels).
func earlySupervisor(t *testing.T, dir string, z ...*jupyter.Zygote) *jupyter.Supervisor {
	t.Helper()
	opts := jupyter.Options{Logger: testLogger(), StopGrace: 3 * time.Second,
		EarlyKernel: func() (string, string) { return "python3", dir }}
	if len(z) > 0 {
		opts.Zygote = z[0]
	}
	s := jupyter.New(opts)
	if err := s.Start(testutil.Context(t, 2*kernelTimeout)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(testutil.Context(t, kernelTimeout)) })
	return s
}

// earlyKernels lists the early kernels of s's runtime directory that run
// (their pids) or have a connection file (files).
func earlyKernels(t *testing.T, s *jupyter.Supervisor) (pids []int, files []string) {
	t.Helper()
	prefix := filepath.Join(jupyter.RuntimeDirForTest(s), "runtime", "kernel-envd-early-")
	files, _ = filepath.Glob(prefix + "*.json")
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(b, []byte("\x00"+prefix)) {
			pids = append(pids, pid)
		}
	}
	return pids, files
}

// theEarlyKernel is s's one early kernel, running.
func theEarlyKernel(t *testing.T, s *jupyter.Supervisor) (pid int, file string) {
	t.Helper()
	pids, files := earlyKernels(t, s)
	if len(pids) != 1 || len(files) != 1 {
		t.Fatalf("early kernels %v, files %v: want one", pids, files)
	}
	return pids[0], files[0]
}

// noEarlyKernel waits until s has no early kernel left, running or on disk.
func noEarlyKernel(t *testing.T, s *jupyter.Supervisor) {
	t.Helper()
	var pids []int
	var files []string
	if !testutil.PollFor(10*time.Second, func() bool {
		pids, files = earlyKernels(t, s)
		return len(pids) == 0 && len(files) == 0
	}) {
		t.Fatalf("early kernels %v, files %v still there", pids, files)
	}
}

// TestEarlyKernelTakenOver: the kernel a server launched before its own
// start becomes the kernel of the first start of its spec in its
// directory: the same process, which runs, is interrupted, talks on the
// direct path (its connection file rewritten with its ports and key) and
// restarts as any other; restarts and later kernels launch as usual, and
// the early connection file goes with the kernel.
func TestEarlyKernelTakenOver(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := earlySupervisor(t, dir)
	early, file := theEarlyKernel(t, s)
	ctx := testutil.Context(t, 2*kernelTimeout)
	c, err := s.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k := startKernelIn(t, c, "python3", dir, jupyter.KernelOptions{Direct: true})
	r := mustOK(t, execute(t, k, "import os, sys; print(os.getpid()); print(sys.argv[-1]); print(os.getcwd()); y = 7"))
	if want := strconv.Itoa(early) + "\n" + file + "\n" + dir + "\n"; r.stdout != want {
		t.Fatalf("the kernel says %q, want the early kernel: %q", r.stdout, want)
	}
	for _, p := range s.KernelChannels(early) {
		if !reserved(t, p) {
			t.Errorf("the early kernel's port %d is not reserved", p)
		}
	}
	outsideEphemeral(t, s.KernelChannels(early))
	waitDirect(t, k)
	if r, ok := directSent(t, k, "y * 6"); !ok || mustOK(t, r).text() != "42\n" {
		t.Fatalf("direct path: sent %v, %q", ok, r.text())
	}

	e := runUntil(t, ctx, k, "stream", "print('running', flush=True)\nwhile True: pass")
	if err := k.Interrupt(ctx); err != nil {
		t.Fatal(err)
	}
	if r := collect(t, ctx, e); r.err != nil || len(r.errors) != 1 || r.errors[0].EName != "KeyboardInterrupt" {
		t.Fatalf("interrupted: err=%v errors=%+v", r.err, r.errors)
	}

	if err := k.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	waitGone(t, 10*time.Second, early)
	r = mustOK(t, execute(t, k, "import os, sys; print(sys.argv[-1]); print(os.getcwd())"))
	if want := filepath.Join(jupyter.RuntimeDirForTest(s), "runtime", "kernel-"+k.ID()+".json") + "\n" + dir + "\n"; r.stdout != want {
		t.Errorf("after the restart the kernel says %q, want %q", r.stdout, want)
	}
	noEarlyKernel(t, s)
	waitDirect(t, k)
	if r, ok := directSent(t, k, "6 * 7"); !ok || mustOK(t, r).text() != "42\n" {
		t.Errorf("direct path after the restart: sent %v, %q", ok, r.text())
	}

	k2, _ := startKernel(t, c, "python3", jupyter.KernelOptions{})
	if arg := strings.TrimSpace(mustOK(t, execute(t, k2, "import sys; print(sys.argv[-1])")).stdout); strings.Contains(arg, "envd-early") {
		t.Errorf("a second kernel was launched with %s", arg)
	}
}

// TestEarlyKernelDiscarded: an early kernel is never anyone's but the
// start it was launched for. A start in another directory launches its
// own kernel and ends the early one; one nobody asks for is ended after
// its wait; one still waiting goes with its server.
func TestEarlyKernelDiscarded(t *testing.T) {
	// Not parallel: the wait is the package's (SetEarlyDiscardForTest).
	t.Run("another directory", func(t *testing.T) {
		s := earlySupervisor(t, t.TempDir())
		early, _ := theEarlyKernel(t, s)
		ctx := testutil.Context(t, kernelTimeout)
		c, err := s.Client(ctx)
		if err != nil {
			t.Fatal(err)
		}
		k, other := startKernel(t, c, "python3", jupyter.KernelOptions{})
		r := mustOK(t, execute(t, k, "import os; print(os.getpid()); print(os.getcwd())"))
		if strings.HasPrefix(r.stdout, strconv.Itoa(early)+"\n") || !strings.HasSuffix(r.stdout, "\n"+other+"\n") {
			t.Errorf("the kernel says %q: the early kernel (%d) taken for another directory", r.stdout, early)
		}
		noEarlyKernel(t, s)
	})

	t.Run("not asked for", func(t *testing.T) {
		restore := jupyter.SetEarlyDiscardForTest(2 * time.Second)
		s := earlySupervisor(t, t.TempDir())
		restore()
		if pids, _ := earlyKernels(t, s); len(pids) > 1 {
			t.Fatalf("early kernels %v", pids)
		}
		noEarlyKernel(t, s)
		newServerWorks(t, testutil.Context(t, kernelTimeout), s)
	})

	t.Run("server stopped", func(t *testing.T) {
		s := earlySupervisor(t, t.TempDir())
		early, _ := theEarlyKernel(t, s)
		if err := s.Stop(testutil.Context(t, kernelTimeout)); err != nil {
			t.Fatal(err)
		}
		waitGone(t, 10*time.Second, early)
	})
}

// zygotes lists the zygotes of s's servers that run (their pids).
func zygotes(t *testing.T, s *jupyter.Supervisor) []int {
	t.Helper()
	program := filepath.Join(jupyter.RuntimeDirForTest(s), "config", "envd_zygote.py")
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(b, []byte("\x00"+program+"\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestEarlyZygote: when the early kernel's kernelspec is forked
// (Options.Zygote), the early boot starts that kernelspec's zygote in its
// place, as the server's imports begin: no early kernel runs, the first
// start of the kernelspec (the default context's) is forked from that
// zygote, and a zygote nobody asks for a kernel is ended after the early
// kernel's wait.
func TestEarlyZygote(t *testing.T) {
	// Not parallel: the wait is the package's (SetEarlyDiscardForTest).
	light := &jupyter.Zygote{Kernels: []string{"python3"}, Preload: []string{"json"}}
	t.Run("forks the first kernel", func(t *testing.T) {
		dir := t.TempDir()
		s := earlySupervisor(t, dir, light)
		zs := zygotes(t, s)
		if len(zs) != 1 {
			t.Fatalf("zygotes %v once the server is up: want the early boot's one", zs)
		}
		if pids, files := earlyKernels(t, s); len(pids)+len(files) != 0 {
			t.Fatalf("early kernels %v, files %v beside the zygote", pids, files)
		}
		ctx := testutil.Context(t, kernelTimeout)
		c, err := s.Client(ctx)
		if err != nil {
			t.Fatal(err)
		}
		k := startKernelIn(t, c, "python3", dir, jupyter.KernelOptions{Direct: true})
		r := mustOK(t, execute(t, k, "import os; print(os.getppid()); print(os.getcwd())"))
		if want := strconv.Itoa(zs[0]) + "\n" + dir + "\n"; r.stdout != want {
			t.Fatalf("the kernel says %q, want a fork of the early boot's zygote: %q", r.stdout, want)
		}
		if got := zygotes(t, s); len(got) != 1 || got[0] != zs[0] {
			t.Errorf("zygotes %v after the first kernel, want %v", got, zs)
		}
	})

	t.Run("not asked for", func(t *testing.T) {
		restore := jupyter.SetEarlyDiscardForTest(2 * time.Second)
		s := earlySupervisor(t, t.TempDir(), light)
		restore()
		zs := zygotes(t, s)
		if len(zs) != 1 {
			t.Fatalf("zygotes %v once the server is up: want the early boot's one", zs)
		}
		waitGone(t, 15*time.Second, zs[0])
		// A later kernel gets a zygote of its own.
		ctx := testutil.Context(t, kernelTimeout)
		c, err := s.Client(ctx)
		if err != nil {
			t.Fatal(err)
		}
		k, _ := startKernel(t, c, "python3", jupyter.KernelOptions{})
		ppid := strings.TrimSpace(mustOK(t, execute(t, k, "import os; print(os.getppid())")).stdout)
		if got := zygotes(t, s); len(got) != 1 || strconv.Itoa(got[0]) != ppid || got[0] == zs[0] {
			t.Errorf("the kernel's parent is %s, the zygotes %v: want a new one's fork", ppid, got)
		}
	})
}
