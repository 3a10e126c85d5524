package jupyter

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A kernel's shutdown whose shutdown_request cannot be sent (a control
// socket with no peer: a blocking send) must not block the server's
// event loop: with kernel_exit.py loaded, the send gives up after a
// second and the kernel is killed. Without it, the send blocks for good.
func TestShutdownRequestCannotBlock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	hook := filepath.Join(dir, "kernel_exit.py")
	if err := os.WriteFile(hook, kernelExitPy, 0o644); err != nil {
		t.Fatal(err)
	}
	script := `
import asyncio, sys, time, zmq
exec(open(sys.argv[1]).read())
from jupyter_client.manager import AsyncKernelManager
async def main():
    km = AsyncKernelManager(kernel_name="python3")
    await km.start_kernel()
    km._connect_control_socket()
    assert km._control_socket.sndtimeo == 1000, km._control_socket.sndtimeo
    # A DEALER that never connected: its send blocks.
    km._control_socket.close()
    km._control_socket = km.context.socket(zmq.DEALER)
    km._control_socket.sndtimeo = 1000
    t = time.monotonic()
    await km.shutdown_kernel()
    print("shutdown in %.1fs, alive %s" % (time.monotonic() - t, await km.is_alive()))
asyncio.run(main())
`
	cmd := exec.Command("/usr/bin/python3", "-c", script, hook)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PYDEVD_DISABLE_FILE_VALIDATION=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "alive False") {
		t.Fatalf("shutdown with a blocked control socket: %v\n%s", err, out)
	}
}
