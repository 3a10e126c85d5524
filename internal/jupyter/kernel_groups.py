# Written by envd into JUPYTER_CONFIG_DIR, after server_hooks.py (whose
# _envd_signal_each it uses) and kernel_exit.py, before early_kernel.py and
# zygote_launch.py (which use _envd_signal_group).
#
# jupyter_client signals a kernel's process group by number: the
# interrupt and the kill of every restart and shutdown (os.killpg of the
# pgid it noted at the launch). It keeps that number after the kernel's
# process was reaped: the restarter's poll of a kernel that died reaps it
# and then restarts it, which interrupts and kills the dead kernel's group.
# Once the leader is reaped and nothing else is left in its group, the
# number is free: the next process given that pid that leads a group of
# its own (another kernel, a command of the sandbox, started by anyone)
# got the SIGINT and SIGKILL meant for the dead kernel. Seen: an R kernel
# starting beside the test suite ended "Execution halted" (an interrupt
# during R's start), pid_max being 32768.
#
# Here, while the leader is not reaped, its pid holds the number and the
# group is signalled as before. Once it is, only the group's members that
# started before the reap are signalled (what the kernel left behind),
# each through a pidfd: a newcomer under the reused number started after.
import os as _envd_os_kg
import select as _envd_select_kg
import time as _envd_time_kg

from jupyter_client.provisioning.local_provisioner import LocalProvisioner as _envd_LP_kg

_ENVD_KG_HZ = _envd_os_kg.sysconf("SC_CLK_TCK")


def _envd_boottime_ns():
    return _envd_time_kg.clock_gettime_ns(_envd_time_kg.CLOCK_BOOTTIME)


def _envd_reaped_ns(proc):
    """When proc's pid was given back (CLOCK_BOOTTIME ns; 0 if unknown),
    or None while proc holds it. Polls proc: a Popen is reaped here, its
    time noted just before; a zygote's kernel says when the zygote reaped
    it (envd_reaped_ns)."""
    if proc.returncode is None:
        before = _envd_boottime_ns()
        proc.poll()
        if proc.returncode is None:
            if not _envd_ended(proc):
                return None
            # A zygote's kernel that ended: the zygote reaps it at once,
            # and its word follows (read by poll): wait for it.
            try:
                proc.wait(timeout=1)
            except Exception:
                pass
            if proc.returncode is None:
                return 0
        if getattr(proc, "envd_reaped_ns", None) is None:
            proc.envd_reaped_ns = before
    return getattr(proc, "envd_reaped_ns", None) or 0


def _envd_ended(proc):
    """Whether proc, not the server's own child (a zygote's kernel, with
    a pidfd), has ended: its pidfd reads ready once it exits."""
    fd = getattr(proc, "pidfd", None)
    if fd is None:
        return False
    try:
        return bool(_envd_select_kg.select([fd], [], [], 0)[0])
    except (OSError, ValueError):
        return False


def _envd_stat(pid):
    """A process's (pgid, start time in clock ticks since boot)."""
    with open("/proc/%d/stat" % pid, "rb") as f:
        s = f.read()
    fields = s[s.rindex(b")") + 2 :].split()
    return int(fields[2]), int(fields[19])  # stat's fields 5 and 22


def _envd_signal_left(pgid, reaped_ns, sig):
    """Signals each process of group pgid that started before reaped_ns;
    returns how many were signalled."""
    limit = reaped_ns * _ENVD_KG_HZ // 1_000_000_000

    def left(pid):
        group, start = _envd_stat(pid)
        return group == pgid and start < limit

    return _envd_signal_each(left, sig)


def _envd_signal_group(proc, pgid, sig):
    """Signals the group pgid that proc led, as os.killpg would while proc
    is unreaped. Raises ProcessLookupError if nobody got it."""
    reaped = _envd_reaped_ns(proc)
    if reaped is None:
        _envd_os_kg.killpg(pgid, sig)
    elif not _envd_signal_left(pgid, reaped, sig):
        raise ProcessLookupError("process group %d is gone" % pgid)


async def _envd_poll_kg(self):
    proc = self.process
    if proc is not None:
        _envd_reaped_ns(proc)  # notes the reap's time
    return await _envd_LP_kg._envd_orig_poll(self)


async def _envd_send_signal_kg(self, signum):
    proc = self.process
    reaped = None if proc is None or not self.pgid else _envd_reaped_ns(proc)
    if reaped is None:
        return await _envd_LP_kg._envd_orig_send_signal(self, signum)
    # Nobody left is not an error: as the original's signal to an ended process.
    _envd_signal_left(self.pgid, reaped, signum)


if not hasattr(_envd_LP_kg, "_envd_orig_send_signal"):
    _envd_LP_kg._envd_orig_poll = _envd_LP_kg.poll
    _envd_LP_kg.poll = _envd_poll_kg
    _envd_LP_kg._envd_orig_send_signal = _envd_LP_kg.send_signal
    _envd_LP_kg.send_signal = _envd_send_signal_kg
