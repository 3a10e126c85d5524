"""Baseline for bench/code.mjs and bench/start.mjs: a kernel's own costs,
measured directly with Debian's jupyter_client (no Jupyter server, no envd).

Reads commands on stdin, one per line, and answers each with one line:
  connect PATH   connect a BlockingKernelClient to the kernel of connection
                 file PATH                                     -> "ok"
  launch         start a python3 kernel with KernelManager and connect to
                 it; it runs until quit             -> "ok RESOURCE_DIR" (of
                 the kernelspec it started, to check which one that was)
  rt CODE        execute CODE (JSON string) on it, as envd's execute_request
                 for a runCode does; wait for the shell reply and the iopub
                 idle of that request                          -> milliseconds
  start          start a python3 kernel with jupyter_client's KernelManager,
                 wait until it answers kernel_info, then shut it down
                                                               -> milliseconds (start to ready)
The environment (IPYTHONDIR, MATPLOTLIBRC, JUPYTER_PATH, ...) is the
caller's: give it the one envd's kernels get to start the same kernel as
envd, or a clean one (fresh IPYTHONDIR, JUPYTER_CONFIG_DIR and
JUPYTER_DATA_DIR, no JUPYTER_PATH) for a plain kernel from Debian's own
python3 kernelspec.
"""
import json
import sys
import time

from jupyter_client import BlockingKernelClient
from jupyter_client.manager import KernelManager

kc = None
launched = None  # the KernelManager of launch


def round_trip(code):
    # Both waits block on their own socket; whichever message comes second
    # ends the round trip, as in envd (an execution ends on reply and idle).
    # The request envd sends for a runCode: stored in the history (the
    # execution count goes up, In/Out are kept), no stdin, no
    # stop_on_error.
    t0 = time.perf_counter()
    msg_id = kc.execute(code, store_history=True, allow_stdin=False, stop_on_error=False)
    while kc.get_shell_msg(timeout=60)["parent_header"].get("msg_id") != msg_id:
        pass
    while True:
        m = kc.get_iopub_msg(timeout=60)
        if (m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "status"
                and m["content"]["execution_state"] == "idle"):
            break
    return (time.perf_counter() - t0) * 1000


def start():
    # Start to the first kernel_info reply. (BlockingKernelClient's
    # wait_for_ready would add a 0.2 s iopub flush.) The request is queued by
    # ZeroMQ until the kernel binds its shell socket.
    km = KernelManager(kernel_name="python3")
    t0 = time.perf_counter()
    km.start_kernel()
    c = km.client()
    c.start_channels()
    msg_id = c.kernel_info()
    while c.get_shell_msg(timeout=120)["parent_header"].get("msg_id") != msg_id:
        pass
    ms = (time.perf_counter() - t0) * 1000
    c.stop_channels()
    km.shutdown_kernel(now=True)
    return ms


for line in sys.stdin:
    cmd, _, arg = line.strip().partition(" ")
    if cmd == "connect":
        kc = BlockingKernelClient()
        kc.load_connection_file(arg)
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        # Other clients' traffic (envd's) also reaches our iopub: start clean.
        while True:
            try:
                kc.get_iopub_msg(timeout=0.2)
            except Exception:
                break
        print("ok", flush=True)
    elif cmd == "launch":
        launched = KernelManager(kernel_name="python3")
        launched.start_kernel()
        kc = launched.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=120)
        print("ok " + launched.kernel_spec.resource_dir, flush=True)
    elif cmd == "rt":
        print("%.3f" % round_trip(json.loads(arg)), flush=True)
    elif cmd == "start":
        print("%.3f" % start(), flush=True)
    elif cmd == "quit":
        break

if kc is not None:
    kc.stop_channels()
if launched is not None:
    launched.shutdown_kernel(now=True)
# Drop them now, while logging still works (their __del__ logs).
kc = launched = None
