"""envd's Java kernel: JShell (the JDK's jdk.jshell API) behind an ipykernel Kernel.

How a cell runs
---------------
The kernel starts one agent, EnvdJShell.java in this directory, with the
JDK's java launcher in source-file mode (no build step; the JDK is the one
of `jshell`, named by ENVD_JAVA in the kernelspec), or prebuilt when the
image has it (see "Prebuilt agent"). The agent holds one JShell whose user
code runs in a second JVM, JShell's default JDI execution engine (what the
jshell tool does); both JVMs start in the kernel's working directory
(user.dir), in a process group of their own. The agent starts while
Jupyter connects; the first execution waits for it (default imports done:
java.io, java.math, java.net, java.nio.file, java.util and its concurrent,
function, prefs, regex, stream packages, as in jshell).

A cell is sent whole; the agent splits it into snippets (statements,
declarations, expressions, imports) with JShell's source analysis and runs
them in order, stopping at the first error. State (variables, methods,
classes, imports) lives on between cells. See EnvdJShell.java for the
framed protocol.

Output and results
------------------
System.out and System.err of the user code are sent as they are written, as
"stdout" and "stderr" stream messages (coalesced for at most 50 ms). When
the cell's last snippet is an expression (`1 + 1`, `x`, `s.length()`), its
value is the execute_result, text/plain: the value's toString(), for
strings without jshell's quotes (`System.getProperty("FOO")` gives `bar`).

Errors
------
Tracebacks are lists of lines, each but the last ending in "\n" (envd and
E2B join them with "").
  exception      ename: the exception's class (java.lang.IllegalStateException,
                 or the simple name of a class declared in the kernel), evalue:
                 its message, traceback: "Name: message", "\\tat ..." frames
                 (JShell code as (#SNIPPET:LINE)), "Caused by: ..." chains
  compile error  ename CompilationException, evalue the first diagnostic,
                 traceback every error with its source line and a caret
  interrupted    ename KeyboardInterrupt
  JVM exited     (System.exit, killed): ename EnvdJavaKernelError; a new agent
                 is started and the silent executions so far (envd's working
                 directory and env property setup) are run again in it; the
                 rest of the state is lost (a note goes to stderr)
Silent executions send no streams nor results; their errors still go to iopub.

Interrupt
---------
SIGINT to the kernel (Jupyter's interrupt) asks the agent to stop the cell:
JShell's stop() ends the running snippet (repeated until the cell ends, as
the interrupt may come while a snippet is being compiled) and no further
snippet runs; the state stays. Code that cannot be stopped within 8 s
(stuck in native code) gets the agent and its JVM killed and restarted as
above.

Prebuilt agent
--------------
scripts/install-deps.sh builds, at image build, what each start would
otherwise redo: the agent compiled (envd-jshell.jar, so that no start
compiles EnvdJShell.java) and class data archives (CDS) of the JDK classes
the two JVMs load (agent.jsa, remote.jsa, so that they are mapped instead of
parsed), in PREBUILT/KEY, KEY being the SHA-256 of this EnvdJShell.java, a
NUL and the java launcher's resolved path (prebuilt_key): a directory built
from another version of the agent, or for another JDK, is never used. They
are used only when they and every directory above them are root's and no one
else can write them (a kernel of the sandbox user must not load classes that
user could plant; a sticky directory above them, such as /tmp, may be
writable by others). Each file is used when it is there: the jar alone, or
with the archives; the JVM itself checks that an archive fits it and ignores
one that does not (another build of the JDK). Without them the agent runs
from source. Each agent start looks again (install-deps.sh may have rebuilt
them meanwhile).

Env vars
--------
envd passes per-execution and sandbox-wide env vars to Java as system
properties (startup.SetEnvCode: plain Java, System.setProperty, restored
after the execution); a JVM's environment is fixed at its start.
"""

import codecs
import hashlib
import os
import select
import shutil
import signal
import stat
import struct
import subprocess
import time

from ipykernel.kernelbase import Kernel

from envd_kernel.replies import Replies

__version__ = "1.0.0"

_HERE = os.path.dirname(os.path.abspath(__file__))
_AGENT = os.path.join(_HERE, "EnvdJShell.java")
_PACKAGE_PARENT = os.path.dirname(_HERE)

_FLUSH_AFTER = 0.05
_FLUSH_SIZE = 32 * 1024
_START_TIMEOUT = 120.0
_STOP_GRACE = 8.0
_MAX_REPLAY = 10000

# The agent JVM compiles snippets (javac): C1 only warms it up fastest.
# No hsperfdata files in /tmp (-XX:-UsePerfData) for either JVM. The JVM's
# own warnings go to stderr: its stdout carries the frames.
# Its class path is its own directory (or the prebuilt jar), never the
# working directory (".", the default), which sandbox code may write.
_AGENT_OPTS = [
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-XX:-UsePerfData",
    "-Xss4m",
    "-Xlog:disable",
    "-Xlog:all=warning:stderr",
]
# Where scripts/install-deps.sh puts the prebuilt agent (see the top).
PREBUILT = "/var/cache/envd/java-kernel"
_PREBUILT_JAR = "envd-jshell.jar"
_PREBUILT_AGENT_CDS = "agent.jsa"
_PREBUILT_REMOTE_CDS = "remote.jsa"
# The JVM that runs user code.
# Its class path is the agent's directory too: the java default, ".", would
# let classes planted in the working directory stand in for the ones JShell
# generates (REPL.$JShell$N), loaded parent first, before any user code.
_REMOTE_OPTS = [
    "-cp",
    _HERE,
    "-XX:-UsePerfData",
    "-Dfile.encoding=UTF-8",
    "-Dsun.stdout.encoding=UTF-8",
    "-Dsun.stderr.encoding=UTF-8",
]


class AgentError(RuntimeError):
    pass


class AgentExited(AgentError):
    pass


class Interrupted(Exception):
    """SIGINT arrived while the kernel waited for the agent to start."""


def find_java():
    """The java launcher of the JDK that provides jshell."""
    java = os.environ.get("ENVD_JAVA")
    if java:
        return java
    jshell = shutil.which("jshell") or "/usr/bin/jshell"
    return os.path.join(os.path.dirname(os.path.realpath(jshell)), "java")


def prebuilt_key(source, java):
    """The name of the directory in PREBUILT for this agent source (bytes)
    and java launcher; scripts/install-deps.sh computes the same."""
    return hashlib.sha256(source + b"\0" + os.path.realpath(java).encode()).hexdigest()


def _root_only(path, is_dir):
    """Whether path (absolute, no links anywhere) and every directory above
    it are root's and no one else can change them: owned by root, not
    writable by group or others (but for a sticky directory above it, whose
    root-owned entries others can neither rename nor remove)."""
    if not os.path.isabs(path):
        return False
    parts = [p for p in os.path.normpath(path).split("/") if p]
    cur = "/"
    for i in range(len(parts) + 1):
        if i:
            cur = os.path.join(cur, parts[i - 1])
        try:
            st = os.lstat(cur)
        except OSError:
            return False
        last = i == len(parts)
        if st.st_uid != 0:
            return False
        if last and not is_dir:
            if not stat.S_ISREG(st.st_mode):
                return False
        elif not stat.S_ISDIR(st.st_mode):
            return False
        if st.st_mode & 0o022 and (last or not st.st_mode & stat.S_ISVTX):
            return False
    return True


def agent_argv(java, prebuilt=None):
    """The agent's command line: from the prebuilt jar, with the class data
    archives that are there, when PREBUILT (or prebuilt) holds them for
    this source and java and only root can change them; else from source."""
    prebuilt = prebuilt or PREBUILT
    jar = agent_cds = remote_cds = None
    try:
        with open(_AGENT, "rb") as f:
            d = os.path.join(prebuilt, prebuilt_key(f.read(), java))
    except OSError:
        d = None
    if d is not None and _root_only(d, True):
        def have(name):
            p = os.path.join(d, name)
            return p if _root_only(p, False) else None

        jar = have(_PREBUILT_JAR)
        agent_cds = jar and have(_PREBUILT_AGENT_CDS)
        remote_cds = have(_PREBUILT_REMOTE_CDS)
    argv = [java] + _AGENT_OPTS
    if jar:
        if agent_cds:
            argv.append("-XX:SharedArchiveFile=" + agent_cds)
        argv += ["-cp", jar, "EnvdJShell"]
    else:
        argv += ["-cp", _HERE, _AGENT]
    argv += _REMOTE_OPTS
    if remote_cds:
        argv.append("-XX:SharedArchiveFile=" + remote_cds)
    return argv


class Agent:
    """One EnvdJShell process (and its execution JVM)."""

    def __init__(self, argv, cwd, env):
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=cwd,
            env=env,
            # Jupyter signals the kernel's whole process group; the agent
            # gets interrupts as frames, and its group is killed as a unit.
            start_new_session=True,
        )
        self.fd = self.proc.stdout.fileno()
        self.buf = bytearray()
        self.version = None

    def send(self, kind, data=b""):
        try:
            self.proc.stdin.write(struct.pack(">cI", kind, len(data)) + data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as e:
            raise AgentExited("the Java agent is gone (%s)" % e)

    def read_frame(self, timeout):
        """Next (kind, data), or None after timeout seconds; AgentExited on EOF."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buf) >= 5:
                kind, n = struct.unpack(">cI", self.buf[:5])
                if len(self.buf) >= 5 + n:
                    data = bytes(self.buf[5 : 5 + n])
                    del self.buf[: 5 + n]
                    return kind, data
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            r, _, _ = select.select([self.fd], [], [], remaining)
            if not r:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise AgentExited(self._exit_text())
            self.buf += chunk

    def _exit_text(self):
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "the Java agent closed its output"
        if code < 0:
            return "the Java process was killed by signal %d" % -code
        if code == 3:
            return "the Java process exited (System.exit, or it crashed)"
        return "the Java process exited with code %d" % code

    def wait_ready(self, timeout, interrupted):
        deadline = time.monotonic() + timeout
        while self.version is None:
            if interrupted():
                raise Interrupted()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AgentError("the Java agent did not start within %.0fs" % timeout)
            frame = self.read_frame(min(remaining, 0.2))
            if frame is None:
                continue
            kind, data = frame
            if kind == b"r":
                self.version = data.decode("utf-8", "replace")

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass

    def close(self):
        try:
            self.send(b"Q")
            self.proc.wait(timeout=5)
        except (AgentError, subprocess.TimeoutExpired):
            pass
        self.kill()


class _Output:
    """Coalesces stream frames into stream messages, in order."""

    def __init__(self, kernel, silent):
        self.kernel = kernel
        self.silent = silent
        self.decoders = {
            "stdout": codecs.getincrementaldecoder("utf-8")("replace"),
            "stderr": codecs.getincrementaldecoder("utf-8")("replace"),
        }
        self.name = None
        self.text = ""
        self.since = None

    def add(self, name, data):
        self._add_text(name, self.decoders[name].decode(data))

    def _add_text(self, name, text):
        if not text:
            return
        if self.name is not None and self.name != name:
            self.flush()
        if self.since is None:
            self.since = time.monotonic()
        self.name = name
        self.text += text
        if len(self.text) >= _FLUSH_SIZE:
            self.flush()

    def due(self):
        return self.since is not None and time.monotonic() - self.since >= _FLUSH_AFTER

    def timeout(self, default):
        if self.since is None:
            return default
        return max(0.0, min(default, self.since + _FLUSH_AFTER - time.monotonic()))

    def flush(self, final=False):
        if final:
            for name, dec in self.decoders.items():
                self._add_text(name, dec.decode(b"", final=True))
        if self.text and not self.silent:
            self.kernel.send_response(self.kernel.iopub_socket, "stream", {"name": self.name, "text": self.text})
        self.name, self.text, self.since = None, "", None


class JavaKernel(Replies, Kernel):
    implementation = "envd_java_kernel"
    implementation_version = __version__
    language = "java"
    language_version = ""
    language_info = {
        "name": "java",
        "codemirror_mode": "java",
        "mimetype": "text/x-java-source",
        "file_extension": ".jshell",
        "pygments_lexer": "java",
    }
    banner = "envd Java kernel (JShell)"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._java = find_java()
        self._cwd = os.getcwd()
        self._replay = []  # silent executions that succeeded, in order
        self._agent = None
        self._fresh = False  # the agent was restarted: replay before use
        self._sigint = False  # set by SIGINT during do_execute
        try:
            self._start_agent()
        except OSError as e:
            self.log.error("cannot start the Java agent: %s", e)

    # ------------------------------------------------------------------
    # agent

    def _child_env(self):
        env = dict(os.environ)
        # The kernelspec puts our package dir on PYTHONPATH; don't leak it.
        paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        paths = [p for p in paths if os.path.abspath(p) != _PACKAGE_PARENT]
        if paths:
            env["PYTHONPATH"] = os.pathsep.join(paths)
        else:
            env.pop("PYTHONPATH", None)
        env.pop("ENVD_JAVA", None)
        return env

    def _start_agent(self):
        cwd = self._cwd if os.path.isdir(self._cwd) else "/"
        self._agent = Agent(agent_argv(self._java), cwd, self._child_env())

    def _ready_agent(self):
        """The agent, started and ready, with the replay done."""
        if self._agent is None:
            try:
                self._start_agent()
            except OSError as e:
                raise AgentError("cannot start %s: %s" % (self._java, e))
        try:
            self._agent.wait_ready(_START_TIMEOUT, lambda: self._sigint)
        except AgentError:
            self._drop_agent()
            raise
        if self.language_version != self._agent.version:
            self.language_version = self._agent.version
            self.language_info = dict(self.language_info, version=self._agent.version)
        if self._fresh:
            self._fresh = False
            for code in self._replay:
                self._run(code, _Output(self, True))
        return self._agent

    def _drop_agent(self):
        if self._agent is not None:
            self._agent.kill()
        self._agent = None
        self._fresh = True

    # ------------------------------------------------------------------
    # running code

    def _run(self, code, out):
        """Runs code in the agent. Returns (status, value, error) where error
        is (ename, evalue, traceback) or None."""
        agent = self._agent
        value = None
        error = None
        stop_at = None
        try:
            agent.send(b"X", code.encode("utf-8", "surrogatepass"))
            while True:
                if self._sigint:
                    # Jupyter's interrupt (envd repeats it while the code
                    # runs on; the agent ignores repeats).
                    self._sigint = False
                    if stop_at is None:
                        stop_at = time.monotonic() + _STOP_GRACE
                    agent.send(b"I")
                if stop_at is not None and time.monotonic() >= stop_at:
                    out.flush(final=True)
                    self._drop_agent()
                    self._start_agent()
                    return "error", None, (
                        "KeyboardInterrupt",
                        "the Java code did not stop; its JVM was restarted and the state was lost",
                        [],
                    )
                if out.due():
                    out.flush()
                frame = agent.read_frame(out.timeout(0.1))
                if frame is None:
                    continue
                kind, data = frame
                if kind == b"o":
                    out.add("stdout", data)
                elif kind == b"e":
                    out.add("stderr", data)
                elif kind == b"v":
                    value = data.decode("utf-8", "replace")
                elif kind == b"x":
                    parts = data.decode("utf-8", "replace").split("\0", 2)
                    parts += [""] * (3 - len(parts))
                    # One entry per line, each but the last ending in a
                    # newline: envd (like E2B) joins them with "".
                    lines = parts[2].split("\n") if parts[2] else []
                    tb = [line + "\n" for line in lines[:-1]] + lines[-1:]
                    error = (parts[0], parts[1], tb)
                elif kind == b"d":
                    out.flush(final=True)
                    return data.decode("ascii", "replace"), value, error
        except AgentExited as e:
            out.flush(final=True)
            self._drop_agent()
            try:
                self._start_agent()
            except OSError:
                pass
            what = str(e)
            if not out.silent:
                note = "[%s; started a new one: the state was lost]\n" % what
                self.send_response(self.iopub_socket, "stream", {"name": "stderr", "text": note})
            return "error", None, ("EnvdJavaKernelError", what, [])

    # ------------------------------------------------------------------
    # Kernel API

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
        if not code.strip():
            return self._ok()
        # SIGINT only sets a flag: the loops check it (a KeyboardInterrupt
        # raised anywhere could cut a frame in half).
        self._sigint = False
        previous = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            self._ready_agent()
            status, value, error = self._run(code, _Output(self, silent))
        except Interrupted:  # while the agent was starting
            return self._error("KeyboardInterrupt", "interrupted")
        except AgentError as e:
            return self._error("EnvdJavaKernelError", str(e))
        finally:
            signal.signal(signal.SIGINT, previous)
        if error is not None:
            return self._error(*error)
        if status == "interrupted":
            return self._error("KeyboardInterrupt", "interrupted")
        if status != "ok":
            return self._error("EnvdJavaKernelError", "the agent reported %r" % status)
        if silent:
            if len(self._replay) < _MAX_REPLAY:
                self._replay.append(code)
        elif value is not None:
            self.send_response(
                self.iopub_socket,
                "execute_result",
                {"execution_count": self.execution_count, "data": {"text/plain": value}, "metadata": {}},
            )
        return self._ok()

    def _on_sigint(self, signum, frame):
        self._sigint = True

    def do_shutdown(self, restart):
        if self._agent is not None:
            self._agent.close()
            self._agent = None
        return {"status": "ok", "restart": restart}
