package process_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/envd-dev/envd/internal/cgroup"
	"github.com/envd-dev/envd/internal/process"
	"github.com/envd-dev/envd/internal/process/processtest"
	"github.com/envd-dev/envd/internal/testutil"
)

// cgroupManager makes a cgroup tree of the test's own (version v), removed
// once the test's processes are gone.
func cgroupManager(t *testing.T, v cgroup.Version) *cgroup.Manager {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	cg, err := cgroup.New(cgroup.Options{Version: v, Root: "envd-test-" + hex.EncodeToString(b), Logger: processtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cg.Close(); err != nil {
			t.Errorf("remove the test's cgroups: %v", err)
		}
	})
	return cg
}

// TestCgroupPlacement: with cgroups on, a process runs in a cgroup of its
// own under user (pipes) or pty (terminal) from its first instruction, with
// the workload's oom_score_adj; its end carries its cgroup's memory peak
// (where a memory controller serves it) and its cgroup is removed.
func TestCgroupPlacement(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cgroups need root")
	}
	for _, v := range []cgroup.Version{cgroup.V1, cgroup.V2} {
		t.Run(v.String(), func(t *testing.T) {
			cg := cgroupManager(t, v)
			m := newManager(t, process.Options{Cgroups: cg, OOMScoreAdj: cgroup.OOMScoreWorkload})
			out := t.TempDir() + "/out"
			for _, pty := range []bool{false, true} {
				o := process.StartOptions{
					// envd sets the value just after the start, and on
					// what the shell forked before (the sleep, at once):
					// wait for both, then report what a new child gets.
					Config: process.Config{Cmd: "/bin/sh", Args: []string{"-c", "sleep 60 & " +
						`until [ "$(cat /proc/$$/oom_score_adj)" = 100 ] && [ "$(cat /proc/$!/oom_score_adj)" = 100 ]; do :; done; kill $!; ` +
						"cat /proc/self/cgroup /proc/self/oom_score_adj > " + out}},
					User: lookup(t, "root"),
					Dir:  "/",
				}
				parent := "/user/p"
				if pty {
					o.PTY = &process.Size{Cols: 80, Rows: 24}
					parent = "/pty/p"
				}
				p, err := m.Start(o)
				if err != nil {
					t.Fatal(err)
				}
				waitDone(t, p, testutil.Wait)
				b, err := os.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				s := string(b)
				line := "0::"
				if v == cgroup.V1 {
					line = ":freezer:"
				}
				for _, l := range strings.Split(s, "\n") {
					if strings.Contains(l, line) && !strings.Contains(l, parent) {
						t.Errorf("pty %v: cgroup line %q: want it under %s", pty, l, parent)
					}
				}
				if !strings.HasSuffix(strings.TrimSpace(s), "\n100") {
					t.Errorf("pty %v: oom_score_adj: %q, want 100", pty, s)
				}
				ex, _ := p.Exit()
				if _, err := cg.Group(cgroup.User).MemoryPeak(); err == nil && ex.Usage.MemoryPeak <= 0 {
					t.Errorf("pty %v: no memory peak in %+v", pty, ex.Usage)
				}
			}
		})
	}
}

// TestOOMEnds: a process that allocates past its cgroup's memory limit
// (set by the test on the user cgroup) ends typed OOM-killed, with a
// memory peak near the limit; one that kills itself with SIGKILL stays
// "signaled". Where no memory controller serves envd's cgroups (v2 on a
// hybrid machine, whose memory controller is v1's) there is nothing to run.
func TestOOMEnds(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cgroups need root")
	}
	ran := false
	for _, v := range []cgroup.Version{cgroup.V1, cgroup.V2} {
		t.Run(v.String(), func(t *testing.T) {
			cg := cgroupManager(t, v)
			const limit = 64 << 20
			if err := cg.Group(cgroup.User).SetMemoryLimit(limit); errors.Is(err, cgroup.ErrNoMemory) {
				t.Logf("no memory controller for cgroup %v here: OOM ends not observable", v)
				return
			} else if err != nil {
				t.Fatal(err)
			}
			ran = true
			m := newManager(t, process.Options{Cgroups: cg})
			p := startDomain(t, m, "/usr/bin/python3", "-c", "b = bytearray(512 << 20)")
			waitDone(t, p, testutil.Wait)
			ex, _ := p.Exit()
			if ex.Reason != process.EndOOMKilled || ex.Status != "signal: killed" {
				t.Errorf("exit %+v: want OOM-killed", ex)
			}
			if ex.Usage == nil || ex.Usage.MemoryPeak < limit/2 || ex.Usage.MemoryPeak > limit+8<<20 { // the kernel charges in per-CPU batches
				t.Errorf("usage %+v: want a memory peak near %d", ex.Usage, limit)
			}
			p = startDomain(t, m, "/bin/sh", "-c", "kill -KILL $$")
			waitDone(t, p, testutil.Wait)
			if ex, _ := p.Exit(); ex.Reason != process.EndSignaled {
				t.Errorf("killed itself: %+v", ex)
			}
		})
	}
	if !ran {
		t.Error("no cgroup version with a memory controller: the OOM end was never exercised")
	}
}
