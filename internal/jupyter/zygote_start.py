
# Written by envd ahead of both envd_jupyter_server.py (the early boot) and
# zygote_launch.py (in the server's config): how a zygote is started, for
# the kernel launches it may take (envd_zygote.json beside this file names
# the kernelspecs and what the zygote preloads; envd_zygote.py is the
# zygote). The early boot starts the default context's kernel's zygote, in
# place of the early kernel, as the server's imports begin; the server
# starts any other on its first launch.
import json as _envd_json_zs
import os as _envd_os_zs
import re as _envd_re_zs
import subprocess as _envd_subprocess_zs
import sys as _envd_sys_zs

# An interpreter option of one word (-P, -E, -s...).
_ENVD_ZS_FLAG = _envd_re_zs.compile(r"-[bBdEiIOPqsSuv]+")


def _envd_zs_config():
    """envd_zygote.json with the zygote's path, or None: no zygotes."""
    here = _envd_os_zs.environ.get("JUPYTER_CONFIG_DIR", "")
    try:
        with open(_envd_os_zs.path.join(here, "envd_zygote.json")) as f:
            cfg = _envd_json_zs.load(f)
    except (OSError, ValueError):
        return None
    cfg["program"] = _envd_os_zs.path.join(here, "envd_zygote.py")
    return cfg


def _envd_zs_forkable(cmd):
    """Whether a zygote can give the kernel of command cmd: [PYTHON (an
    absolute path), one-word options..., -m, ipykernel_launcher, ...]."""
    if not cmd or not _envd_os_zs.path.isabs(cmd[0]) or "-m" not in cmd:
        return False
    m = cmd.index("-m")
    return all(_ENVD_ZS_FLAG.fullmatch(a) for a in cmd[1:m]) and cmd[m + 1 : m + 2] == ["ipykernel_launcher"]


def _envd_zs_key(cmd, env):
    """The zygote of a launch: its interpreter and options, and the
    environment it is launched with."""
    return (tuple(cmd[: cmd.index("-m")]), tuple(sorted(env.items())))


def _envd_zs_start(cfg, cmd, env, runtime):
    """Starts the zygote for launches of cmd with env (as the kernel would be
    started: the same interpreter, options and environment, its own
    session); returns it and its socket's path."""
    python = cmd[: cmd.index("-m")]
    sock = _envd_os_zs.path.join(runtime, "envd-zygote-%d-%s.sock" % (_envd_os_zs.getpid(), _envd_os_zs.urandom(4).hex()))
    proc = _envd_subprocess_zs.Popen(
        # The padding leaves room for each kernel's own command line.
        list(python) + [cfg["program"], sock, "ipykernel_launcher"] + list(cfg.get("preload") or []) + ["-" * 1024],
        env=env,
        cwd="/",
        stdin=_envd_subprocess_zs.DEVNULL,
        start_new_session=True,
    )
    print("envd: zygote %d starting for %s" % (proc.pid, " ".join(python)), file=_envd_sys_zs.stderr)
    return proc, sock
