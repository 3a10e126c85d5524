
# Written by envd into JUPYTER_CONFIG_DIR, after early_kernel.py and
# zygote_start.py: kernels forked from a zygote (envd_zygote.py beside this
# file; envd_zygote.json names the kernelspecs and what the zygote
# preloads).
#
# A launch of one of those kernelspecs whose command is
# [PYTHON, -m, MODULE, -f, CONNECTION_FILE] asks the zygote of that
# command and environment for the kernel instead of starting a process:
# the zygote the early boot started (for the default context's kernel), or
# one the first such launch starts; the launch waits for it to be ready.
# The kernel it forks is the launch's process for the server (_EnvdForked:
# poll, wait, signals as a Popen's), and a restart forks another. Anything
# unexpected (another command, another environment, a zygote that died or
# did not start) and the launch is the usual one.
import json as _envd_json_zl
import os as _envd_os_zl
import select as _envd_select_zl
import signal as _envd_signal_zl
import socket as _envd_socket_zl
import struct as _envd_struct_zl
import subprocess as _envd_subprocess_zl
import sys as _envd_sys_zl
import threading as _envd_threading_zl
import asyncio as _envd_asyncio_zl

from jupyter_client.provisioning.local_provisioner import LocalProvisioner as _envd_LP_zl

_ENVD_ZL_READY_WAIT = 60.0  # seconds a launch waits for a starting zygote


class _EnvdForked:
    """A kernel forked by the zygote, as the server's Popen of it."""

    def __init__(self, sock, pid, args):
        self.sock, self.pid, self.args = sock, pid, args
        self.returncode = None
        self.stdin = self.stdout = self.stderr = None
        self.buf = b""
        try:
            self.pidfd = _envd_os_zl.pidfd_open(pid)
        except OSError:
            self.pidfd = None

    def _take(self, timeout):
        """Reads the zygote's word on the kernel's end, waiting up to
        timeout (None: no limit)."""
        if self.returncode is not None:
            return
        fds = [self.sock]
        r, _, _ = _envd_select_zl.select(fds, [], [], timeout)
        if not r:
            return
        try:
            chunk = self.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if chunk:
            self.buf += chunk
            if len(self.buf) >= 4:
                (n,) = _envd_struct_zl.unpack("!I", self.buf[:4])
                if len(self.buf) >= 4 + n:
                    msg = _envd_json_zl.loads(self.buf[4 : 4 + n])
                    self._end(int(msg.get("exit", -_envd_signal_zl.SIGKILL)), msg.get("reaped_ns"))
            return
        # The zygote is gone without a word: its kernel may live on
        # (reparented); its end is then seen on its pidfd, its status not.
        if self.pidfd is None:
            self._end(-_envd_signal_zl.SIGKILL)
            return
        r, _, _ = _envd_select_zl.select([self.pidfd], [], [], timeout)
        if r:
            self._end(-_envd_signal_zl.SIGKILL)

    def _end(self, code, reaped_ns=None):
        # When the pid was given back (kernel_groups.py): 0 if unknown.
        self.envd_reaped_ns = reaped_ns if isinstance(reaped_ns, int) else 0
        self.returncode = code
        self.sock.close()
        if self.pidfd is not None:
            _envd_os_zl.close(self.pidfd)
            self.pidfd = None

    def poll(self):
        self._take(0)
        return self.returncode

    def wait(self, timeout=None):
        if timeout is None:
            while self.returncode is None:
                self._take(None)
        else:
            self._take(timeout)
            if self.returncode is None:
                raise _envd_subprocess_zl.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig):
        if self.returncode is not None:
            return
        if self.pidfd is not None:
            _envd_signal_zl.pidfd_send_signal(self.pidfd, sig)
        else:
            _envd_os_zl.kill(self.pid, sig)

    def terminate(self):
        self.send_signal(_envd_signal_zl.SIGTERM)

    def kill(self):
        self.send_signal(_envd_signal_zl.SIGKILL)


class _EnvdZygote:
    """One zygote: of a python and an environment."""

    def __init__(self, proc, sock):
        self.proc, self.sock = proc, sock
        self.used = False  # asked for a kernel

    def alive(self):
        return self.proc.poll() is None

    async def fork(self, cmd, env, cwd):
        """The forked kernel, or None if the zygote cannot give one."""
        loop = _envd_asyncio_zl.get_running_loop()
        deadline = loop.time() + _ENVD_ZL_READY_WAIT
        while not _envd_os_zl.path.exists(self.sock):
            if not self.alive() or loop.time() > deadline:
                return None
            await _envd_asyncio_zl.sleep(0.02)
        s = _envd_socket_zl.socket(_envd_socket_zl.AF_UNIX, _envd_socket_zl.SOCK_STREAM)
        r, w = _envd_os_zl.pipe2(_envd_os_zl.O_CLOEXEC)
        try:
            s.settimeout(10)
            s.connect(self.sock)
            body = _envd_json_zl.dumps({"argv": cmd, "env": env, "cwd": cwd}).encode()
            # stdin as the launcher gives it (a pipe it closes at once);
            # stdout and stderr the server's, as a launched kernel's.
            _envd_socket_zl.send_fds(s, [_envd_struct_zl.pack("!I", len(body))], [r, 1, 2])
            s.sendall(body)
            head = b""
            while len(head) < 4:
                c = s.recv(4 - len(head))
                if not c:
                    raise EOFError("the zygote closed the connection")
                head += c
            (n,) = _envd_struct_zl.unpack("!I", head)
            msg = b""
            while len(msg) < n:
                c = s.recv(n - len(msg))
                if not c:
                    raise EOFError("the zygote closed the connection")
                msg += c
            reply = _envd_json_zl.loads(msg)
            if "pid" not in reply:
                raise RuntimeError(reply.get("error", "no pid"))
            proc = _EnvdForked(s, int(reply["pid"]), cmd)
            s.sendall(b"k")  # the pid is held (pidfd): the zygote may reap it
            s.setblocking(False)
            return proc
        except (OSError, EOFError, ValueError, RuntimeError) as e:
            print("envd: zygote %d: no kernel: %r" % (self.proc.pid, e), file=_envd_sys_zl.stderr)
            s.close()
            return None
        finally:
            _envd_os_zl.close(r)
            _envd_os_zl.close(w)


class _EnvdZygotes:
    def __init__(self, cfg, started):
        """started: the zygote the early boot started, or None."""
        self.cfg = cfg
        self.kernels = {k.lower() for k in cfg.get("kernels") or []}
        self.zygotes = {}  # _envd_zs_key -> _EnvdZygote
        self.lock = _envd_threading_zl.Lock()
        if started is not None:
            z = self.zygotes[started["key"]] = _EnvdZygote(started["proc"], started["sock"])
            # As the early kernel it stands for: gone if nobody asks for
            # a kernel of it in time (a launch that differs, say), never a
            # zygote nobody will use.
            t = _envd_threading_zl.Timer(started["discard_after"], self.discard, args=(started["key"], z))
            t.daemon = True
            t.start()

    def discard(self, key, z):
        """Ends the zygote z of key if no launch used it."""
        with self.lock:
            if z.used or self.zygotes.get(key) is not z:
                return
            del self.zygotes[key]
        print("envd: zygote %d discarded: not asked for a kernel in time" % z.proc.pid, file=_envd_sys_zl.stderr)
        try:
            # Its own session (by number only while unreaped: kernel_groups.py).
            _envd_signal_group(z.proc, z.proc.pid, _envd_signal_zl.SIGKILL)
        except OSError:
            pass
        try:
            _envd_os_zl.unlink(z.sock)
        except OSError:
            pass
        _envd_threading_zl.Thread(target=z.proc.wait, name="envd-zygote-reap", daemon=True).start()

    def eligible(self, provisioner, cmd, kwargs):
        km = provisioner.parent
        if km is None or (km.kernel_name or "").lower() not in self.kernels:
            return False
        if km.transport != "tcp" or set(kwargs) - {"env", "cwd", "kernel_id", "extra_arguments"}:
            return False
        return kwargs.get("env") is not None and _envd_zs_forkable(cmd)

    async def launch(self, provisioner, cmd, kwargs):
        env = dict(kwargs["env"])
        env["JPY_PARENT_PID"] = str(_envd_os_zl.getpid())  # as jupyter_client's launcher sets it
        key = _envd_zs_key(cmd, env)
        with self.lock:
            z = self.zygotes.get(key)
            if z is not None and not z.alive():
                print("envd: zygote %d exited (%s); starting another" % (z.proc.pid, z.proc.returncode), file=_envd_sys_zl.stderr)
                z = None
            if z is None:
                runtime = _envd_os_zl.environ.get("JUPYTER_RUNTIME_DIR") or _envd_os_zl.path.dirname(cmd[-1])
                z = self.zygotes[key] = _EnvdZygote(*_envd_zs_start(self.cfg, cmd, env, runtime))
            z.used = True
        cwd = kwargs.get("cwd") or _envd_os_zl.getcwd()
        return await z.fork(list(cmd), env, cwd)


async def _envd_zl_launch_kernel(self, cmd, **kwargs):
    zs = _envd_LP_zl._envd_zygotes
    if zs is not None and zs.eligible(self, cmd, kwargs):
        proc = await zs.launch(self, cmd, kwargs)
        if proc is not None:
            self.process = proc
            self.pid = proc.pid
            try:
                self.pgid = _envd_os_zl.getpgid(proc.pid)
            except OSError:
                self.pgid = None
            return self.connection_info
    return await _envd_LP_zl._envd_zl_orig_launch_kernel(self, cmd, **kwargs)


# Below the early kernel's hook (early_kernel.py, which falls back to
# _envd_orig_launch_kernel): the early kernel is taken first.
if not hasattr(_envd_LP_zl, "_envd_zygotes") and hasattr(_envd_LP_zl, "_envd_orig_launch_kernel"):
    _envd_zl_cfg = _envd_zs_config()
    _envd_zl_started = getattr(_envd_sys_zl.modules.get("envd_early_kernel"), "zygote", None)
    _envd_LP_zl._envd_zygotes = _EnvdZygotes(_envd_zl_cfg, _envd_zl_started) if _envd_zl_cfg else None
    _envd_LP_zl._envd_zl_orig_launch_kernel = _envd_LP_zl._envd_orig_launch_kernel
    _envd_LP_zl._envd_orig_launch_kernel = _envd_zl_launch_kernel
