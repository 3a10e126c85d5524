"""envd's bash kernel: one persistent interactive bash behind an ipykernel Kernel.

How a cell runs
---------------
bash runs under a pty (pexpect) as `bash --noprofile --norc --noediting -i`
with PS1/PS2 empty, echo and onlcr off, history off, PAGER=cat, TERM=dumb.
A cell is written to a private file and run with

    __envd_c=$(< FILE); __envd_ret STATUS && :; eval "$__envd_c" < /dev/null

so state (variables, functions, cwd, exports) persists between cells, commands
that read stdin see EOF instead of hanging, and the code never goes through the
terminal's line discipline (no length limits, no quoting problems).
STATUS is the last status of the last cell that had code (not only
directives), so `$?` at the start of a cell is what it would be at a
terminal's next prompt (`false`, then `echo $?`, prints 1); `&& :` keeps a
carried failure from triggering `set -e` or an ERR trap.
PROMPT_COMMAND prints a per-kernel random marker with `$?` to /dev/tty when
bash is ready for the next command; everything before the marker is the cell's
output.

stdout and stderr
-----------------
bash's stdout is the pexpect pty; its stderr (`exec 2>` at start, so what the
cell's commands inherit, bash's own messages, `set -x` traces) is a second
pty of the same size, in raw mode, so both stay terminals (`[ -t 2 ]`,
progress bars and colours behave as in a terminal) and a user's `exec 2>FILE`
persists as before. Output is sent as `stream` messages named "stdout" and
"stderr" as soon as it arrives (coalesced per stream for at most 50 ms, a
change of stream sending what was pending first); when both have output at
once stdout goes first: between two ptys, order is kept only as far as
reads can tell it. A pty's output reaches its reader asynchronously, so
once the marker came the kernel writes a numbered sentinel to the stderr
pty itself and reads stderr up to it: every byte the cell's commands wrote
to stderr before they ended is in the cell's output.

Errors
------
The exit status of the cell's last command decides the reply:
  0              status "ok"
  N != 0         status "error", ename "BashError", evalue "exit code N",
                 traceback [] (nothing extra is printed: `false` only yields
                 the error record); also published on iopub as `error`
  interrupted    ename "KeyboardInterrupt", evalue "exit code 130" (or the
                 status bash reported)
  bash exited    (`exit N`, or killed): a fresh bash is started in the last
                 directory set by envd (or the kernel's start directory) with
                 the global env vars re-applied; a note goes to stderr; the
                 reply is ok for `exit`/`exit 0`, else BashError "exit code N"
                 (or "killed by signal S").
Silent executions send no streams; their errors still go to iopub.

Interrupt
---------
SIGINT to the kernel (Jupyter's interrupt) sends ^C to the pty, i.e. SIGINT to
the foreground job, like a terminal. If bash does not come back within 2 s the
foreground process group is killed with SIGKILL; if bash itself is stuck after
5 more seconds it is restarted.

envd directives
---------------
Leading lines of a cell of the form `#%envd VERB ARG` are handled by the
kernel (for any other bash they are plain comments). ARG is JSON, so values
never need shell quoting by the caller:

  #%envd setenv {"FOO": "bar", "GONE": null}    per-execution: remember the
                                               original values, then set/unset
  #%envd setenv-global {"K": "v"}               persistent; also re-applied
                                               after a shell restart; becomes
                                               the value restoreenv returns to
  #%envd restoreenv                             put remembered originals back
  #%envd chdir "/home/user"                     cd there (and restart there)

The kernel turns them into bash (values quoted with shlex.quote) and runs them
before the rest of the cell. Names must be valid shell identifiers.

Introspection
-------------
complete_request completes the word at the cursor with compgen, run in the
shell: `$NAME` / `${NAME` against the shell's variables, a command's first word
against commands (aliases, functions, builtins, keywords, $PATH), anything else
against file names (directories get a trailing "/", special characters are
backslash-escaped). inspect_request answers `type` (and `help` for a builtin)
of the word at the cursor. Both leave `$?` as the user's last cell left it.

The user expression "envd:variables" (of any execute_request, silent ones
included) answers the shell variables the user set, as
application/vnd.envd.variables+json ({"variables", "total", "truncated"}):
the names that did not exist when this shell started (its environment and
bash's own), without envd's (global env vars set through directives, names
starting with "_") and without bash's dynamic ones (BASH_*, OLDPWD, COLUMNS,
LINES...); each {"name", "type" ("string", "integer", "array", "associative
array", with " (exported)" when exported), "repr" (the value, or the first
elements of an array, at most 200 characters), "len" (characters, or
elements)}. Functions are not variables. Other user expressions answer an
error.
"""

import codecs
import fcntl
import json
import os
import re
import secrets
import select
import shlex
import shutil
import signal
import struct
import tempfile
import termios
import time
import tty

import pexpect
from ipykernel.kernelbase import Kernel

from envd_kernel.replies import Replies

__version__ = "1.0.0"

_DIRECTIVE = re.compile(r"^#%envd[ \t]+([A-Za-z-]+)(?:[ \t]+(.*?))?[ \t]*$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FLUSH_AFTER = 0.05
_FLUSH_SIZE = 32 * 1024
_START_TIMEOUT = 30.0
_ROWS, _COLS = 24, 200
_SYNC_WAIT = 5.0  # at most this long for the stderr sentinel
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_VARIABLES_EXPR = "envd:variables"
_VARIABLES_MIME = "application/vnd.envd.variables+json"
_DYNAMIC = {"OLDPWD", "COLUMNS", "LINES", "PIPESTATUS", "OPTARG", "COMP_WORDBREAKS", "HISTCMD"}
_MAX_MATCHES = 1000
_WORD = re.compile(r"""[^\s;|&()<>`"'=]*$""")
_WORD_AFTER = re.compile(r"""^[^\s;|&()<>`"'=]*""")
_SEP = "\x1f"


def _reset_signals():
    # ipykernel ignores SIGINT and Python ignores SIGPIPE; an ignored signal
    # stays ignored across exec, so bash's jobs would survive ^C and `yes | head`
    # would complain about EPIPE. Give the shell default dispositions.
    for name in ("SIGINT", "SIGPIPE", "SIGQUIT", "SIGTERM", "SIGXFSZ", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None:
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                pass


def _sweep_stale_dirs():
    """Remove cell dirs of dead bash kernels (a killed kernel cannot clean up)."""
    tmp = tempfile.gettempdir()
    try:
        names = os.listdir(tmp)
    except OSError:
        return
    for name in names:
        m = re.match(r"envd-bash-(\d+)-", name)
        if not m or int(m.group(1)) == os.getpid():
            continue
        path = os.path.join(tmp, name)
        try:
            if os.stat(path).st_uid != os.getuid():
                continue
            os.kill(int(m.group(1)), 0)
            continue  # still running
        except ProcessLookupError:
            pass
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)


class DirectiveError(ValueError):
    pass


class _Coalescer:
    """Output of one run, sent as (stream name, text) in order: text of one
    stream is held up to _FLUSH_AFTER (or _FLUSH_SIZE); text of the other
    stream sends it first."""

    def __init__(self, emit):
        self._emit = emit
        self.name = None
        self.text = ""
        self.since = None

    def add(self, name, text):
        if not text:
            return
        if self.text and name != self.name:
            self.flush()
        if not self.text:
            self.name, self.since = name, time.monotonic()
        self.text += text

    def due(self, now):
        return bool(self.text) and (now - self.since >= _FLUSH_AFTER or len(self.text) >= _FLUSH_SIZE)

    def deadline(self):
        return None if not self.text else self.since + _FLUSH_AFTER

    def flush(self):
        if self.text:
            name, text = self.name, self.text
            self.name, self.text, self.since = None, "", None
            self._emit(name, text)


class BashKernel(Replies, Kernel):
    implementation = "envd_bash_kernel"
    implementation_version = __version__
    language = "bash"
    language_version = ""
    language_info = {
        "name": "bash",
        "codemirror_mode": "shell",
        "mimetype": "text/x-sh",
        "file_extension": ".sh",
    }
    banner = "envd bash kernel"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._token = "envd" + secrets.token_hex(8)
        self._marker = re.compile("\x01" + self._token + r":(\d+)\x02")
        _sweep_stale_dirs()
        self._tmpdir = tempfile.mkdtemp(prefix="envd-bash-%d-" % os.getpid())
        self._cell_path = os.path.join(self._tmpdir, "cell")
        self._cwd = os.getcwd()
        self._global_env = {}  # name -> value or None (unset); survives restarts
        self._baseline = set()  # variable names when the shell started
        # $? at the start of the next cell: the last status of the last
        # cell that had code.
        self._status = 0
        self._open_stderr()
        self._child = None
        self._start_bash()
        try:
            self.language_version = self._run_quiet('printf %s "$BASH_VERSION"')
        except Exception:
            self.language_version = ""

    # ------------------------------------------------------------------
    # stderr pty

    def _open_stderr(self):
        """Open the pty bash's stderr goes to (kept across bash restarts)."""
        master, slave = os.openpty()
        tty.setraw(slave)  # no echo, "\n" stays "\n"
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", _ROWS, _COLS, 0, 0))
        os.set_blocking(master, False)
        # Only this descriptor: bash opens the pty by its path.
        os.set_blocking(slave, False)
        self._err_master, self._err_slave = master, slave
        self._err_path = os.ttyname(slave)
        self._err_decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._err_sentinel = re.compile("\x01" + self._token + r"e(\d+)\x02")
        self._err_sync = 0

    def _close_stderr(self):
        for fd in (self._err_master, self._err_slave):
            try:
                os.close(fd)
            except OSError:
                pass

    def _read_stderr(self):
        """What the stderr pty has now, decoded ("" if nothing)."""
        chunks = []
        while True:
            try:
                data = os.read(self._err_master, 65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
            if not data:
                break
            chunks.append(self._err_decoder.decode(data))
        return "".join(chunks)

    def _write_sentinel(self, n):
        """Write sentinel n to the stderr pty; False if it is full for now."""
        try:
            os.write(self._err_slave, ("\x01%se%d\x02" % (self._token, n)).encode())
            return True
        except (BlockingIOError, InterruptedError):
            return False

    def _split_stderr(self, buf, n):
        """(stderr text, whether sentinel n came, rest kept for the next
        read). Other (stale) sentinels are dropped."""
        out = []
        seen = False
        while True:
            m = self._err_sentinel.search(buf)
            if not m:
                break
            out.append(buf[: m.start()])
            if int(m.group(1)) == n:
                seen = True
            buf = buf[m.end():]
        i = buf.rfind("\x01")
        rest = ""
        if i != -1:
            tail = buf[i:]
            prefix = "\x01" + self._token + "e"
            if prefix.startswith(tail) or (tail.startswith(prefix) and tail[len(prefix):].isdigit()):
                buf, rest = buf[:i], tail
        out.append(buf)
        return "".join(out), seen, rest

    # ------------------------------------------------------------------
    # bash process

    def _child_env(self):
        env = dict(os.environ)
        # The kernelspec puts our package dir on PYTHONPATH; don't leak it.
        paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        paths = [p for p in paths if os.path.abspath(p) != _PACKAGE_PARENT]
        if paths:
            env["PYTHONPATH"] = os.pathsep.join(paths)
        else:
            env.pop("PYTHONPATH", None)
        env["PAGER"] = "cat"
        env["GIT_PAGER"] = "cat"
        env["TERM"] = "dumb"
        for name, value in self._global_env.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        return env

    def _start_bash(self):
        cwd = self._cwd if os.path.isdir(self._cwd) else os.getcwd()
        self._child = pexpect.spawn(
            "/bin/bash",
            ["--noprofile", "--norc", "--noediting", "-i"],
            env=self._child_env(),
            cwd=cwd,
            echo=False,
            encoding="utf-8",
            codec_errors="replace",
            dimensions=(_ROWS, _COLS),
            timeout=None,
            preexec_fn=_reset_signals,
        )
        printf = "printf '\\001" + self._token + ":%d\\002' \"$rc\""
        setup = (
            "exec 2>" + shlex.quote(self._err_path) + "; "
            "set +o history; unset HISTFILE; PS1=; PS2=; PS0=; "
            "stty -echo -onlcr 2>/dev/null; "
            "declare -A __envd_saved=(); "
            '__envd_ret() { return "$1"; }; '
            "__envd_prompt() { local rc=$?; unset __envd_c; "
            "{ " + printf + " >/dev/tty; } 2>/dev/null || " + printf + "; }; "
            "PROMPT_COMMAND=__envd_prompt"
        )
        # What an earlier shell's commands left on stderr is not this one's.
        self._read_stderr()
        self._err_decoder.reset()
        self._child.sendline(setup)
        deadline = time.monotonic() + _START_TIMEOUT
        buf = ""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError("bash did not start within %.0fs" % _START_TIMEOUT)
            try:
                buf += self._child.read_nonblocking(65536, timeout=min(remaining, 0.5))
            except pexpect.TIMEOUT:
                continue
            except pexpect.EOF:
                raise RuntimeError("bash exited during start: %r" % (buf[-500:],))
            if self._marker.search(buf):
                break
        try:
            self._baseline = set(self._run_quiet("compgen -v").split())
        except Exception:
            self._baseline = set()

    def _stop_bash(self):
        child, self._child = self._child, None
        if child is None:
            return
        try:
            child.close(force=True)
        except Exception:
            pass

    def _restart_bash(self):
        self._stop_bash()
        self._start_bash()

    def _foreground_pgrp(self):
        try:
            return os.tcgetpgrp(self._child.child_fd)
        except OSError:
            return None

    # ------------------------------------------------------------------
    # running code

    def _write_cell(self, script):
        fd = os.open(self._cell_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(script)
            if not script.endswith("\n"):
                f.write("\n")

    def _run(self, script, on_output):
        """Run script in bash; on_output(name, text) gets its output, name
        "stdout" or "stderr". Returns (status, how) where how is one of
        "done", "interrupted", "interrupted-exited" or
        ("exited", exitstatus, signalstatus)."""
        if self._child is None or not self._child.isalive():
            self._restart_bash()
        self._write_cell(script)
        self._child.sendline('__envd_c=$(< %s); __envd_ret %d && :; eval "$__envd_c" < /dev/null'
                             % (shlex.quote(self._cell_path), self._status))

        out = _Coalescer(on_output)
        buf = ""  # stdout not yet sent: may end in part of the marker
        ebuf = ""  # the same for stderr and the sentinel
        interrupted = False
        since_intr = ""  # output (of either stream) that arrived after the interrupt
        kill_at = None
        restart_at = None
        result = None  # (status, how) once bash is done with the cell
        sync = None  # the sentinel awaited on stderr once it is
        sent = False
        sync_until = None
        while True:
            try:
                now = time.monotonic()
                if result is not None:
                    if not sent:
                        sent = self._write_sentinel(sync)
                    if sync is None or now >= sync_until:
                        break
                if out.due(now) and not (interrupted and since_intr == "\n" and out.text == "\n"):
                    out.flush()
                timeout = 0.2
                if out.deadline() is not None:
                    timeout = max(0.0, min(timeout, out.deadline() - now))
                if result is None:
                    if kill_at is not None and now >= kill_at:
                        kill_at = None
                        pgrp = self._foreground_pgrp()
                        if pgrp and pgrp != self._child.pid:
                            try:
                                os.killpg(pgrp, signal.SIGKILL)
                            except OSError:
                                pass
                    if restart_at is not None and now >= restart_at:
                        restart_at = None
                        try:
                            self._child.kill(signal.SIGKILL)
                        except OSError:
                            pass
                    fds = [self._child.child_fd, self._err_master]
                else:
                    timeout = max(0.0, min(timeout, sync_until - now, 0.0 if not sent else timeout))
                    fds = [self._err_master]
                ready = select.select(fds, [], [], timeout)[0]
                if result is None and self._child.child_fd in ready:
                    try:
                        chunk = self._child.read_nonblocking(65536, timeout=0)
                    except pexpect.TIMEOUT:
                        chunk = ""
                    except pexpect.EOF:
                        out.add("stdout", buf)
                        buf = ""
                        self._child.close(force=True)
                        exitstatus, signalstatus = self._child.exitstatus, self._child.signalstatus
                        self._child = None
                        if interrupted:
                            result = (130, "interrupted-exited")
                        else:
                            result = (None, ("exited", exitstatus, signalstatus))
                        chunk = ""
                    buf += chunk
                    text, status, buf = self._split(buf)
                    if text:
                        out.add("stdout", text)
                        if interrupted:
                            since_intr += text[:2]
                    if status is not None:
                        result = (status, "interrupted" if interrupted else "done")
                    if result is not None:
                        self._err_sync += 1
                        sync, sent = self._err_sync, False
                        sync_until = time.monotonic() + _SYNC_WAIT
                if self._err_master in ready:
                    ebuf += self._read_stderr()
                    text, seen, ebuf = self._split_stderr(ebuf, sync)
                    out.add("stderr", text)
                    if interrupted and text:
                        since_intr += text[:2]
                    if seen and sent:
                        sync = None
            except KeyboardInterrupt:
                if result is not None:
                    continue  # the cell is over
                interrupted = True
                try:
                    self._child.sendintr()
                except Exception:
                    pass
                now = time.monotonic()
                if kill_at is None and restart_at is None:
                    kill_at = now + 2.0
                    restart_at = now + 7.0
        if ebuf:
            out.add("stderr", ebuf)
        if interrupted and since_intr == "\n" and out.text.endswith("\n"):
            # bash prints a newline (on stderr) after a job dies of SIGINT
            # (a terminal would show "^C" before it); drop it.
            out.text = out.text[:-1]
        out.flush()
        return result

    def _split(self, buf):
        """(output text, status or None, rest kept for the next read)."""
        m = self._marker.search(buf)
        if m:
            return buf[: m.start()], int(m.group(1)), ""
        i = buf.rfind("\x01")
        if i != -1:
            tail = buf[i:]
            prefix = "\x01" + self._token + ":"
            if prefix.startswith(tail) or (
                tail.startswith(prefix) and tail[len(prefix):].isdigit()
            ):
                return buf[:i], None, tail
        return buf, None, ""

    def _run_quiet(self, script):
        """Run internal script: its stdout, its stderr dropped; $? as the
        last cell left it."""
        out = []
        self._run(script, lambda name, text: out.append(text) if name == "stdout" else None)
        return "".join(out)

    # ------------------------------------------------------------------
    # envd directives

    def _split_directives(self, code):
        lines = code.split("\n")
        directives = []
        i = 0
        while i < len(lines):
            line = lines[i].rstrip("\r")
            if not line.startswith("#%envd"):
                break
            m = _DIRECTIVE.match(line)
            if not m:
                raise DirectiveError("malformed envd directive: %r" % (line[:80],))
            directives.append((m.group(1), m.group(2)))
            i += 1
        return directives, "\n".join(lines[i:])

    @staticmethod
    def _env_arg(arg):
        try:
            spec = json.loads(arg or "")
        except ValueError as e:
            raise DirectiveError("envd directive: invalid JSON: %s" % e)
        if not isinstance(spec, dict):
            raise DirectiveError("envd directive: expected a JSON object")
        for name, value in spec.items():
            if not _NAME.match(name):
                raise DirectiveError("invalid environment variable name for bash: %r" % (name,))
            if value is not None and (not isinstance(value, str) or "\0" in value):
                raise DirectiveError("invalid value for environment variable %r" % (name,))
        return spec

    def _directives_to_bash(self, directives):
        out = []
        ensure = "declare -p __envd_saved >/dev/null 2>&1 || declare -A __envd_saved=()"
        for verb, arg in directives:
            if verb == "setenv":
                spec = self._env_arg(arg)
                out.append(ensure)
                for name, value in spec.items():
                    out.append(
                        '[[ -v __envd_saved[%s] ]] || { if [[ -v %s ]]; then __envd_saved[%s]="s$%s"; '
                        "else __envd_saved[%s]=u; fi; }" % (name, name, name, name, name)
                    )
                    out.append(self._assign(name, value))
            elif verb == "setenv-global":
                spec = self._env_arg(arg)
                out.append(ensure)
                for name, value in spec.items():
                    saved = "u" if value is None else shlex.quote("s" + value)
                    out.append("[[ -v __envd_saved[%s] ]] && __envd_saved[%s]=%s" % (name, name, saved))
                    out.append(self._assign(name, value))
                    self._global_env[name] = value
            elif verb == "restoreenv":
                if arg:
                    raise DirectiveError("envd directive restoreenv takes no argument")
                out.append(
                    "if declare -p __envd_saved >/dev/null 2>&1; then "
                    'for __envd_k in "${!__envd_saved[@]}"; do '
                    "__envd_v=${__envd_saved[$__envd_k]}; "
                    'if [[ $__envd_v == s* ]]; then export "$__envd_k=${__envd_v:1}"; '
                    'else unset "$__envd_k"; fi; done; '
                    "unset __envd_k __envd_v; __envd_saved=(); fi"
                )
            elif verb == "chdir":
                try:
                    path = json.loads(arg or "")
                except ValueError as e:
                    raise DirectiveError("envd directive chdir: invalid JSON: %s" % e)
                if not isinstance(path, str) or path == "" or "\0" in path:
                    raise DirectiveError("envd directive chdir: expected a non-empty JSON string")
                out.append("cd -- %s" % shlex.quote(path))
                self._cwd = path
            else:
                raise DirectiveError("unknown envd directive %r" % (verb,))
        return "".join(line + "\n" for line in out)

    @staticmethod
    def _assign(name, value):
        if value is None:
            return "unset %s" % name
        return "export %s=%s" % (name, shlex.quote(value))

    # ------------------------------------------------------------------
    # Kernel API

    def _stream(self, name, text, silent):
        if not silent and text:
            self.send_response(self.iopub_socket, "stream", {"name": name, "text": text})

    def do_execute(
        self,
        code,
        silent,
        store_history=True,
        user_expressions=None,
        allow_stdin=False,
        *,
        cell_id=None,
    ):
        reply = self._execute(code, silent)
        if user_expressions and reply.get("status") == "ok":
            reply["user_expressions"] = {k: self._user_expression(v) for k, v in user_expressions.items()}
        return reply

    def _execute(self, code, silent):
        try:
            directives, body = self._split_directives(code)
            script = self._directives_to_bash(directives)
        except DirectiveError as e:
            return self._error("EnvdDirectiveError", str(e))
        # Only a cell with code sets the status the next one starts with;
        # its code starts with the last one's, whatever directives ran.
        has_code = bool(body.strip())
        if script and has_code:
            script += "__envd_ret %d && :\n" % self._status
        script += body
        if not script.strip():
            return self._ok()

        def on_output(name, text):
            self._stream(name, text, silent)

        try:
            status, how = self._run(script, on_output)
        except KeyboardInterrupt:  # arrived outside the read loop
            return self._error("KeyboardInterrupt", "interrupted")
        except Exception as e:
            self._stop_bash()
            return self._error("BashKernelError", "%s: %s" % (type(e).__name__, e))

        if has_code:
            if isinstance(how, tuple):
                _, exitstatus, signalstatus = how
                self._status = 128 + signalstatus if signalstatus else (exitstatus or 0) & 0xFF
            else:
                self._status = status
        if isinstance(how, tuple):  # bash exited
            _, exitstatus, signalstatus = how
            try:
                self._start_bash()
            except Exception as e:
                return self._error("BashKernelError", "restarting bash: %s" % e)
            if signalstatus:
                what = "killed by signal %d" % signalstatus
            else:
                what = "exit code %d" % (exitstatus or 0)
            self._stream("stderr", "[bash exited (%s); started a new shell]\n" % what, silent)
            if signalstatus or exitstatus:
                return self._error("BashError", what)
            return self._ok()
        if how == "interrupted-exited":
            self._start_bash()
            return self._error("KeyboardInterrupt", "exit code 130")
        if how == "interrupted":
            return self._error("KeyboardInterrupt", "exit code %d" % status)
        if status != 0:
            return self._error("BashError", "exit code %d" % status)
        return self._ok()

    # ------------------------------------------------------------------
    # Introspection

    def _query(self, script):
        """Run internal script, its stdout captured. It leaves $? (the next
        cell's) as it was: only cells with code set it."""
        return self._run_quiet(script)

    def _user_expression(self, expr):
        if expr.strip() != _VARIABLES_EXPR:
            return {"status": "error", "ename": "UserExpressionError",
                    "evalue": "envd's bash kernel evaluates only %r" % _VARIABLES_EXPR, "traceback": []}
        try:
            data = self._variables()
        except Exception as e:
            return {"status": "error", "ename": type(e).__name__, "evalue": str(e), "traceback": []}
        return {"status": "ok", "data": {_VARIABLES_MIME: data}, "metadata": {}}

    def _variables(self, limit=1000, repr_len=200):
        names = sorted(
            n for n in set(self._query("compgen -v").split())
            if _NAME.match(n) and not n.startswith("_") and n not in self._baseline
            and n not in self._global_env and n not in _DYNAMIC and not n.startswith("BASH_")
        )
        total = len(names)
        names = names[:limit]
        out = []
        if names:
            script = (
                "for __envd_n in %s; do declare -n __envd_r=$__envd_n; "
                "if [[ ${__envd_r@a} == *[aA]* ]]; then "
                "printf '%%s\\x1f%%s\\x1f%%s\\x1f' \"$__envd_n\" \"${__envd_r@a}\" \"${#__envd_r[@]}\"; "
                "printf '%%q ' \"${__envd_r[@]:0:12}\"; "
                "else printf '%%s\\x1f%%s\\x1f%%s\\x1f%%s' \"$__envd_n\" \"${__envd_r@a}\" \"${#__envd_r}\" \"${__envd_r:0:%d}\"; "
                "fi; printf '\\x1e'; unset -n __envd_r; done; unset __envd_n"
            ) % (" ".join(names), repr_len)
            raw = self._query(script)
            for rec in raw.split("\x1e"):
                parts = rec.split(_SEP, 3)
                if len(parts) != 4:
                    continue
                name, attrs, n, value = parts
                if "A" in attrs:
                    typ = "associative array"
                    value = "(" + value.strip() + ("..." if int(n or 0) > 12 else "") + ")"
                elif "a" in attrs:
                    typ = "array"
                    value = "(" + value.strip() + ("..." if int(n or 0) > 12 else "") + ")"
                elif "i" in attrs:
                    typ = "integer"
                else:
                    typ = "string"
                    if int(n or 0) > repr_len:
                        value = value[: repr_len - 3] + "..."
                if "x" in attrs:
                    typ += " (exported)"
                if len(value) > repr_len:
                    value = value[: repr_len - 3] + "..."
                out.append({"name": name, "type": typ, "repr": value, "len": int(n or 0)})
        return {"variables": out, "total": total, "truncated": total > limit}

    def _word_at(self, code, cursor_pos):
        before = code[:cursor_pos]
        start = cursor_pos - len(_WORD.search(before).group())
        end = cursor_pos + len(_WORD_AFTER.match(code[cursor_pos:]).group())
        return start, end

    def do_complete(self, code, cursor_pos):
        if cursor_pos is None:
            cursor_pos = len(code)
        before = code[:cursor_pos]
        word = _WORD.search(before).group()
        start = cursor_pos - len(word)
        head = before[:start].rstrip()
        if "$" in word:
            i = word.rindex("$")
            prefix = word[i + 1:]
            brace = prefix.startswith("{")
            if brace:
                prefix = prefix[1:]
            start += i + 1 + (1 if brace else 0)
            names = self._query("compgen -v -- %s" % shlex.quote(prefix)).split()
            matches = [n for n in names if not n.startswith("__envd")]
        elif (not head or head[-1] in ";|&(`{" or head.endswith("then") or head.endswith("do")) and "/" not in word:
            matches = self._query("compgen -abck -A function -- %s" % shlex.quote(word)).split("\n")
            matches = [m for m in matches if m and not m.startswith("__envd")]
        else:
            script = (
                "mapfile -t __envd_c < <(compgen -f -- %s); "
                "for __envd_f in \"${__envd_c[@]}\"; do if [[ -d $__envd_f ]]; then printf '%%s/\\n' \"$__envd_f\"; "
                "else printf '%%s\\n' \"$__envd_f\"; fi; done; unset __envd_c __envd_f"
            ) % shlex.quote(word)
            matches = [re.sub(r"""([\s;|&()<>`"'$\\*?\[\]!{}#])""", r"\\\1", m)
                       for m in self._query(script).split("\n") if m]
        seen = set()
        uniq = []
        for m in sorted(matches):
            if m not in seen:
                seen.add(m)
                uniq.append(m)
        return {"status": "ok", "matches": uniq[:_MAX_MATCHES], "cursor_start": start,
                "cursor_end": cursor_pos, "metadata": {}}

    def do_inspect(self, code, cursor_pos, detail_level=0, omit_sections=()):
        start, end = self._word_at(code, cursor_pos)
        word = code[start:end]
        if not word or word.startswith("$"):
            name = word.lstrip("${").rstrip("}")
            if not _NAME.match(name or "-"):
                return {"status": "ok", "found": False, "data": {}, "metadata": {}}
            text = self._query("declare -p -- %s 2>/dev/null" % name)
        else:
            q = shlex.quote(word)
            text = self._query("type -- %s 2>/dev/null && { [[ $(type -t -- %s) == builtin ]] && help -- %s; }"
                               % (q, q, q))
        if not text.strip():
            return {"status": "ok", "found": False, "data": {}, "metadata": {}}
        return {"status": "ok", "found": True, "data": {"text/plain": text}, "metadata": {}}

    def do_shutdown(self, restart):
        self._stop_bash()
        self._close_stderr()
        shutil.rmtree(self._tmpdir, ignore_errors=True)
        return {"status": "ok", "restart": restart}
