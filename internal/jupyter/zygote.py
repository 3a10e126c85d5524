# Written by envd into JUPYTER_CONFIG_DIR as envd_zygote.py; the server's
# config (zygote_launch.py) runs it as
#
#     PYTHON [OPTIONS] envd_zygote.py SOCKET MODULE [PRELOAD...] [--PADDING]
#
# with exactly the environment and interpreter options a kernel of its
# kernelspec gets, and asks it over SOCKET for kernels: it forks one per
# request, which runs `PYTHON [OPTIONS] -m MODULE ARGS` in the request's
# directory and environment.
#
# The zygote has imported what a kernel imports (ipykernel, IPython) and
# the data stack users import first (PRELOAD: numpy, pandas, matplotlib
# with what pyplot needs), so a forked kernel starts in milliseconds and
# its first `import pandas` takes no time: the modules are in memory,
# shared copy-on-write with every kernel.
#
# A forked kernel is made the same as a started one:
# - sys.modules holds what a started kernel's holds: every module the
#   zygote imported is hidden from it at the fork, and an import puts the
#   module back, with every module its own import brought in first (the
#   zygote recorded which module's import brought in which), as a fresh
#   import would have. Modules whose import acts on the running IPython
#   (matplotlib's backends: the inline one hooks itself into IPython) are
#   not kept at all: they are imported for real, their dependencies
#   coming from memory. (pyplot's import does not: it installs its
#   display hook when a backend is first chosen, at run time.)
# - its own session, its stdin/stdout/stderr (passed with the request),
#   no other file descriptor, default signal handlers, its directory, its
#   environment (os.environ and the C environment), sys.path[0], sys.argv,
#   sys.orig_argv, a fresh __main__, and new random state (Python's random
#   reseeds itself after a fork; numpy's global RandomState is reseeded
#   here).
# - The zygote never starts a thread, a ZeroMQ context or an event loop:
#   ipykernel creates them in the child.
# - /proc/PID/cmdline is the kernel's command, written over the zygote's
#   (padded for it); without CAP_SYS_RESOURCE zeros follow it.
# What stays shared: the hash seed (PYTHONHASHSEED is drawn once per
# interpreter).
#
# Protocol, one connection per kernel: the client sends a 4-byte length and
# a JSON request {"argv": [...], "env": {...}, "cwd": "..."} with three file
# descriptors (SCM_RIGHTS: stdin, stdout, stderr); the zygote answers
# {"pid": N} (or {"error": "..."}), waits for one byte (the client has the
# pid in hand), and sends {"exit": CODE, "reaped_ns": T} when the kernel
# ends (CODE as Popen's returncode: the exit status, or minus the signal;
# T the CLOCK_BOOTTIME just before the zygote reaped it, after which its
# pid may be another process's: see kernel_groups.py).
import sys

_envd_z_startup = frozenset(sys.modules)  # what any `python3 ...` has loaded before its code runs
_envd_z_parent = {}  # module name -> name of the module whose import brought it in ("" for the zygote's own)


_envd_z_deps = {}  # module name -> names its body imported (loaded before or not)


def _envd_z_importer(f):
    """The module whose body is running at frame f ("" for the zygote's)."""
    while f is not None:
        if f.f_code.co_name == "<module>":
            name = f.f_globals.get("__name__", "")
            return "" if name == "__main__" else name
        f = f.f_back
    return ""


class _EnvdZygoteTracker:
    """During the preload: records which module's import brought each
    module in (the innermost module body running when it was looked for)."""

    def find_spec(self, name, path=None, target=None):
        if name not in _envd_z_parent:
            _envd_z_parent[name] = _envd_z_importer(sys._getframe(1))
        return None


_envd_z_builtins = sys.modules["builtins"]
_envd_z_orig_import = _envd_z_builtins.__import__


def _envd_z_tracking_import(name, globals=None, locals=None, fromlist=(), level=0):
    """During the preload: records every module a module's body imports,
    also those loaded before (a fresh import of it would load them)."""
    n0 = len(sys.modules)
    mod = _envd_z_orig_import(name, globals, locals, fromlist, level)
    try:
        importer = _envd_z_importer(sys._getframe(1))
        full = name
        if level > 0 and globals is not None:
            pkg = globals.get("__package__") or globals.get("__name__", "")
            bits = pkg.rsplit(".", level - 1)
            full = bits[0] + ("." + name if name else "")
        deps = _envd_z_deps.setdefault(importer, set())
        parts = full.split(".") if full else []
        for i in range(1, len(parts) + 1):
            deps.add(".".join(parts[:i]))
        for x in fromlist or ():
            if full and full + "." + x in sys.modules:
                deps.add(full + "." + x)
        if len(sys.modules) != n0:
            # Modules put in sys.modules by code rather than imported
            # (typing.io, pyexpat.errors, Cython's runtime): brought in by
            # what this statement imported.
            owner = full if full in sys.modules else importer
            for k in list(sys.modules):
                if k not in _envd_z_parent and k not in _envd_z_startup and k != owner:
                    _envd_z_parent[k] = owner
    except Exception:
        pass
    return mod


_envd_z_builtins.__import__ = _envd_z_tracking_import


sys.meta_path.insert(0, _EnvdZygoteTracker())

import array  # noqa: E402
import ctypes  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import runpy  # noqa: E402  (what `python3 -m` imports: the child imports it again from memory)
import selectors  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402
import time  # noqa: E402

_ModuleSpec = sys.modules["_frozen_importlib"].ModuleSpec

# Imported for real in the child, never kept: their import acts on the
# IPython that runs them (hooks, the inline backend's integration).
_ENVD_Z_NOT_KEPT = ("matplotlib_inline", "matplotlib.backends.backend_", "matplotlib.pylab", "pylab", "ipykernel.pylab")


def _envd_z_not_kept(name):
    return any(name.startswith(p) for p in _ENVD_Z_NOT_KEPT)


def _envd_z_matplotlib(mpl):
    # What matplotlib's import does with the environment of the moment
    # (the zygote imported it without MPLBACKEND).
    if os.environ.get("MPLBACKEND"):
        mpl.rcParams["backend"] = os.environ.get("MPLBACKEND")


# Modules whose import reads state the zygote cannot have had (the
# kernel's environment as its code changed it): done again when one is
# put back.
_ENVD_Z_ON_RESTORE = {"matplotlib": _envd_z_matplotlib}
_ENVD_Z_ENV_ON_RESTORE = {}  # module name -> {variable: value, or None: unset}


class _EnvdZygoteRestorer:
    """In a forked kernel: the modules the zygote imported, hidden from
    sys.modules until imported. Built in the zygote, so that what it
    computes is shared: a forked kernel only reads it (every object it
    touches is a page copied)."""

    def __init__(self, hidden, children):
        self.hidden = hidden  # name -> module
        self.specs = {n: getattr(m, "__spec__", None) for n, m in hidden.items()}
        # name -> the names a fresh import of it loads (itself first),
        # and, for a package, its attributes naming hidden submodules.
        self.closure, self.subattrs = {}, {}
        for name, mod in hidden.items():
            seen, order, todo = {name}, [name], [name]
            while todo:
                for c in children.get(todo.pop(), ()):
                    if c not in seen:
                        seen.add(c)
                        order.append(c)
                        todo.append(c)
            self.closure[name] = tuple(order)
            if hasattr(mod, "__path__"):
                subs = tuple(
                    (a, name + "." + a) for a, v in vars(mod).items() if type(v) is type(mod) and hidden.get(name + "." + a) is v
                )
                if subs:
                    self.subattrs[name] = subs

    def add(self, name, mod):
        """A module the zygote imported after its preload."""
        self.hidden[name] = mod
        self.specs[name] = getattr(mod, "__spec__", None)
        self.closure[name] = (name,)

    def find_spec(self, name, path=None, target=None):
        if name not in self.hidden:
            return None
        return _ModuleSpec(name, self)

    def create_module(self, spec):
        return self.hidden[spec.name]

    def exec_module(self, module):
        # The import machinery set our spec on it: the module's own goes
        # back, and so does everything its import brought in.
        name = module.__spec__.name
        module.__spec__ = self.specs.get(name)
        hidden, modules = self.hidden, sys.modules
        back = []
        for n in self.closure.get(name, (name,)):
            m = hidden.pop(n, None)
            if m is None:
                continue  # put back earlier, with its own
            if n not in modules:
                modules[n] = m
            back.append(n)
        for n in back:
            # A package shows only the submodules imported since the
            # fork, as after a fresh import: an attribute naming one still
            # hidden goes (an import of it sets it again).
            subs = self.subattrs.get(n)
            if subs:
                m = modules[n]
                for a, sub in subs:
                    if sub in hidden:
                        try:
                            delattr(m, a)
                        except AttributeError:
                            pass
            if n != name:
                parent, _, child = n.rpartition(".")
                if parent and parent in modules and n in modules:
                    setattr(modules[parent], child, modules[n])
            env = _ENVD_Z_ENV_ON_RESTORE.get(n)
            if env:
                for k, v in env.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            fix = _ENVD_Z_ON_RESTORE.get(n)
            if fix is not None:
                fix(modules[n])


def _envd_z_preload(preload):
    """Imports what an ipykernel kernel imports, and preload."""
    errs = []
    for name in ["ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.zmqshell", "IPython.core.completer"] + list(preload):
        env = dict(os.environ)
        try:
            __import__(name)
        except Exception as e:  # the kernel will fail (or not) on its own
            errs.append("%s: %r" % (name, e))
        # What the import did to the environment (debugpy sets a
        # variable) is done again when the module is put back.
        now = dict(os.environ)
        diff = {k: v for k, v in now.items() if env.get(k) != v}
        diff.update({k: None for k in env if k not in now})
        if diff:
            _ENVD_Z_ENV_ON_RESTORE[name] = diff
    return errs


def _envd_z_hide():
    """Takes every module the zygote imported out of sys.modules (and the
    ones whose import acts on IPython out of memory): returns them by name,
    and which names each one's import brought in."""
    hidden, children = {}, {}
    for name in list(sys.modules):
        if name in _envd_z_startup:
            continue
        mod = sys.modules.pop(name)
        if _envd_z_not_kept(name):
            parent, _, child = name.rpartition(".")
            if parent and getattr(sys.modules.get(parent) or hidden.get(parent), child, None) is mod:
                try:
                    delattr(sys.modules.get(parent) or hidden.get(parent), child)
                except AttributeError:
                    pass
            continue
        if mod is None:
            continue
        hidden[name] = mod
    for name in hidden:
        p = _envd_z_parent.get(name, "")
        # A module brought in by one that is not kept: by the zygote.
        while p and p not in hidden:
            p = _envd_z_parent.get(p, "")
        children.setdefault(p, set()).add(name)
    for importer, deps in _envd_z_deps.items():
        if importer in hidden:
            children.setdefault(importer, set()).update(d for d in deps if d in hidden and d != importer)
    return hidden, children


def _envd_z_recv(conn):
    """One request: (dict, [fds])."""
    fds = array.array("i")
    head, anc, _, _ = conn.recvmsg(4, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, typ, data in anc:
        if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    if len(head) != 4:
        for fd in fds:
            os.close(fd)
        raise EOFError("short request")
    (n,) = struct.unpack("!I", head)
    if n > 1 << 20:
        raise ValueError("request too large")
    body = b""
    while len(body) < n:
        chunk = conn.recv(n - len(body))
        if not chunk:
            raise EOFError("short request")
        body += chunk
    return json.loads(body), list(fds)


def _envd_z_send(conn, obj):
    body = json.dumps(obj).encode()
    conn.sendall(struct.pack("!I", len(body)) + body)


class _EnvdZygoteChild:
    """What the forked process runs once the zygote's frames are gone."""

    def __init__(self, req, fds, restorer, keep):
        self.req, self.fds, self.restorer, self.keep = req, fds, restorer, keep

    def run(self):
        req = self.req
        # Descriptors: the request's three as 0, 1, 2; nothing else.
        for i, fd in enumerate(self.fds):
            if fd != i:
                os.dup2(fd, i)
        # The zygote's own are closed; what the preload opened stays open,
        # as in a started kernel (IPython keeps /dev/null open, for one).
        top = os.sysconf("SC_OPEN_MAX")
        top = top if top > 0 else 65536
        lo = 3
        for fd in sorted(self.keep) + [top]:
            if fd >= lo:
                os.closerange(lo, fd)
                lo = fd + 1
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        argv = req["argv"]  # [python, options..., -m, module, args...]
        m = argv.index("-m")
        sys.orig_argv[:] = argv
        sys.argv[:] = ["-m"] + argv[m + 2 :]
        if not sys.flags.safe_path:  # -P: nothing prepended
            sys.path[0] = os.getcwd()
        _envd_z_cmdline(argv)
        main = type(sys)("__main__")
        main.__annotations__ = {}
        main.__builtins__ = sys.modules["builtins"]
        sys.modules["__main__"] = main
        # Whatever the zygote imported after its preload is hidden too.
        restorer = self.restorer
        for name in list(sys.modules):
            if name not in _envd_z_startup:
                mod = sys.modules.pop(name)
                if mod is not None and name not in restorer.hidden:
                    restorer.add(name, mod)
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _EnvdZygoteTracker)]
        sys.meta_path.insert(0, restorer)
        __import__("runpy")  # as `python3 -m` does, with what it brings in
        mt = restorer.hidden.get("numpy.random.mtrand")
        bg = restorer.hidden.get("numpy.random._mt19937")
        if mt is not None and bg is not None:
            mt._rand._bit_generator.state = bg.MT19937().state
        runpy._run_module_as_main(argv[m + 1], alter_argv=True)


def _envd_z_cmdline(argv):
    """Makes /proc/self/cmdline the kernel's command: written over the
    zygote's arguments (the launcher pads them), the rest zeroed, and cut
    at its end where the kernel allows it (CAP_SYS_RESOURCE)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2 :].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end: fields 48 and 49
        want = b"\0".join(os.fsencode(a) for a in argv) + b"\0"
        if len(want) > end - start:
            return
        ctypes.memmove(start, want + b"\0" * (end - start - len(want)), end - start)
        ctypes.CDLL(None, use_errno=True).prctl(35, 9, ctypes.c_ulong(start + len(want)), 0, 0)  # PR_SET_MM, PR_SET_MM_ARG_END
    except (OSError, ValueError, IndexError, AttributeError):
        pass


def _envd_z_serve(path, restorer, keep):
    """Serves fork requests until the server is gone; returns, in a forked
    child, what it runs."""
    parent = os.getppid()
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # The socket gets its name once it listens: a launch waits for the
    # name, and a connect between bind and listen would be refused.
    lsock.bind(path + ".new")
    lsock.listen(16)
    os.rename(path + ".new", path)
    rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wfd)
    signal.signal(signal.SIGCHLD, lambda *a: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # an interrupt is for kernels
    sel = selectors.DefaultSelector()
    sel.register(lsock, selectors.EVENT_READ, "listen")
    sel.register(rfd, selectors.EVENT_READ, "signal")
    kids = {}  # pid -> connection, once its client acknowledged the pid
    pending = {}  # connection -> pid, until then
    print("envd zygote: ready (pid %d)" % os.getpid(), file=sys.stderr, flush=True)
    while os.getppid() == parent:
        for key, _ in sel.select(0.5):
            what = key.data
            if what == "listen":
                conn, _ = lsock.accept()
                conn.settimeout(5)
                try:
                    req, fds = _envd_z_recv(conn)
                except (OSError, ValueError, EOFError) as e:
                    print("envd zygote: bad request: %r" % (e,), file=sys.stderr, flush=True)
                    conn.close()
                    continue
                try:
                    if len(fds) != 3:
                        raise ValueError("want 3 descriptors, got %d" % len(fds))
                    sys.stdout.flush()
                    sys.stderr.flush()
                    # The child says (closing its end) that it is in its
                    # own session: the pid the client gets names a group
                    # of its own, never the zygote's.
                    in_session, told = os.pipe2(os.O_CLOEXEC)
                    pid = os.fork()
                except (OSError, ValueError) as e:
                    for fd in fds:
                        os.close(fd)
                    _envd_z_send(conn, {"error": str(e)})
                    conn.close()
                    continue
                if pid == 0:
                    os.setsid()
                    os.close(told)
                    os.close(in_session)
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    signal.signal(signal.SIGINT, signal.default_int_handler)
                    sel.close()
                    lsock.close()
                    conn.close()
                    for c in list(kids.values()) + list(pending):
                        c.close()
                    os.close(rfd)
                    os.close(wfd)
                    return _EnvdZygoteChild(req, fds, restorer, keep)
                for fd in fds:
                    os.close(fd)
                os.close(told)
                while True:
                    try:
                        os.read(in_session, 1)  # EOF once the child is in its session
                        break
                    except InterruptedError:
                        continue
                os.close(in_session)
                try:
                    _envd_z_send(conn, {"pid": pid})
                except OSError:
                    pass
                pending[conn] = pid
                conn.setblocking(False)
                sel.register(conn, selectors.EVENT_READ, "ack")
            elif what == "ack":
                conn = key.fileobj
                try:
                    data = conn.recv(64)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                pid = pending.pop(conn, None)
                sel.unregister(conn)
                if data and pid is not None:
                    kids[pid] = conn  # its exit goes there
                else:  # the client is gone: nobody to tell
                    conn.close()
                    if pid is not None:
                        kids[pid] = None
                _envd_z_reap(kids)
            elif what == "signal":
                try:
                    os.read(rfd, 512)
                except BlockingIOError:
                    pass
                _envd_z_reap(kids)
    print("envd zygote: the server is gone", file=sys.stderr, flush=True)
    sys.exit(0)


def _envd_z_reap(kids):
    for pid in list(kids):
        before = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        try:
            got, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            got, status = pid, 0
        if got == 0:
            continue
        conn = kids.pop(pid)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.waitstatus_to_exitcode(status)
        if conn is not None:
            conn.setblocking(True)
            conn.settimeout(1)
            try:
                _envd_z_send(conn, {"exit": code, "reaped_ns": before})
            except OSError:
                pass
            conn.close()


def _envd_z_fds():
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            os.fstat(int(fd))  # not the listing's own, closed by now
        except OSError:
            continue
        out.append(int(fd))
    return out


def _envd_z_main():
    path = sys.argv[1]  # sys.argv[2] names the module of the kernels it forks (ipykernel_launcher)
    preload = [a for a in sys.argv[3:] if not a.startswith("-")]  # the padding is not a module
    before = set(_envd_z_fds())
    for e in _envd_z_preload(preload):
        print("envd zygote: preload %s" % e, file=sys.stderr, flush=True)
    # Exercise what serving uses, so that nothing is imported later.
    a, b = socket.socketpair()
    socket.send_fds(a, [b"x"], [0])
    for fd in socket.recv_fds(b, 1, 1)[1]:
        os.close(fd)
    a.close()
    b.close()
    json.loads(json.dumps({"x": [1]}))
    _envd_z_builtins.__import__ = _envd_z_orig_import
    keep = set(_envd_z_fds()) - before
    hidden, children = _envd_z_hide()
    restorer = _EnvdZygoteRestorer(hidden, children)
    del hidden, children
    gc.collect()
    gc.freeze()  # no collection touches the shared objects again
    return _envd_z_serve(path, restorer, keep)


_envd_z_child = _envd_z_main()
del _envd_z_main
_envd_z_child.run()
