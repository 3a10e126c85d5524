
# The early kernel (envd_jupyter_server.py launched it before the server's
# imports):
# the first start of its kernelspec in its directory takes it over instead
# of launching another, if that start would have launched the very same
# process: the same command (but for the connection file's name), the same
# environment, the same directory, the same options, a local TCP kernel.
# The kernel's ports and key become the kernel manager's, which rewrites
# the kernel's connection file with them (jupyter_client reconciles what a
# provisioner returns). Restarts launch as usual. A start that differs
# leaves it alone and it is discarded, as it is when nobody asks for it in
# time: one kernel at most, never one nobody will use.
import os as _envd_os_ek
import sys as _envd_sys_ek
import threading as _envd_threading_ek

from jupyter_client.connect import LocalPortCache as _envd_LocalPortCache
from jupyter_client.provisioning.local_provisioner import LocalProvisioner as _envd_LocalProvisioner

# Every kernel's ports come from outside the ephemeral range
# (kernel_ports.py, written ahead of this file).
def _envd_find_available_port(self, ip):
    port = _envd_pick_port(ip, self.currently_used_ports)
    self.currently_used_ports.add(port)
    return port


def _envd_return_port(self, port):
    _envd_LocalPortCache._envd_orig_return_port(self, port)
    if port not in self.currently_used_ports:
        _envd_release_port(port)


if not hasattr(_envd_LocalPortCache, "_envd_orig_find_available_port"):
    _envd_LocalPortCache._envd_orig_find_available_port = _envd_LocalPortCache.find_available_port
    _envd_LocalPortCache._envd_orig_return_port = _envd_LocalPortCache.return_port
    _envd_LocalPortCache.find_available_port = _envd_find_available_port
    _envd_LocalPortCache.return_port = _envd_return_port

_envd_port_keys = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")


class _EnvdEarly:
    """The early kernel's state, one per process (the config may be read
    more than once): kernel is the boot file's record until taken or
    discarded, then None."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.lock = _envd_threading_ek.Lock()
        if kernel is not None:  # no other kernel of this server gets its ports
            _envd_LocalPortCache.instance().currently_used_ports.update(kernel["info"][k] for k in _envd_port_keys)

    def forget(self, early, why):
        """Ends an early kernel nobody took; lock held."""
        if self.kernel is not early:
            return
        self.kernel = None
        lpc = _envd_LocalPortCache.instance()
        for k in _envd_port_keys:
            lpc.return_port(early["info"][k])
        print("envd: early kernel %d discarded: %s" % (early["proc"].pid, why), file=_envd_sys_ek.stderr)
        try:
            # Its own session: the kernel and its children (by number only
            # while the kernel is unreaped: kernel_groups.py).
            _envd_signal_group(early["proc"], early["proc"].pid, 9)
        except OSError:
            pass
        try:
            _envd_os_ek.unlink(early["file"])
        except OSError:
            pass
        _envd_threading_ek.Thread(target=early["proc"].wait, name="envd-early-reap", daemon=True).start()

    def expire(self, early):
        with self.lock:
            self.forget(early, "not asked for in time")

    def take(self, provisioner, cmd, kwargs):
        """The early kernel and its connection info if this launch is
        its, else None (and the early kernel is discarded if the launch
        is of its kernelspec)."""
        early = self.kernel
        km = provisioner.parent
        if early is None or km is None or (km.kernel_name or "").lower() != early["name"]:
            return None
        with self.lock:
            if self.kernel is not early:
                return None
            conn = _envd_os_ek.path.realpath(km.connection_file)
            why = None
            if early["proc"].poll() is not None:
                why = "it exited (%s)" % early["proc"].returncode
            elif km.transport != "tcp" or km.ip != early["info"]["ip"]:
                why = "not a local TCP kernel"
            elif [early["file"] if a == conn else a for a in cmd] != early["cmd"]:
                why = "another command: %r" % (cmd,)
            elif set(kwargs) - {"env", "cwd", "kernel_id", "extra_arguments"}:
                why = "launch options %r" % sorted(kwargs)
            elif kwargs.get("env") != early["env"]:
                why = "another environment"
            elif _envd_os_ek.path.normpath(kwargs.get("cwd") or "") != _envd_os_ek.path.normpath(early["cwd"]):
                why = "another directory: %r" % (kwargs.get("cwd"),)
            if why is not None:
                self.forget(early, why)
                return None
            self.kernel = None
        # The ports the provisioner set aside for this kernel go back (the
        # early kernel's stay set aside, until the provisioner's cleanup).
        lpc = _envd_LocalPortCache.instance()
        for k in _envd_port_keys:
            lpc.return_port(getattr(km, k))
        info = dict(early["info"])
        info["key"] = info["key"].encode()
        print("envd: early kernel %d taken over" % early["proc"].pid, file=_envd_sys_ek.stderr)
        return early, info


async def _envd_launch_kernel(self, cmd, **kwargs):
    taken = _envd_LocalProvisioner._envd_early.take(self, cmd, kwargs)
    if taken is None:
        return await _envd_LocalProvisioner._envd_orig_launch_kernel(self, cmd, **kwargs)
    early, info = taken
    self.process = early["proc"]
    self.pid = early["proc"].pid
    try:
        self.pgid = _envd_os_ek.getpgid(self.pid)
    except OSError:
        self.pgid = None
    self._envd_early_file = early["file"]
    self.connection_info = info
    return info


async def _envd_cleanup(self, restart=False):
    f = getattr(self, "_envd_early_file", None)
    if f:
        self._envd_early_file = None
        try:
            _envd_os_ek.unlink(f)
        except OSError:
            pass
    return await _envd_LocalProvisioner._envd_orig_cleanup(self, restart=restart)


if not hasattr(_envd_LocalProvisioner, "_envd_early"):
    _envd_LocalProvisioner._envd_early = _EnvdEarly(getattr(_envd_sys_ek.modules.get("envd_early_kernel"), "kernel", None))
    _envd_LocalProvisioner._envd_orig_launch_kernel = _envd_LocalProvisioner.launch_kernel
    _envd_LocalProvisioner._envd_orig_cleanup = _envd_LocalProvisioner.cleanup
    _envd_LocalProvisioner.launch_kernel = _envd_launch_kernel
    _envd_LocalProvisioner.cleanup = _envd_cleanup
    _envd_e = _envd_LocalProvisioner._envd_early.kernel
    if _envd_e is not None:
        _envd_t = _envd_threading_ek.Timer(_envd_e["discard_after"], _envd_LocalProvisioner._envd_early.expire, args=(_envd_e,))
        _envd_t.daemon = True
        _envd_t.start()
