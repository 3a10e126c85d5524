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


# A kernel's WebSocket opens only once the kernel has answered a
# kernel_info_request (ZMQChannelsHandler.pre_get). The server sends one
# per kernel and every later open waits on it (kernel._kernel_info_future).
# A kernel that dies after the request reached it and before it answered
# (an import failing, a signal, the OOM killer) takes the request with it,
# so every open of the kernel's WebSockets waited kernel_info_timeout
# (60 s), however soon the kernel was back. Here a restart of the kernel
# while that request is pending opens them as soon as the new process is
# started (the server then nudges it on its ports, as for every open), and
# its end for good ("dead") at once. The WebSockets then get the kernel's
# later restarts: envd sees a kernel that keeps dying.
import asyncio as _envd_asyncio_ki


def _envd_release_kernel_info(handler, kernel, future):
    def release():
        if not future.done():
            future.set_result({})  # what the server assumes after its timeout
        ch = handler.kernel_info_channel
        handler.kernel_info_channel = None
        if ch is not None and not ch.closed():
            ch.close()

    def restarting():
        old = getattr(kernel.provisioner, "process", None)

        async def when_started():
            # Called before the restart: wait for the new process (the
            # server's own timeout still bounds the wait).
            while not future.done():
                await _envd_asyncio_ki.sleep(0.05)
                proc = getattr(kernel.provisioner, "process", None)
                if proc is not None and proc is not old and kernel.ready.done():
                    release()

        _envd_asyncio_ki.ensure_future(when_started())

    kernel.add_restart_callback(restarting, "restart")
    kernel.add_restart_callback(release, "dead")

    def done(_):
        kernel.remove_restart_callback(restarting, "restart")
        kernel.remove_restart_callback(release, "dead")

    future.add_done_callback(done)


def _envd_request_kernel_info(self):
    kernel = self.kernel_manager.get_kernel(self.kernel_id)
    first = not hasattr(kernel, "_kernel_info_future")
    out = _envd_ZCH._envd_orig_request_kernel_info(self)
    if first and getattr(kernel, "_kernel_info_future", None) is self._kernel_info_future:
        _envd_release_kernel_info(self, kernel, self._kernel_info_future)
    return out


if hasattr(_envd_ZCH, "request_kernel_info") and not hasattr(_envd_ZCH, "_envd_orig_request_kernel_info"):
    _envd_ZCH._envd_orig_request_kernel_info = _envd_ZCH.request_kernel_info
    _envd_ZCH.request_kernel_info = _envd_request_kernel_info


# A kernel's shutdown sends a shutdown_request on the kernel manager's
# control socket, on the server's event loop, with a blocking send. A
# DEALER left with no peer blocks there for good (the kernel died and its
# control port now answers another ZeroMQ socket, or no handshake
# succeeds): the server then answers nothing at all, every kernel with it,
# until envd takes it for stuck and restarts it (seen in the soak: the
# stack stopped in jupyter_client's _async_request_shutdown, send_multipart).
# Here that send gives up after a second: the shutdown then goes on as for
# a kernel that ignores the request (its process is killed after the
# shutdown wait).
import zmq as _envd_zmq
from jupyter_client.manager import AsyncKernelManager as _envd_AKM
from jupyter_client.manager import KernelManager as _envd_KM

_ENVD_CONTROL_SEND_TIMEOUT_MS = 1000


def _envd_connect_control_socket(self):
    _envd_KM._envd_orig_connect_control_socket(self)
    sock = getattr(self, "_control_socket", None)
    if sock is not None:
        sock.sndtimeo = _ENVD_CONTROL_SEND_TIMEOUT_MS


async def _envd_request_shutdown(self, restart=False):
    try:
        await _envd_KM._envd_orig_request_shutdown(self, restart=restart)
    except _envd_zmq.Again:
        self.log.warning("envd: the shutdown request could not be sent to the kernel within %d ms; it will be killed",
                         _ENVD_CONTROL_SEND_TIMEOUT_MS)


if (hasattr(_envd_KM, "_connect_control_socket") and hasattr(_envd_KM, "_async_request_shutdown")
        and not hasattr(_envd_KM, "_envd_orig_request_shutdown")):
    _envd_KM._envd_orig_connect_control_socket = _envd_KM._connect_control_socket
    _envd_KM._connect_control_socket = _envd_connect_control_socket
    _envd_KM._envd_orig_request_shutdown = _envd_KM._async_request_shutdown
    _envd_KM._async_request_shutdown = _envd_request_shutdown
    # The server's kernels are AsyncKernelManagers, whose request_shutdown
    # is the original function itself.
    _envd_AKM.request_shutdown = _envd_request_shutdown
