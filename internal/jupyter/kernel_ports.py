# Kernels' ports, chosen outside the system's ephemeral range. envd writes
# this ahead of envd_jupyter_server.py (the early kernel's ports) and of the
# server's config (every other kernel's, through LocalPortCache).
#
# jupyter_client picks a kernel's five ports by binding port 0 and closing
# the socket: an ephemeral port, free again at once. The kernel binds it
# seconds later, once ipykernel is imported (many seconds on a loaded
# machine), and a restarted kernel binds the same ports again (jupyter_client
# 7 keeps them across restarts, even those of a kernel that never came up).
# Meanwhile any connect() on the machine may take the free port as its
# source port, and any bind to port 0 may get it: the kernel then dies with
# "Address already in use", and so does every restart, until the server
# gives the kernel up. The system hands out ports of
# net.ipv4.ip_local_port_range only; a port outside it is taken only by a
# program that names it, so that is where kernels' ports come from.
#
# Several Jupyter servers on one machine (a test suite's, or envds of
# several network namespaces' worth of tests) would still draw the same
# port now and then, each finding it free before either kernel bound it:
# an IRkernel then runs on without its shell socket (it only warns), and
# its creation waits for an answer that never comes. So a server reserves
# each port it hands out, for as long as its kernels may use it, by
# binding an abstract unix socket named after the port: the name is unique
# in the network namespace, and goes with the process that holds it.
import random as _envd_kp_random
import socket as _envd_kp_socket

_envd_kp_lowest = 20000  # below: ports users' own servers pick by habit


def _envd_kernel_port_range():
    """The range kernels' ports are drawn from, or None (use port 0)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        return None
    if lo - _envd_kp_lowest >= 4096:
        return (_envd_kp_lowest, lo - 1)
    if 65535 - hi >= 4096:
        return (hi + 1, 65535)
    return None


def _envd_port_free(ip, port):
    s = _envd_kp_socket.socket()
    try:
        # As ZeroMQ binds: a connection of an earlier kernel waiting out
        # TIME_WAIT on the port does not keep it.
        s.setsockopt(_envd_kp_socket.SOL_SOCKET, _envd_kp_socket.SO_REUSEADDR, 1)
        s.bind((ip, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


# port -> the abstract unix socket reserving it. One table per process:
# this file runs twice in the server's process (the early boot, then the
# server's config, each in a namespace of its own), so it lives on a module.
import sys as _envd_kp_sys
import types as _envd_kp_types

_envd_kp_module = _envd_kp_sys.modules.setdefault("envd_kernel_ports", _envd_kp_types.ModuleType("envd_kernel_ports"))
if not hasattr(_envd_kp_module, "reserved"):
    _envd_kp_module.reserved = {}
_envd_kp_reserved = _envd_kp_module.reserved


def _envd_reserve_port(port):
    """Whether this process now holds port's reservation (see above)."""
    if port in _envd_kp_reserved:
        return False
    s = _envd_kp_socket.socket(_envd_kp_socket.AF_UNIX, _envd_kp_socket.SOCK_STREAM)
    try:
        s.bind("\0envd-kernel-port-%d" % port)
    except OSError:
        s.close()
        return False
    _envd_kp_reserved[port] = s
    return True


def _envd_release_port(port):
    s = _envd_kp_reserved.pop(port, None)
    if s is not None:
        s.close()


def _envd_pick_port(ip, taken):
    """A free port for a kernel on ip, not in taken (ports set aside for
    other kernels of this server) nor reserved by another server, and
    reserved until _envd_release_port; port 0's pick if the range has none
    free."""
    r = _envd_kernel_port_range()
    if r is not None:
        for _ in range(256):
            port = _envd_kp_random.randint(r[0], r[1])
            if port in taken or not _envd_reserve_port(port):
                continue
            if _envd_port_free(ip, port):
                return port
            _envd_release_port(port)
    while True:
        s = _envd_kp_socket.socket()
        s.setsockopt(_envd_kp_socket.SOL_SOCKET, _envd_kp_socket.SO_LINGER, b"\0" * 8)
        s.bind((ip, 0))
        port = s.getsockname()[1]
        s.close()
        if port not in taken:
            return port
