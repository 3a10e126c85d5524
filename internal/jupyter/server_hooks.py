# Written by envd into JUPYTER_CONFIG_DIR; Jupyter Server loads it at start.
#
# Two hooks that work even when the server's main thread is stuck (its
# event loop blocked in a call that never returns), since neither needs it:
#
# - SIGQUIT writes every thread's Python stack to stderr (which envd logs)
#   and lets the server run on. envd sends it before killing a server that
#   stopped answering. (Not SIGUSR1: the server takes it over for a
#   summary of itself.)
# - A watcher thread stops the server when envd is gone (the server was
#   reparented). A live upgrade execs a new envd in the same pid, which
#   keeps the server. SIGTERM first: the server shuts its kernels down.
#   If it is still here after a grace, its main thread is stuck: every
#   process of this server run (found by the run's marker in its
#   environment, as envd's own sweep does) is killed, the server last.
import faulthandler as _envd_faulthandler
import os as _envd_os
import signal as _envd_signal
import threading as _envd_threading
import time as _envd_time

_envd_faulthandler.register(_envd_signal.SIGQUIT, all_threads=True)

_envd_parent = int(_envd_os.environ.get("ENVD_JUPYTER_PARENT") or 0)
_envd_marker = _envd_os.environ.get("ENVD_JUPYTER_RUN", "")
_envd_marker = ("ENVD_JUPYTER_RUN=" + _envd_marker).encode() if _envd_marker else b""
_envd_grace = float(_envd_os.environ.get("ENVD_JUPYTER_ORPHAN_GRACE") or 10)


def _envd_signal_each(keep, sig, skip=()):
    """Signals through a pidfd each process (but those in skip) for which
    keep(pid) holds, asked after its pidfd is open: the pidfd is then the
    process keep saw, or one that ended, which the signal does not reach.
    Returns how many were signalled. kernel_groups.py uses it too."""
    n = 0
    for name in _envd_os.listdir("/proc"):
        if not name.isdigit() or int(name) in skip:
            continue
        try:
            fd = _envd_os.pidfd_open(int(name))
        except OSError:
            continue  # gone
        try:
            if keep(int(name)):
                _envd_signal.pidfd_send_signal(fd, sig)
                n += 1
        except (OSError, ValueError, IndexError):
            pass  # exited, or not ours to read
        finally:
            _envd_os.close(fd)
    return n


def _envd_has_marker(pid):
    with open("/proc/%d/environ" % pid, "rb") as f:
        return _envd_marker in f.read().split(b"\0")


def _envd_kill_run():
    me = _envd_os.getpid()
    for _ in range(5):  # a process can fork while we look
        if not _envd_signal_each(_envd_has_marker, _envd_signal.SIGKILL, skip=(me,)):
            break
    _envd_os.kill(me, _envd_signal.SIGKILL)


def _envd_watch_parent():
    while _envd_os.getppid() == _envd_parent:
        _envd_time.sleep(0.5)
    _envd_os.kill(_envd_os.getpid(), _envd_signal.SIGTERM)
    _envd_time.sleep(_envd_grace)
    if _envd_marker:
        _envd_kill_run()
    _envd_os.kill(_envd_os.getpid(), _envd_signal.SIGKILL)


if _envd_parent:
    _envd_threading.Thread(
        target=_envd_watch_parent, name="envd-parent-watch", daemon=True
    ).start()

