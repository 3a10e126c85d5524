package jupyter_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/testutil"
)

// startSupervisor starts a private server for a test that kills or stops
// it, and stops it at cleanup.
func startSupervisor(t testing.TB, opts jupyter.Options) *jupyter.Supervisor {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	s := jupyter.New(opts)
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	if err := s.Start(testutil.Context(t, kernelTimeout)); err != nil {
		t.Fatalf("start: %v", err)
	}
	return s
}

func TestSupervisorRestartsKilledServer(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t, jupyter.Options{MinBackoff: 10 * time.Millisecond})
	ctx := testutil.Context(t, 2*kernelTimeout)
	c1, err := s.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k1, _ := startKernel(t, c1, "python3", jupyter.KernelOptions{})
	kernelPID := pidOf(t, k1)
	before := s.Status()
	if before.State != jupyter.ServerReady || before.Generation != 1 || before.PID == 0 {
		t.Fatalf("status = %+v", before)
	}
	// A long execution in flight when the server dies.
	e, err := k1.Execute(ctx, "import time; time.sleep(60)", jupyter.ExecuteOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if err := syscall.Kill(before.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := e.Wait(ctx); !errors.Is(err, jupyter.ErrConnectionLost) && !errors.Is(err, jupyter.ErrServerRestarted) {
		t.Errorf("in-flight execution ended with %v", err)
	}
	// The supervisor notices, kills the orphaned kernel, and starts a new
	// server (new generation).
	st := s.Status()
	for st.Generation < 2 || st.State != jupyter.ServerReady {
		select {
		case <-st.Changed:
		case <-ctx.Done():
			t.Fatalf("server not restarted: %+v", st)
		}
		st = s.Status()
	}
	if st.Err == nil && st.PID == before.PID {
		t.Errorf("status after restart = %+v", st)
	}
	waitGone(t, 10*time.Second, before.PID, kernelPID)

	// Everything bound to the old server says so.
	if _, err := c1.KernelSpecs(ctx); !errors.Is(err, jupyter.ErrServerRestarted) {
		t.Errorf("old client: %v", err)
	}
	if _, err := k1.Execute(ctx, "1", jupyter.ExecuteOptions{}); !errors.Is(err, jupyter.ErrServerRestarted) {
		t.Errorf("old kernel: %v", err)
	}
	newServerWorks(t, ctx, s)
}

func TestSupervisorStopLeavesNoProcesses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := jupyter.New(jupyter.Options{Logger: testLogger(), StopGrace: 3 * time.Second})
	ctx := testutil.Context(t, 2*kernelTimeout)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	serverPID := s.Status().PID
	c, err := s.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for range 2 {
		m, err := c.StartKernel(ctx, "python3", dir)
		if err != nil {
			t.Fatal(err)
		}
		k, err := c.Connect(ctx, m.ID, jupyter.KernelOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer k.Close()
		// The kernel, and a grandchild in its own session that ignores
		// SIGTERM: neither is in the server's process group.
		r := mustOK(t, execute(t, k, `
import os, subprocess, signal
p = subprocess.Popen(["sleep", "1000"], start_new_session=True,
                     preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN))
print(os.getpid(), p.pid)`))
		for _, f := range strings.Fields(r.stdout) {
			pid, _ := strconv.Atoi(f)
			pids = append(pids, pid)
		}
	}
	if len(pids) != 4 {
		t.Fatalf("pids = %v", pids)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// Stop returns after the kill; init reaps the orphans right after.
	waitGone(t, 5*time.Second, append(pids, serverPID)...)

	if st := s.Status(); st.State != jupyter.ServerStopped {
		t.Errorf("state after stop = %v", st.State)
	}
	if err := s.Ready(ctx); !errors.Is(err, jupyter.ErrStopped) {
		t.Errorf("Ready after stop: %v", err)
	}
	if _, err := c.KernelSpecs(ctx); !errors.Is(err, jupyter.ErrStopped) {
		t.Errorf("client after stop: %v", err)
	}
	if err := s.Stop(ctx); err != nil { // idempotent
		t.Errorf("second stop: %v", err)
	}
}

func TestSupervisorServerIsPrivate(t *testing.T) {
	t.Parallel()
	st := shared.sup.Status()
	// The API refuses requests without the token...
	resp, err := http.Get(st.URL + "/api/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("unauthenticated /api/status: %d", resp.StatusCode)
	}
	// ...and the token is not on the command line, which anyone can read.
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(st.PID) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	if tok := shared.sup.Token(); tok == "" || strings.Contains(string(cmdline), tok) {
		t.Errorf("token empty or visible in cmdline")
	}
	if !strings.HasPrefix(st.URL, "http://127.0.0.1:") {
		t.Errorf("server listens on %s", st.URL)
	}
}

func TestSupervisorExistingServer(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t, jupyter.Options{URL: shared.sup.URL(), Token: shared.sup.Token()})
	st := s.Status()
	if st.State != jupyter.ServerReady || st.Generation != 1 || st.PID != 0 {
		t.Fatalf("status = %+v", st)
	}
	c, err := s.Client(testutil.Context(t, execTimeout))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.KernelSpecs(testutil.Context(t, execTimeout)); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Stopping the attachment leaves the server alone.
	if _, err := shared.client.KernelSpecs(testutil.Context(t, execTimeout)); err != nil {
		t.Errorf("shared server after detaching: %v", err)
	}
	// A wrong token is not healthy.
	bad := jupyter.New(jupyter.Options{URL: shared.sup.URL(), Token: "wrong", StartTimeout: 300 * time.Millisecond, Logger: testLogger()})
	defer bad.Stop(context.Background())
	if err := bad.Start(testutil.Context(t, execTimeout)); err == nil {
		t.Error("wrong token accepted")
	}
}

func TestSupervisorFailingCommand(t *testing.T) {
	t.Parallel()
	s := jupyter.New(jupyter.Options{
		Command:    []string{"/bin/sh", "-c", "echo no jupyter here >&2; exit 3", "sh"},
		MinBackoff: 10 * time.Millisecond,
		MaxBackoff: 50 * time.Millisecond,
		Logger:     testLogger(),
	})
	err := s.Start(testutil.Context(t, execTimeout))
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("start error = %v", err)
	}
	// It keeps retrying (with backoff) until stopped.
	st := s.Status()
	if st.State == jupyter.ServerReady || st.Err == nil || !st.StartFailing {
		t.Errorf("status = %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := s.Ready(ctx); err == nil {
		t.Error("Ready succeeded")
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}

	missing := jupyter.New(jupyter.Options{Command: []string{"/nonexistent/python3"}, Logger: testLogger()})
	defer missing.Stop(context.Background())
	if err := missing.Start(testutil.Context(t, execTimeout)); err == nil {
		t.Error("start of a missing binary succeeded")
	}
}

func TestSupervisorRunAs(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	home := t.TempDir()
	if err := os.Chown(home, uid, gid); err != nil {
		t.Fatal(err)
	}
	// t.TempDir's parent is 0700: let the user reach its home.
	if err := os.Chmod(filepath.Dir(home), 0o755); err != nil {
		t.Fatal(err)
	}
	s := startSupervisor(t, jupyter.Options{
		RunAs: &jupyter.User{UID: uint32(uid), GID: uint32(gid), Home: home, Name: "nobody"},
	})
	c, err := s.Client(testutil.Context(t, execTimeout))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testutil.Context(t, kernelTimeout)
	m, err := c.StartKernel(ctx, "python3", home)
	if err != nil {
		t.Fatal(err)
	}
	k, err := c.Connect(ctx, m.ID, jupyter.KernelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	r := mustOK(t, execute(t, k, "import os; print(os.getuid(), os.getgid(), os.environ['HOME'], os.environ['USER'], os.getcwd())"))
	want := strconv.Itoa(uid) + " " + strconv.Itoa(gid) + " " + home + " nobody " + home + "\n"
	if r.stdout != want {
		t.Errorf("kernel identity %q, want %q", r.stdout, want)
	}
}

// TestSupervisorURLNowhere: a server URL nothing answers on is logged at
// once, with the URL and the error, and its status says why while it is
// retried, before Start gives up.
func TestSupervisorURLNowhere(t *testing.T) {
	t.Parallel()
	url := "http://127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))
	var logs testutil.SyncBuffer
	s := jupyter.New(jupyter.Options{URL: url, StartTimeout: time.Minute, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer s.Stop(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	var st jupyter.ServerStatus
	testutil.Poll(t, "the status to say why", func() bool { st = s.Status(); return st.Err != nil })
	if !strings.Contains(st.Err.Error(), url+" does not answer") || !strings.Contains(st.Err.Error(), "connection refused") {
		t.Errorf("status error %v", st.Err)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "url="+url) || !strings.Contains(l, "connection refused") {
		t.Errorf("log:\n%s", l)
	}
	cancel()
	if err := <-done; err == nil {
		t.Error("Start succeeded without a server")
	}
}
