package interpreter_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/interpreter"
	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/procstat"
)

// forkedProbe prints what the zygote would change if it were careless:
// the modules loaded after the data stack's first import, where a
// preloaded module says it comes from, matplotlib's backend, descriptors,
// threads and signal handlers.
const forkedProbe = `import os as __o, sys as __s, signal as __g, json as __j
import pandas, numpy, matplotlib.pyplot
numpy.ones((300, 300)) @ numpy.ones((300, 300))  # BLAS starts its threads
print("after-import", sorted(__s.modules))
print("spec", numpy.__spec__.name, numpy.__spec__.origin, type(numpy.__spec__.loader).__name__, type(numpy.__loader__).__name__)
print("attrs", sorted(k for k, v in vars(numpy).items() if type(v) is type(__s)))
print("backend", matplotlib.get_backend())
def __fds():
    out = []
    for f in __o.listdir("/proc/self/fd"):
        try: l = __o.readlink("/proc/self/fd/" + f)
        except OSError: continue  # the listing's own
        if l.startswith("/"): out.append(l)  # files; ZeroMQ's sockets, eventfds and pipes vary with the server's connections
    return sorted(out)
print("fds", __fds())
print("threads", len(__o.listdir("/proc/self/task")))
print("signals", [str(__g.getsignal(s)) for s in (__g.SIGINT, __g.SIGTERM, __g.SIGCHLD, __g.SIGPIPE, __g.SIGHUP)])
print("argv", __j.dumps(__s.argv), __j.dumps(__s.orig_argv[1:]))
print("main", sorted(vars(__s.modules["__main__"])))
print("cmdline", open("/proc/self/cmdline", "rb").read().rstrip(b"\0").split(b"\0"))`

// serverBound matches what differs between two Jupyter servers' kernels:
// the server's pid, its run's marker, its directories, socket inodes.
var serverBound = regexp.MustCompile(`(env JPY_PARENT_PID "|env ENVD_JUPYTER_RUN "|/tmp/envd-jupyter-|socket:\[|anon_inode:\[|pipe:\[)[0-9a-f-]+`)

// parentCmdline is the command line of a context's kernel's parent.
const parentCmdline = `import os; print(open("/proc/%d/cmdline" % os.getppid()).read().replace("\0", " "))`

// A kernel forked from the zygote is the same as one started for its
// context, in the same directory with the same env, by a server without
// a zygote: the probe of TestPoolHandoverLikeFresh, then the data stack's
// first import and what it leaves, then both again after a restart.
func TestZygoteKernelLikeStarted(t *testing.T) {
	t.Parallel()
	env := &envMap{}
	env.m.Store("ENVD_ZYGOTE_T", "sandbox-wide")
	_, plain, ctx := ownStackZygote(t, nil, env.get)
	_, forked, _ := ownStackZygote(t, jupyter.DefaultZygote(), env.get)
	dir := trickyDir(t)
	pc, err := plain.CreateContext(ctx, "python", dir)
	if err != nil {
		t.Fatal(err)
	}
	fc, err := forked.CreateContext(ctx, "python", dir)
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := runOn(t, forked, fc.ID, parentCmdline); !strings.Contains(out, "envd_zygote.py") {
		t.Fatalf("the kernel was not forked from the zygote: its parent is %q", out)
	}
	if out, _ := runOn(t, plain, pc.ID, parentCmdline); strings.Contains(out, "envd_zygote.py") {
		t.Fatalf("the server without a zygote forked its kernel: its parent is %q", out)
	}
	compare := func(when, code string) {
		t.Helper()
		fout, fcount := runOn(t, forked, fc.ID, code)
		pout, pcount := runOn(t, plain, pc.ID, code)
		fout = serverBound.ReplaceAllString(pointer.ReplaceAllString(strings.ReplaceAll(fout, fc.ID, "KERNEL_ID"), "<pointer>"), "$1<server's>")
		pout = serverBound.ReplaceAllString(pointer.ReplaceAllString(strings.ReplaceAll(pout, pc.ID, "KERNEL_ID"), "<pointer>"), "$1<server's>")
		if d := lineDiff(pout, fout); d != "" || fcount != pcount {
			t.Errorf("%s, the forked kernel differs from a started one (counts %d, %d; - started, + forked):\n%s", when, pcount, fcount, d)
		}
	}
	// The parent lookups above ran first in both: the counts agree.
	compare("at its start", probes[0].code)
	const timed = "import time as __t\n__t0 = __t.perf_counter()\nimport pandas, numpy, matplotlib.pyplot\nprint(round((__t.perf_counter() - __t0) * 1000, 1))"
	fms, _ := runOn(t, forked, fc.ID, timed)
	pms, _ := runOn(t, plain, pc.ID, timed)
	t.Logf("first import of pandas, numpy, matplotlib.pyplot: forked %s ms, started %s ms", strings.TrimSpace(fms), strings.TrimSpace(pms))
	compare("after the data stack's import", forkedProbe)
	for _, e := range []*interpreter.Engine{plain, forked} {
		id := pc.ID
		if e == forked {
			id = fc.ID
		}
		if _, err := e.RestartContext(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if out, _ := runOn(t, forked, fc.ID, parentCmdline); !strings.Contains(out, "envd_zygote.py") {
		t.Fatalf("after a restart, the kernel was not forked from the zygote: its parent is %q", out)
	}
	_, _ = runOn(t, plain, pc.ID, parentCmdline)
	compare("after a restart", probes[0].code)
	compare("after a restart and the data stack's import", forkedProbe)
}

// Nothing leaks from one forked context to another: globals, open files,
// random state (Python's and numpy's), and a context's imports.
func TestZygoteContextsApart(t *testing.T) {
	t.Parallel()
	_, eng, ctx := ownStackZygote(t, jupyter.DefaultZygote(), nil)
	a, err := eng.CreateContext(ctx, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := eng.CreateContext(ctx, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/held"
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	runOn(t, eng, a.ID, "secret = 42\nheld = open("+strconv.Quote(path)+")\nimport sklearn")
	draw := `import random, numpy, os, sys
print(random.random(), numpy.random.rand(), os.urandom(4).hex())
print("secret" in globals(), "sklearn" in sys.modules)
print(any(os.path.realpath("/proc/self/fd/" + f) == ` + strconv.Quote(path) + ` for f in os.listdir("/proc/self/fd")))`
	aout, _ := runOn(t, eng, a.ID, draw)
	bout, _ := runOn(t, eng, b.ID, draw)
	al, bl := strings.Split(aout, "\n"), strings.Split(bout, "\n")
	if len(al) < 3 || len(bl) < 3 {
		t.Fatalf("short output:\n%s\n%s", aout, bout)
	}
	af, bf := strings.Fields(al[0]), strings.Fields(bl[0])
	for i, what := range []string{"random", "numpy.random", "os.urandom"} {
		if af[i] == bf[i] {
			t.Errorf("two forked contexts drew the same %s: %s", what, af[i])
		}
	}
	if al[1] != "True True" || bl[1] != "False False" {
		t.Errorf("globals or imports leaked between contexts: first %q, second %q", al[1], bl[1])
	}
	if al[2] != "True" || bl[2] != "False" {
		t.Errorf("an open file leaked between contexts: first %q, second %q", al[2], bl[2])
	}
}

// A kernel that dies while it has a child in its process group is
// restarted, and the child goes with the dead kernel, for a kernel forked
// from the zygote as for one started: once the kernel is reaped its
// group is signalled member by member, never by its number, which may be
// another group's since (the zygote's word says when it reaped the
// kernel).
func TestDeadKernelsChildGoesWithIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		zygote *jupyter.Zygote
	}{{"started", nil}, {"forked", jupyter.DefaultZygote()}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, eng, ctx := ownStackZygote(t, tc.zygote, nil)
			c, err := eng.CreateContext(ctx, "python", "")
			if err != nil {
				t.Fatal(err)
			}
			out, _ := runOn(t, eng, c.ID, "import subprocess, time\np = subprocess.Popen(['sleep', '300'])\ntime.sleep(0.2)\nprint(p.pid)")
			child, err := strconv.Atoi(strings.TrimSpace(out))
			if err != nil {
				t.Fatalf("child pid %q: %v", out, err)
			}
			t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
			_, rd, err := eng.Execute(ctx, interpreter.ExecuteRequest{Code: "import os\nos._exit(1)", ContextID: c.ID})
			if err != nil {
				t.Fatal(err)
			}
			if end := endOf(collect(t, rd)); end.Reason != interpreter.EndKernelDied {
				t.Fatalf("the exit ended %+v, want a kernel death", end)
			}
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				st, err := procstat.Read(child)
				if err != nil || st.State == 'Z' || st.Comm != "sleep" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the dead kernel's child %d still runs: %+v", child, st)
				}
			}
			if out, _ := runOn(t, eng, c.ID, "print('back')"); strings.TrimSpace(out) != "back" {
				t.Errorf("after the restart: %q", out)
			}
		})
	}
}
