# Written by envd into JUPYTER_CONFIG_DIR; Jupyter Server loads it at start.
#
# The server's parent-death signal (SIGWINCH, ignored by default) comes
# whenever the envd thread that started it ends: when envd dies, but also
# when a live upgrade execs a new envd in the same pid, which keeps the
# server. Only a parent that is really gone (the server was reparented)
# stops the server, as SIGTERM does: its kernels are shut down with it.
import os as _envd_os
import signal as _envd_signal

_envd_parent = int(_envd_os.environ.get("ENVD_JUPYTER_PARENT") or 0)


def _envd_check_parent(*_):
    if _envd_parent and _envd_os.getppid() != _envd_parent:
        _envd_os.kill(_envd_os.getpid(), _envd_signal.SIGTERM)


if _envd_parent:
    _envd_signal.signal(_envd_signal.SIGWINCH, _envd_check_parent)
    _envd_check_parent()  # envd may have died before this ran

