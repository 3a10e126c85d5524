package jupyter_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/testutil"
)

// stuckServer stands in for a Jupyter server whose main thread never
// returns: it loads envd's hooks as the server's config would, starts a
// "kernel" (a child in a session of its own, with the run's marker, as
// jupyter_client starts kernels), prints both pids, and blocks its main
// thread for good, taking SIGTERM as a blocked event loop does: the
// handler runs but nothing stops.
const stuckServer = `
import os, signal, subprocess, sys
exec(open(sys.argv[1]).read())
signal.signal(signal.SIGTERM, lambda *_: print("SIGTERM", flush=True))
kernel = subprocess.Popen(["sleep", "1000"], start_new_session=True)
print(os.getpid(), kernel.pid, flush=True)
r, w = os.pipe()
os.read(r, 1)
`

// TestHooksStuckServerOrphaned: when envd is gone, a server whose main
// thread is stuck (and so never acts on SIGTERM) is killed after the grace,
// with every process of its run; and SIGQUIT dumps its threads' stacks
// while it is stuck.
func TestHooksStuckServerOrphaned(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	hooks := filepath.Join(dir, "hooks.py")
	if err := os.WriteFile(hooks, jupyter.ServerHooksForTest, 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "stuck.py")
	if err := os.WriteFile(script, []byte(stuckServer), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr := filepath.Join(dir, "stderr")
	// envd stands in as the shell, whose pid the server is told is its
	// parent's; the shell is then killed.
	envd := exec.Command("/bin/sh", "-c",
		`ENVD_JUPYTER_PARENT=$$ /usr/bin/python3 "$1" "$2" 2>"$3" & wait`, "sh", script, hooks, stderr)
	envd.Env = append(os.Environ(),
		"ENVD_JUPYTER_RUN=hooks-test-"+strconv.Itoa(os.Getpid()),
		"ENVD_JUPYTER_ORPHAN_GRACE=1")
	// The test's own pipe, not StdoutPipe: Wait would close it, and the
	// stand-in's later print would then kill it.
	out, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	envd.Stdout = w
	err = envd.Start()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	if !lines.Scan() {
		envd.Process.Kill()
		envd.Wait()
		t.Fatalf("the stand-in server printed nothing: %v", lines.Err())
	}
	var server, kernel int
	if f := strings.Fields(lines.Text()); len(f) == 2 {
		server, _ = strconv.Atoi(f[0])
		kernel, _ = strconv.Atoi(f[1])
	}
	if server == 0 || kernel == 0 {
		envd.Process.Kill()
		envd.Wait()
		t.Fatalf("want two pids, got %q", lines.Text())
	}
	t.Cleanup(func() {
		// Only if the test failed: the processes are still ours.
		for _, p := range []int{server, kernel} {
			if testutil.Alive(p) {
				syscall.Kill(p, syscall.SIGKILL)
			}
		}
	})

	// Stuck, with its parent alive: it keeps running, and SIGQUIT shows
	// where it is stuck.
	if err := syscall.Kill(server, syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	var dump string
	testutil.PollFor(10*time.Second, func() bool {
		b, _ := os.ReadFile(stderr)
		dump = string(b)
		return strings.Contains(dump, "in <module>")
	})
	if !strings.Contains(dump, "most recent call first") || !strings.Contains(dump, "envd_watch_parent") {
		t.Errorf("SIGQUIT dumped %q; want every thread's stack, the watcher's among them", dump)
	}
	if !testutil.Alive(server) || !testutil.Alive(kernel) {
		t.Fatal("the server or its kernel ended while envd was alive")
	}

	// envd dies: SIGTERM, which the stuck server ignores, then after the
	// grace the whole run is killed.
	if err := envd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	envd.Wait()
	waitGone(t, 30*time.Second, server, kernel)
	if !lines.Scan() || lines.Text() != "SIGTERM" {
		t.Errorf("the server was not sent SIGTERM first: %q", lines.Text())
	}
}
