package cgroup_test

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/envd-dev/envd/internal/cgroup"
	"github.com/envd-dev/envd/internal/testutil"
)

// versions are the cgroup versions this machine lets a test use: v1 where
// the freezer hierarchy is mounted, v2 where a cgroup2 mount shows
// cgroup.freeze (on hybrid machines, /sys/fs/cgroup/unified).
func versions(t *testing.T) []cgroup.Version {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("cgroups need root")
	}
	var vs []cgroup.Version
	for _, v := range []cgroup.Version{cgroup.V1, cgroup.V2} {
		m, err := cgroup.New(cgroup.Options{Version: v, Root: "envd-probe-" + randName()})
		if err != nil {
			t.Logf("cgroup %v unavailable here: %v", v, err)
			continue
		}
		m.Close()
		vs = append(vs, v)
	}
	if len(vs) == 0 {
		t.Fatal("no cgroup version usable on this machine")
	}
	return vs
}

func randName() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newManager makes a tree of the test's own, removed at the end.
func newManager(t *testing.T, v cgroup.Version) *cgroup.Manager {
	t.Helper()
	root := "envd-test-" + randName()
	m, err := cgroup.New(cgroup.Options{Version: v, Root: root, SweepRoot: sweepRootOf(t, v, root)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Thaw()
		if err := m.Close(); err != nil {
			t.Errorf("remove the test's cgroups: %v", err)
		}
	})
	return m
}

// sweepRootOf is the test tree's path from the hierarchy's root, so a
// hierarchy freeze walks only the test's cgroups.
func sweepRootOf(t *testing.T, v cgroup.Version, root string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if (v == cgroup.V2 && parts[0] == "0") || (v == cgroup.V1 && strings.Contains(","+parts[1]+",", ",freezer,")) {
			return parts[2] + "/" + root
		}
	}
	t.Fatalf("no %v cgroup in /proc/self/cgroup", v)
	return ""
}

// startIn starts argv in a new per-process cgroup under g and returns it
// with the cgroup; both are cleaned up.
func startIn(t *testing.T, m *cgroup.Manager, name string, argv ...string) (*exec.Cmd, *cgroup.Group) {
	t.Helper()
	g, err := m.Group(name).NewChild()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := g.Start(cmd, cmd.Start); err != nil {
		g.Remove()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		if pids, err := g.Procs(); err == nil { // what it started, too
			for _, pid := range pids {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		m.Thaw() // a frozen task cannot die
		g.Thaw()
		cmd.Wait()
		if err := g.Remove(); err != nil {
			t.Errorf("remove %s: %v", g.Path(), err)
		}
	})
	return cmd, g
}

// TestStartJoins: the child is in its cgroup from its first instruction (it
// reads its own /proc/self/cgroup), and envd's threads all stay in envd's
// own cgroups.
func TestStartJoins(t *testing.T) {
	for _, v := range versions(t) {
		t.Run(v.String(), func(t *testing.T) {
			m := newManager(t, v)
			before := threadCgroups(t)
			out := t.TempDir() + "/cg"
			cmd, g := startIn(t, m, cgroup.User, "/bin/sh", "-c", "cat /proc/self/cgroup > "+out+"; exec sleep 60")
			testutil.Poll(t, "the child's report", func() bool {
				b, _ := os.ReadFile(out)
				return strings.Contains(string(b), "/"+g.Path())
			})
			b, _ := os.ReadFile(out)
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				want := v == cgroup.V2 && strings.HasPrefix(line, "0::") ||
					v == cgroup.V1 && (strings.Contains(line, ":freezer:") || strings.Contains(line, ":memory:"))
				if want && !strings.HasSuffix(line, "/"+g.Path()) {
					t.Errorf("child's cgroup line %q: want it in %s", line, g.Path())
				}
			}
			// The shell's cat may not have exited yet: it was there too.
			var pids []int
			var err error
			if !testutil.PollFor(testutil.Wait, func() bool {
				pids, err = g.Procs()
				return err == nil && len(pids) == 1
			}) || pids[0] != cmd.Process.Pid {
				t.Errorf("cgroup.procs %v, %v: want [%d]", pids, err, cmd.Process.Pid)
			}
			if after := threadCgroups(t); after != before {
				t.Errorf("envd's threads moved:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// TestStartNeverListsEnvd: a v1 start is answered only once its thread is
// back in envd's cgroups, so the child's cgroup, read at once, never lists
// envd's pid (an oom_score_adj or a signal meant for the process's members
// would reach envd; and a guest freezing its cgroup at once would freeze
// envd's thread). Read right after each of many starts. (A start answered
// earlier makes the test process kill itself: startIn's cleanup signals
// every member.)
func TestStartNeverListsEnvd(t *testing.T) {
	for _, v := range versions(t) {
		t.Run(v.String(), func(t *testing.T) {
			m := newManager(t, v)
			for i := range 100 {
				cmd, g := startIn(t, m, cgroup.User, "/bin/sleep", "60")
				pids, err := g.Procs()
				if err != nil {
					t.Fatal(err)
				}
				for _, pid := range pids {
					if pid == os.Getpid() {
						t.Fatalf("start %d: %s lists envd's pid: %v", i, g.Path(), pids)
					}
				}
				cmd.Process.Kill()
			}
		})
	}
}

// threadCgroups is the set of cgroup lines of every thread of the test
// process.
func threadCgroups(t *testing.T) string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, e := range ents {
		b, err := os.ReadFile("/proc/self/task/" + e.Name() + "/cgroup")
		if err == nil {
			set[string(b)] = true
		}
	}
	var out []string
	for k := range set {
		out = append(out, k)
	}
	return strings.Join(out, "|")
}

// utime is a process's user CPU time, in clock ticks, from /proc/PID/stat.
func utime(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	n, err := strconv.ParseUint(f[11], 10, 64) // field 14 overall
	if err != nil {
		t.Fatal(err)
	}
	return n
}

const busy = "while :; do :; done"

// TestFreezeBusyLoop: a busy loop's CPU time stops growing while frozen
// (the cgroup reads back frozen, and the loop's utime is unchanged while a
// second busy loop outside the cgroup runs for 20 ticks), and grows again
// after the thaw.
func TestFreezeBusyLoop(t *testing.T) {
	for _, v := range versions(t) {
		t.Run(v.String(), func(t *testing.T) {
			m := newManager(t, v)
			loop, g := startIn(t, m, cgroup.User, "/bin/sh", "-c", busy)
			_, jg := startIn(t, m, cgroup.Jupyter, "/bin/sh", "-c", busy)
			control := exec.Command("/bin/sh", "-c", busy)
			if err := control.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { control.Process.Kill(); control.Wait() }()

			res, err := m.Freeze(testutil.Context(t, testutil.Wait), cgroup.FreezeOptions{Observe: true, Wait: testutil.Wait})
			if err != nil {
				t.Fatal(err)
			}
			if res.Mode != "legacy" || res.Requested != 3 || res.Frozen != 3 || res.NotFrozen != 0 || res.Failed != 0 || res.PreFrozen != 0 {
				t.Errorf("result %+v: want 3 requested (user, pty, jupyter), 3 frozen", res)
			}
			for _, gr := range []*cgroup.Group{g, jg} {
				if ok, err := gr.Frozen(); !ok || err != nil {
					t.Errorf("%s frozen %v, %v", gr.Path(), ok, err)
				}
			}
			frozenAt := utime(t, loop.Process.Pid)
			c0 := utime(t, control.Process.Pid)
			testutil.Poll(t, "the control loop to run 20 ticks", func() bool { return utime(t, control.Process.Pid) >= c0+20 })
			if got := utime(t, loop.Process.Pid); got != frozenAt {
				t.Errorf("the frozen loop ran: utime %d -> %d", frozenAt, got)
			}
			// A v1 start waits for the thaw: envd's thread must not freeze.
			if v == cgroup.V1 {
				if _, err := m.Group(cgroup.User).NewChild(); err != nil {
					t.Fatal(err)
				}
			}

			if n, err := m.Thaw(); err != nil || n != 3 {
				t.Fatalf("thaw: %d, %v", n, err)
			}
			if ok, _ := g.Frozen(); ok {
				t.Error("still frozen after the thaw")
			}
			testutil.Poll(t, "the loop to run again", func() bool { return utime(t, loop.Process.Pid) > frozenAt })
		})
	}
}

// TestPreFrozen: a cgroup the guest froze itself is reported preFrozen and
// stays frozen after the thaw; the others thaw.
func TestPreFrozen(t *testing.T) {
	for _, v := range versions(t) {
		t.Run(v.String(), func(t *testing.T) {
			m := newManager(t, v)
			_, guest := startIn(t, m, cgroup.User, "sleep", "60")
			_, other := startIn(t, m, cgroup.PTY, "sleep", "60")
			if err := guest.Freeze(); err != nil {
				t.Fatal(err)
			}
			for _, hier := range []bool{false, true} {
				res, err := m.Freeze(testutil.Context(t, testutil.Wait), cgroup.FreezeOptions{Hierarchy: hier, Observe: true, Wait: testutil.Wait})
				if err != nil {
					t.Fatal(err)
				}
				if res.PreFrozen != 1 || res.NotFrozen != 0 {
					t.Errorf("hierarchy %v: result %+v: want 1 preFrozen", hier, res)
				}
				if ok, _ := other.Frozen(); !ok {
					t.Errorf("hierarchy %v: the other cgroup is not frozen", hier)
				}
				if _, err := m.Thaw(); err != nil {
					t.Fatal(err)
				}
				if ok, _ := guest.Frozen(); !ok {
					t.Errorf("hierarchy %v: the guest's frozen cgroup was thawed", hier)
				}
				if ok, _ := other.Frozen(); ok {
					t.Errorf("hierarchy %v: the other cgroup stayed frozen", hier)
				}
			}
		})
	}
}

// TestFreezeNoWait: without a wait the freeze is only requested; the
// cgroups read back frozen soon after.
func TestFreezeNoWait(t *testing.T) {
	for _, v := range versions(t) {
		t.Run(v.String(), func(t *testing.T) {
			m := newManager(t, v)
			_, g := startIn(t, m, cgroup.User, "sleep", "60")
			res, err := m.Freeze(testutil.Context(t, testutil.Wait), cgroup.FreezeOptions{MaxCgroups: 2})
			if err != nil {
				t.Fatal(err)
			}
			// user, pty visited; the bound stops the walk before jupyter.
			if !res.Truncated || res.Visited != 2 || res.Frozen != 0 || res.WaitMs != 0 {
				t.Errorf("result %+v", res)
			}
			testutil.Poll(t, "the cgroup to read back frozen", func() bool { ok, _ := g.Frozen(); return ok })
		})
	}
}

// TestTreeRemovedFromOutside: another envd sharing the tree's name removes
// it as it shuts down (its Close removes every empty cgroup of the tree);
// the next process still gets a cgroup of its own, under a tree made
// again.
func TestTreeRemovedFromOutside(t *testing.T) {
	for _, v := range versions(t) {
		t.Run(v.String(), func(t *testing.T) {
			m := newManager(t, v)
			other, err := cgroup.New(cgroup.Options{Version: v, Root: m.Root()})
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			if err := cgroup.RemoveTree(other); err != nil {
				t.Fatalf("remove the tree from outside: %v", err)
			}
			if _, err := os.Stat(cgroup.Dir(m, cgroup.User)); !os.IsNotExist(err) {
				t.Fatalf("the tree is still there: %v", err)
			}
			cmd, g := startIn(t, m, cgroup.User, "sleep", "60")
			pids, err := g.Procs()
			if err != nil || len(pids) != 1 || pids[0] != cmd.Process.Pid {
				t.Errorf("cgroup.procs %v, %v: want [%d]", pids, err, cmd.Process.Pid)
			}
		})
	}
}

// TestSecondManagerLeavesTree: a second envd given a tree another running
// envd owns (started by mistake: it then fails to bind, and stops) uses it,
// and leaves it in place when it stops; the owner removes it.
func TestSecondManagerLeavesTree(t *testing.T) {
	for _, v := range versions(t) {
		t.Run(v.String(), func(t *testing.T) {
			root := "envd-test-" + randName()
			first, err := cgroup.New(cgroup.Options{Version: v, Root: root})
			if err != nil {
				t.Fatal(err)
			}
			second, err := cgroup.New(cgroup.Options{Version: v, Root: root})
			if err != nil {
				first.Close()
				t.Fatal(err)
			}
			if err := second.Close(); err != nil {
				t.Errorf("the second's Close: %v", err)
			}
			for _, rel := range []string{"", cgroup.User, cgroup.PTY, cgroup.Jupyter} {
				if _, err := os.Stat(cgroup.Dir(first, rel)); err != nil {
					t.Errorf("the second envd removed the first's cgroup %q: %v", rel, err)
				}
			}
			if err := first.Close(); err != nil {
				t.Errorf("the first's Close: %v", err)
			}
			if _, err := os.Stat(cgroup.Dir(first, "")); !os.IsNotExist(err) {
				t.Errorf("the owner left its tree: %v", err)
			}
			// Gone with its owner, the lock is free: the next envd owns the
			// tree, and removes it.
			third, err := cgroup.New(cgroup.Options{Version: v, Root: root})
			if err != nil {
				t.Fatal(err)
			}
			if err := third.Close(); err != nil {
				t.Errorf("the third's Close: %v", err)
			}
			if _, err := os.Stat(cgroup.Dir(third, "")); !os.IsNotExist(err) {
				t.Errorf("the third envd left the tree: %v", err)
			}
		})
	}
}

// TestSpareCgroups: after a first start, NewChild gives cgroups made ahead
// in the background, each new and usable; a spare removed from
// outside is skipped; Close removes the spares with the tree (newManager's
// cleanup checks that it succeeds).
func TestSpareCgroups(t *testing.T) {
	for _, v := range versions(t) {
		t.Run(v.String(), func(t *testing.T) {
			m := newManager(t, v)
			spares := func(n int) []string {
				t.Helper()
				var names []string
				if !testutil.PollFor(testutil.Wait, func() bool {
					names = cgroup.SpareNames(m, cgroup.User)
					return len(names) >= n
				}) {
					t.Fatalf("spares %v, want %d", names, n)
				}
				return names
			}
			seen := map[string]bool{}
			newChild := func() *cgroup.Group {
				t.Helper()
				g, err := m.Group(cgroup.User).NewChild()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { g.Remove() })
				if seen[g.Path()] {
					t.Fatalf("cgroup %s handed out twice", g.Path())
				}
				seen[g.Path()] = true
				return g
			}
			use := func(g *cgroup.Group) { // a start refills the spares
				t.Helper()
				cmd := exec.Command("/bin/sh", "-c", "exit 7")
				if err := g.Start(cmd, cmd.Start); err != nil {
					t.Fatal(err)
				}
				if err := cmd.Wait(); cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 7 {
					t.Fatalf("a process in %s: %v", g.Path(), err)
				}
			}
			use(newChild())
			for range 3 {
				next := spares(2)[0]
				g := newChild()
				if g.Path() != next {
					t.Fatalf("NewChild gave %s, want the spare %s", g.Path(), next)
				}
				use(g)
			}
			names := spares(2)
			gone, err := m.Adopt(names[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := gone.Remove(); err != nil {
				t.Fatal(err)
			}
			if g := newChild(); g.Path() != names[1] {
				t.Fatalf("after %s was removed from outside, NewChild gave %s, want %s", names[0], g.Path(), names[1])
			}
		})
	}
}
