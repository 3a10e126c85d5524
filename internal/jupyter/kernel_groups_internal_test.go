package jupyter

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// kernelGroupsScript plays jupyter_client's restart of a kernel that died,
// with the real LocalProvisioner and kernel_groups.py loaded (argv[1], after
// server_hooks.py), in
// a PID namespace of its own (it steers ns_last_pid): the restarter's poll
// reaps the dead kernel, then its interrupt and kill go to the kernel's
// group. A process that took the dead kernel's pid as its own group's
// number (a kernel starting, a sandbox command) must not get them; what
// the kernel left in its group must.
const kernelGroupsScript = `
import asyncio, os, signal, subprocess, sys, time
if len(sys.argv) > 1:
    exec(open(sys.argv[1]).read())
from jupyter_client.provisioning.local_provisioner import LocalProvisioner

def leader(code):
    # As jupyter_client launches a kernel: a session (and group) of its own.
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                            stdout=subprocess.PIPE, text=True)

def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False

async def reaped(prov):
    for _ in range(500):
        if await prov.poll() is not None:
            return
        await asyncio.sleep(0.01)
    raise SystemExit("the kernel did not end")

async def main():
    # A kernel that died alone: its pid, the group's number, is free once
    # it is reaped, and a new group leader takes it.
    prov = LocalProvisioner(kernel_id="k1")
    prov.process = leader("import os; os._exit(1)")
    prov.pgid = os.getpgid(prov.process.pid)
    await reaped(prov)
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(prov.pgid - 1))
    newcomer = leader("import time; print('up', flush=True); time.sleep(60)")
    assert newcomer.pid == prov.pgid, (newcomer.pid, prov.pgid)
    newcomer.stdout.readline()
    await prov.send_signal(signal.SIGINT)  # shutdown_kernel's interrupt
    await prov.kill(restart=True)          # and its kill
    time.sleep(0.2)
    print("newcomer alive:", alive(newcomer.pid))
    newcomer.kill()
    newcomer.wait()

    # A kernel that died leaving a child in its group: the number is held,
    # the child is what the restart's kill is for. (Started a clock tick,
    # 10 ms, or more before the reap: the start times /proc gives count
    # ticks, and one in the reap's own tick counts as a newcomer.)
    prov = LocalProvisioner(kernel_id="k2")
    prov.process = leader("import os, time\nif os.fork() == 0:\n    time.sleep(60)\ntime.sleep(0.1)\nos._exit(1)\n")
    prov.pgid = os.getpgid(prov.process.pid)
    await reaped(prov)
    left = [p for p in map(int, filter(str.isdigit, os.listdir("/proc")))
            if p != os.getpid() and os.getpgid(p) == prov.pgid]
    assert len(left) == 1, left
    await prov.kill(restart=True)
    for _ in range(200):
        if not alive(left[0]):
            break
        time.sleep(0.01)
    print("left-behind alive:", alive(left[0]))

    # A zygote's kernel (zygote_launch.py's _EnvdForked): not the server's
    # child. The zygote reaped it and a newcomer took its number before the
    # server read the zygote's word: its pidfd says it ended.
    class Forked:
        def __init__(self, p):
            self.pid, self.returncode, self.pidfd = p.pid, None, os.pidfd_open(p.pid)
        def poll(self):
            return self.returncode  # the word is not read yet
        def wait(self, timeout=None):
            self.returncode, self.envd_reaped_ns = 1, self.reaped  # now it is
            return 1
    z = leader("import os; os._exit(1)")
    forked = Forked(z)
    forked.reaped = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    z.wait()  # as the zygote does
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(z.pid - 1))
    newcomer = leader("import time; print('up', flush=True); time.sleep(60)")
    assert newcomer.pid == z.pid, (newcomer.pid, z.pid)
    newcomer.stdout.readline()
    prov = LocalProvisioner(kernel_id="k3")
    prov.process, prov.pgid = forked, z.pid
    await prov.send_signal(signal.SIGINT)  # an interrupt before the server polled
    time.sleep(0.2)
    print("forked newcomer alive:", alive(newcomer.pid))
    newcomer.kill()
    newcomer.wait()

asyncio.run(main())
`

func TestRestartSignalsOnlyTheDeadKernelsGroup(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes a PID namespace")
	}
	dir := t.TempDir()
	// As in the server's config: kernel_groups.py uses server_hooks.py's
	// _envd_signal_each.
	hook := filepath.Join(dir, "kernel_groups.py")
	if err := os.WriteFile(hook, append(append([]byte{}, serverHooksPy...), kernelGroupsPy...), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		argv := append([]string{"-mpf", "--mount-proc", "--kill-child", "/usr/bin/python3", "-c", kernelGroupsScript}, args...)
		out, err := exec.Command("unshare", argv...).CombinedOutput()
		if err != nil {
			t.Fatalf("unshare %v: %v\n%s", argv[:4], err, out)
		}
		return string(out)
	}
	out := run(hook)
	if !strings.Contains(out, "newcomer alive: True") {
		t.Errorf("the dead kernel's restart signalled the group that took its number:\n%s", out)
	}
	if !strings.Contains(out, "left-behind alive: False") {
		t.Errorf("the dead kernel's restart left its child running:\n%s", out)
	}
	if !strings.Contains(out, "forked newcomer alive: True") {
		t.Errorf("an interrupt of a zygote's kernel the zygote had reaped signalled the group that took its number:\n%s", out)
	}
	// Without the hook, jupyter_client's own signals reach the newcomer:
	// the script does reproduce what the hook prevents.
	if out := run(); !strings.Contains(out, "newcomer alive: False") {
		t.Errorf("without kernel_groups.py the newcomer survived: the test no longer shows the hazard:\n%s", out)
	}
}
