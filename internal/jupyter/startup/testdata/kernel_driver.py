"""Test driver: start a real Jupyter kernel, run cells, print what came back.

Used by startup_test.go. Reads one JSON object on stdin:

    {"kernel": "python3",            kernelspec name (found via JUPYTER_PATH)
     "cwd": "/tmp/x",                optional kernel working directory
     "startup_timeout": 60,
     "grace": 0.5,                   optional: keep reading this long after
                                     idle; such messages get "late": true
                                     (Deno sends console.log output after idle)
     "cells": [{"code": "...", "silent": false, "timeout": 60,
                "interrupt_after": 1.5,     optional: interrupt the kernel then
                "touch_on_stream": "/p",    optional: create /p on the first stream message
                "touch_on_streams": ["/a", "/b"]}]}  optional: create the n-th path on
                                                   the n-th stream message

and prints {"cells": [{"reply": {...execute_reply content...},
                       "messages": [{"msg_type", "content", "t"}],  iopub, in order
                       "error": "..." (driver-side problem, e.g. timeout)}]}
where t is the arrival time in seconds since the cell was sent.
With {"list": true} it prints {"kernels": [names...]} instead.
"""

import json
import os
import sys
import time


def main():
    req = json.load(sys.stdin)
    try:
        from jupyter_client import KernelManager
        from jupyter_client.kernelspec import KernelSpecManager
    except ImportError as e:
        print(json.dumps({"fatal": "import jupyter_client: %s" % e}))
        return 3

    if req.get("list"):
        print(json.dumps({"kernels": sorted(KernelSpecManager().find_kernel_specs())}))
        return 0

    kwargs = {}
    if req.get("cwd"):
        kwargs["cwd"] = req["cwd"]
    # jupyter_client picks free ports and the kernel binds them later:
    # another process on a busy machine can take one in between, and the
    # kernel dies at its start ("Address already in use"). Such a start is
    # tried again, on new ports.
    for attempt in range(1, 4):
        km = KernelManager(kernel_name=req["kernel"])
        km.start_kernel(**kwargs)
        kc = km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=req.get("startup_timeout", 60))
            break
        except RuntimeError as e:
            if "died" not in str(e) or attempt == 3:
                kc.stop_channels()
                km.shutdown_kernel(now=True)
                raise
            print("kernel_driver: the kernel died at its start (%s); starting another" % e, file=sys.stderr)
            kc.stop_channels()
            km.shutdown_kernel(now=True)
    out = {"cells": []}
    try:
        for cell in req["cells"]:
            out["cells"].append(run_cell(km, kc, cell, float(req.get("grace", 0))))
    finally:
        try:
            kc.stop_channels()
        finally:
            km.shutdown_kernel(now=True)
    print(json.dumps(out))
    return 0


def run_cell(km, kc, cell, grace):
    silent = bool(cell.get("silent", False))
    timeout = float(cell.get("timeout", 60))
    interrupt_after = cell.get("interrupt_after")
    start = time.monotonic()
    # stop_on_error=False: with True, ipykernel 6.17 aborts ("aborted"
    # reply) a request that reaches the kernel before its post-error
    # stop_aborting callback ran; sending the next cell right after an
    # error's reply/idle loses that race often, more so under load.
    msg_id = kc.execute(
        cell["code"],
        silent=silent,
        store_history=not silent,
        allow_stdin=False,
        stop_on_error=bool(cell.get("stop_on_error", False)),
    )
    result = {"messages": [], "reply": None}
    interrupted = False
    idle_at = None
    streams = 0
    while idle_at is None or time.monotonic() - idle_at < grace:
        now = time.monotonic()
        if now - start > timeout:
            result["error"] = "timeout waiting for idle"
            return result
        if interrupt_after is not None and not interrupted and now - start >= interrupt_after:
            km.interrupt_kernel()
            interrupted = True
        try:
            msg = kc.get_iopub_msg(timeout=0.05)
        except Exception:  # queue.Empty
            continue
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        t = time.monotonic() - start
        record = {"msg_type": msg["msg_type"], "content": msg["content"], "t": round(t, 4)}
        if idle_at is not None:
            record["late"] = True
        result["messages"].append(record)
        touch = cell.get("touch_on_stream")
        if touch and msg["msg_type"] == "stream" and not os.path.exists(touch):
            open(touch, "w").close()
        if msg["msg_type"] == "stream":
            streams += 1
            touches = cell.get("touch_on_streams") or []
            if streams <= len(touches):
                open(touches[streams - 1], "w").close()
        if msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle":
            idle_at = time.monotonic()
    while True:
        remaining = timeout - (time.monotonic() - start)
        if remaining <= 0:
            result["error"] = "timeout waiting for execute_reply"
            return result
        try:
            msg = kc.get_shell_msg(timeout=remaining)
        except Exception:
            result["error"] = "timeout waiting for execute_reply"
            return result
        if msg.get("parent_header", {}).get("msg_id") == msg_id:
            result["reply"] = msg["content"]
            return result


if __name__ == "__main__":
    sys.exit(main())
