package interpreter_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/testutil"
)

// dyingScript stands in for a kernel that dies as it starts, after the
// server's first kernel_info_request reached it (as ipykernel does when an
// import fails, or a signal or the OOM killer ends it: its sockets are
// bound early): it binds the shell port of the connection file (argv[3]),
// takes one request (or waits 2 s for one), writes "envd-test: <argv[1]>
// dies" to stderr and exits 3. With a marker file argv[2], only its first
// start does: later ones exec ipykernel.
const dyingScript = `
import json, os, sys, zmq
name, marker, conn = sys.argv[1:4]
if marker and os.path.exists(marker):
    os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", "-f", conn])
if marker:
    open(marker, "w").close()
with open(conn) as f:
    info = json.load(f)
s = zmq.Context().socket(zmq.ROUTER)
s.bind("%s://%s:%d" % (info["transport"], info["ip"], info["shell_port"]))
s.poll(2000)
sys.stderr.write("envd-test: %s dies\n" % name)
sys.stderr.flush()
os._exit(3)
`

// dyingSpec installs a kernelspec (of language python) running
// dyingScript: a kernel that dies at every start, or (once) only at its
// first.
func dyingSpec(t *testing.T, name string, once bool) {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "kernel.py")
	if err := os.WriteFile(script, []byte(dyingScript), 0o644); err != nil {
		t.Fatal(err)
	}
	marker := ""
	if once {
		marker = filepath.Join(dir, "started")
	}
	installSpec(t, name, map[string]any{
		"argv":         []string{"/usr/bin/python3", script, name, marker, "{connection_file}"},
		"display_name": name,
		"language":     "python",
	})
}

// A kernel that dies before its first answer and comes back healthy is
// used at once: the Jupyter server does not make the context wait for
// the answer its dead first process never gave (60 s, kernel_info_timeout).
func TestKernelDiesOnceAtStart(t *testing.T) {
	t.Parallel()
	name := specName("dies-once")
	dyingSpec(t, name, true)
	ctx := testutil.Context(t, kernelTimeout)
	start := time.Now()
	c, err := shared.eng.CreateContext(ctx, name, "")
	took := time.Since(start)
	if err != nil {
		t.Fatalf("after %s: %v", took.Round(time.Millisecond), err)
	}
	t.Cleanup(func() { _ = shared.eng.RemoveContext(testutil.Context(t, time.Minute), c.ID) })
	if took > 30*time.Second {
		t.Errorf("creation took %s, want the restarted kernel used at once", took.Round(time.Millisecond))
	}
	if got := run(t, c.ID, "print(6 * 7)").mustOK(t).out(); got != "42\n" {
		t.Errorf("output %q", got)
	}
}

// A kernel that dies at every start fails its context's creation within
// seconds (not after 60 s), with its own stderr in the error.
func TestKernelAlwaysDiesAtStart(t *testing.T) {
	t.Parallel()
	name := specName("dies-always")
	dyingSpec(t, name, false)
	ctx := testutil.Context(t, kernelTimeout)
	start := time.Now()
	c, err := shared.eng.CreateContext(ctx, name, "")
	took := time.Since(start)
	if err == nil {
		_ = shared.eng.RemoveContext(ctx, c.ID)
		t.Fatalf("created a context on a kernel that always dies, in %s", took)
	}
	t.Logf("after %s: %v", took.Round(time.Millisecond), err)
	if took > 30*time.Second {
		t.Errorf("creation failed after %s, want within seconds", took.Round(time.Millisecond))
	}
	if !strings.Contains(err.Error(), "envd-test: "+name+" dies") {
		t.Errorf("error without the kernel's stderr: %v", err)
	}
}
