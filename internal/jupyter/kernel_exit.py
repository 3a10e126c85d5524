# Written by envd into JUPYTER_CONFIG_DIR; Jupyter Server loads it at start.
#
# When a kernel's process ends and the server restarts it, each WebSocket
# of the kernel gets a "restarting" status. This adds to that message how
# the process ended: "envd_exit_status" in its content, the returncode of
# the kernel's Popen (its exit status, or minus the signal that killed it),
# which the restarter has just polled. envd says with it what happened to
# the code's kernel (the code exited it, a signal killed it) instead of
# guessing. A server whose classes differ (another Jupyter Server version)
# is left as it is: envd then does not know.
from jupyter_server.services.kernels.handlers import ZMQChannelsHandler as _envd_ZCH


def _envd_kernel_returncode(handler):
    try:
        km = handler.kernel_manager.get_kernel(handler.kernel_id)
        proc = getattr(km.provisioner, "process", None)
        code = getattr(proc, "returncode", None)
        return code if isinstance(code, int) else None
    except Exception:
        return None


def _envd_on_kernel_restarted(self):
    code = _envd_kernel_returncode(self)
    session = getattr(self, "session", None)
    if code is None or session is None:
        return _envd_ZCH._envd_orig_on_kernel_restarted(self)
    orig_msg = session.msg

    def msg(msg_type, content=None, *args, **kwargs):
        if msg_type == "status" and isinstance(content, dict):
            content = dict(content, envd_exit_status=code)
        return orig_msg(msg_type, content, *args, **kwargs)

    # The original sends the status through self.session.msg, on this
    # thread, at once: the wrapper is there for that call only.
    session.msg = msg
    try:
        return _envd_ZCH._envd_orig_on_kernel_restarted(self)
    finally:
        del session.msg


if hasattr(_envd_ZCH, "on_kernel_restarted") and not hasattr(_envd_ZCH, "_envd_orig_on_kernel_restarted"):
    _envd_ZCH._envd_orig_on_kernel_restarted = _envd_ZCH.on_kernel_restarted
    _envd_ZCH.on_kernel_restarted = _envd_on_kernel_restarted
