package cgroup_test

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"

	"github.com/envd-dev/envd/internal/cgroup"
)

// runIn starts argv in g, as a process envd starts would be, and waits for
// it; it returns the exit code.
func runIn(t *testing.T, g *cgroup.Group, argv ...string) int {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := g.Start(cmd, cmd.Start); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	return cmd.ProcessState.ExitCode()
}

// takeUntil takes cgroups from NewChild until it gives want (at most as many
// as can be ready), and removes the others.
func takeUntil(t *testing.T, m *cgroup.Manager, want string) *cgroup.Group {
	t.Helper()
	for range 12 {
		g, err := m.Group(cgroup.User).NewChild()
		if err != nil {
			t.Fatal(err)
		}
		if g.Path() == want {
			return g
		}
		g.Remove()
	}
	t.Fatalf("NewChild never gave %s back", want)
	return nil
}

// TestReleaseReuses: on v1, a per-process cgroup given back empty is handed
// out again, its memory peak reset (the next process's peak is its own, not
// the one before's); on v2 it is removed. One that still holds a process
// (an orphan), or saw an OOM kill, is never handed out again.
func TestReleaseReuses(t *testing.T) {
	for _, v := range versions(t) {
		t.Run(v.String(), func(t *testing.T) {
			m := newManager(t, v)
			g, err := m.Group(cgroup.User).NewChild()
			if err != nil {
				t.Fatal(err)
			}
			if code := runIn(t, g, "/usr/bin/python3", "-c", "b = bytearray(48 << 20)"); code != 0 {
				t.Fatalf("the first process: exit %d", code)
			}
			peak, perr := g.MemoryPeak()
			if perr == nil && peak < 48<<20 {
				t.Fatalf("first memory peak %d, want at least 48 MiB", peak)
			}
			path := g.Path()
			g.Release()
			ready := slices.Contains(cgroup.SpareNames(m, cgroup.User), path)
			if v == cgroup.V2 {
				if ready {
					t.Fatalf("v2: %s kept after Release", path)
				}
				if exists(t, m, path) {
					t.Fatalf("v2: %s not removed", path)
				}
				return
			}
			if !ready {
				t.Fatalf("%s not kept after Release: ready %v", path, cgroup.SpareNames(m, cgroup.User))
			}
			g = takeUntil(t, m, path)
			// Born in it, in each hierarchy (a cgroup handed out again
			// has its tasks files open: the start writes those).
			in := `grep -q "freezer:.*/` + path + `$" /proc/self/cgroup`
			if perr == nil {
				in += ` && grep -q "memory:.*/` + path + `$" /proc/self/cgroup`
			}
			if code := runIn(t, g, "/bin/sh", "-c", in); code != 0 {
				b, _ := os.ReadFile("/proc/self/cgroup")
				t.Fatalf("the second process was not in %s (exit %d); the test's own:\n%s", path, code, b)
			}
			if perr == nil {
				if peak, err := g.MemoryPeak(); err != nil || peak >= 48<<20 {
					t.Errorf("second memory peak %d, %v: want the second process's, below 48 MiB", peak, err)
				}
				if n, err := g.OOMKills(); err != nil || n != 0 {
					t.Errorf("OOM kills %d, %v: want 0", n, err)
				}
			}

			// An orphan keeps its cgroup busy: not handed out again.
			code := runIn(t, g, "/bin/sh", "-c", "sleep 60 >/dev/null 2>&1 & exit 0")
			orphans, _ := g.Procs()
			t.Cleanup(func() {
				for _, pid := range orphans {
					syscall.Kill(pid, syscall.SIGKILL)
				}
				// Reaped by init, or by this test binary if it is a subreaper.
			})
			if code != 0 || len(orphans) != 1 {
				t.Fatalf("exit %d, members %v: want 0 and the orphan", code, orphans)
			}
			g.Release()
			if slices.Contains(cgroup.SpareNames(m, cgroup.User), path) {
				t.Fatalf("%s kept with the orphan %v in it", path, orphans)
			}
			for _, pid := range orphans {
				syscall.Kill(pid, syscall.SIGKILL)
			}

			// An OOM kill: not handed out again.
			if perr != nil {
				return // no memory hierarchy here
			}
			o, err := m.Group(cgroup.User).NewChild()
			if err != nil {
				t.Fatal(err)
			}
			if err := o.SetMemoryLimit(16 << 20); err != nil {
				t.Fatal(err)
			}
			if code := runIn(t, o, "/usr/bin/python3", "-c", "b = bytearray(256 << 20)"); code != -1 {
				t.Fatalf("past its limit: exit %d, want killed", code)
			}
			if n, err := o.OOMKills(); err != nil || n == 0 {
				t.Fatalf("OOM kills %d, %v: want the kill counted", n, err)
			}
			o.Release()
			if slices.Contains(cgroup.SpareNames(m, cgroup.User), o.Path()) {
				t.Fatalf("%s kept after an OOM kill", o.Path())
			}
		})
	}
}

// exists tells whether cgroup rel of m's tree is there (in the first
// hierarchy: v2's, or v1's freezer).
func exists(t *testing.T, m *cgroup.Manager, rel string) bool {
	t.Helper()
	_, err := os.Stat(cgroup.Dir(m, rel))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}
