# Written by envd into JUPYTER_CONFIG_DIR as envd_jupyter_server.py; envd
# runs the Jupyter server through it (python3 envd_jupyter_server.py ARGS is
# python3 -m jupyter_server ARGS).
#
# The server spends most of its start importing itself, and a kernel spends
# most of its own importing ipykernel: one after the other, they are envd's
# start to its first execution. So the kernel envd is about to ask for
# first (envd_early_kernel.json beside this file: its kernelspec and working
# directory) is launched here, before the server's imports, exactly as the
# server would launch it (the same command, environment, directory and
# session), and the server takes it over when asked for it (early_kernel.py,
# in the server's config). If that kernel's kernelspec is one whose kernels
# are forked (zygote_start.py, written ahead of this file), its zygote is
# started here instead, and the server's launch of the kernel forks it
# (zygote_launch.py). Anything unexpected, and the server just runs as
# usual: this file never stops it from starting.
import json as _json
import os as _os
import sys as _sys


def _envd_early_kernel():
    cfg = _os.environ.get("JUPYTER_CONFIG_DIR", "")
    runtime = _os.environ.get("JUPYTER_RUNTIME_DIR", "")
    if not cfg or not runtime:
        return None
    try:
        with open(_os.path.join(cfg, "envd_early_kernel.json")) as f:
            want = _json.load(f)
    except FileNotFoundError:
        return None
    name, cwd = want["name"].lower(), want["cwd"]

    # The kernelspec the server will find: the first directory of its
    # search path with the name (the path as early_kernel's neighbour in the
    # config, server_hooks, computes it).
    from jupyter_core.paths import jupyter_path

    ipython_dir = _os.environ.get("IPYTHONDIR") or _os.path.expanduser("~/.ipython")
    resource_dir = None
    for d in jupyter_path("kernels") + [_os.path.join(ipython_dir, "kernels")]:
        try:
            entries = _os.listdir(d)
        except OSError:
            continue
        for e in entries:
            p = _os.path.join(d, e)
            if e.lower() == name and _os.path.isfile(_os.path.join(p, "kernel.json")):
                resource_dir = p
                break
        if resource_dir:
            break
    if resource_dir is None:
        return None
    with open(_os.path.join(resource_dir, "kernel.json")) as f:
        spec = _json.load(f)
    provisioner = (spec.get("metadata") or {}).get("kernel_provisioner") or {}
    if provisioner.get("provisioner_name", "local-provisioner") != "local-provisioner":
        return None

    import re
    import string
    import subprocess
    import uuid

    # The command: jupyter_client's KernelManager.format_kernel_cmd.
    argv = list(spec["argv"])
    if argv and argv[0] in {"python", "python%i" % _sys.version_info[0], "python%i.%i" % _sys.version_info[:2]}:
        argv[0] = _sys.executable
    pat = re.compile(r"\{([A-Za-z0-9_]+)\}")

    def command(connection_file):
        ns = {"connection_file": connection_file, "prefix": _sys.prefix, "resource_dir": resource_dir, "cwd": cwd}
        return [pat.sub(lambda m: ns.get(m.group(1), m.group()), a) for a in argv]

    # The environment: the provisioner's pre_launch and _finalize_env.
    env = dict(_os.environ)
    env.update({k: string.Template(v).safe_substitute(env) for k, v in (spec.get("env") or {}).items()})
    if (spec.get("language") or "").lower().startswith("python"):
        env.pop("PYTHONEXECUTABLE", None)
    launched_env = dict(env)
    launched_env["JPY_PARENT_PID"] = str(_os.getpid())  # jupyter_client's launcher

    # A kernelspec whose kernels are forked (zygote_start.py): its zygote
    # instead, which forks the kernel when the server asks for it.
    zcfg = _envd_zs_config()
    if zcfg and name in {k.lower() for k in zcfg.get("kernels") or []} and _envd_zs_forkable(command("")):
        cmd = command("")
        proc, sock = _envd_zs_start(zcfg, cmd, launched_env, runtime)
        discard = float(want.get("discard_after") or 60)
        return None, {"key": _envd_zs_key(cmd, launched_env), "proc": proc, "sock": sock, "discard_after": discard}

    # Five distinct free ports, as the server picks them (kernel_ports.py,
    # written ahead of this file).
    ports = []
    for _ in range(5):
        ports.append(_envd_pick_port("127.0.0.1", set(ports)))
    info = {
        "shell_port": ports[0],
        "iopub_port": ports[1],
        "stdin_port": ports[2],
        "control_port": ports[3],
        "hb_port": ports[4],
        "ip": "127.0.0.1",
        "key": str(uuid.uuid4()),
        "transport": "tcp",
        "signature_scheme": "hmac-sha256",
        "kernel_name": name,
    }
    file = _os.path.join(runtime, "kernel-envd-early-%s.json" % uuid.uuid4().hex[:12])
    fd = _os.open(file, _os.O_WRONLY | _os.O_CREAT | _os.O_EXCL | _os.O_NOFOLLOW, 0o600)
    with _os.fdopen(fd, "w") as f:
        _json.dump(info, f, indent=1)

    cmd = command(_os.path.realpath(file))
    try:
        proc = subprocess.Popen([_os.path.expanduser(a) for a in cmd], stdin=subprocess.PIPE, cwd=cwd, env=launched_env, start_new_session=True)
    except OSError:
        _os.unlink(file)
        raise
    proc.stdin.close()
    return {
        "name": name,
        "cwd": cwd,
        "cmd": cmd,
        "env": env,
        "file": file,
        "info": info,
        "proc": proc,
        "discard_after": float(want.get("discard_after") or 60),
    }, None


try:
    _envd_early, _envd_zygote = _envd_early_kernel() or (None, None)
except Exception as _envd_err:  # the server starts regardless
    print("envd: no early kernel: %r" % (_envd_err,), file=_sys.stderr)
    _envd_early, _envd_zygote = None, None

import types as _types

_envd_module = _types.ModuleType("envd_early_kernel")
_envd_module.kernel = _envd_early
_envd_module.zygote = _envd_zygote
_sys.modules["envd_early_kernel"] = _envd_module

import runpy as _runpy

_sys.argv[0] = "jupyter_server"
_runpy.run_module("jupyter_server", run_name="__main__", alter_sys=True)
