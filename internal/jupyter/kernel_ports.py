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


def _envd_pick_port(ip, taken):
    """A free port for a kernel on ip, not in taken (ports set aside for
    other kernels); port 0's pick if the range has none free."""
    r = _envd_kernel_port_range()
    if r is not None:
        for _ in range(256):
            port = _envd_kp_random.randint(r[0], r[1])
            if port not in taken and _envd_port_free(ip, port):
                return port
    while True:
        s = _envd_kp_socket.socket()
        s.setsockopt(_envd_kp_socket.SOL_SOCKET, _envd_kp_socket.SO_LINGER, b"\0" * 8)
        s.bind((ip, 0))
        port = s.getsockname()[1]
        s.close()
        if port not in taken:
            return port
