package e2e_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSecondEnvdLeavesTree: a second envd started while one runs, with the
// same port and cgroup tree, fails to bind, and on its way out leaves the
// running envd's cgroups alone: only the envd that owns a tree removes it.
func TestSecondEnvdLeavesTree(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("cgroups need root")
	}
	tree := "envd-e2e-" + randomName()
	port := freePort(t)
	first := startEnvd(t, startOptions{port: port, args: []string{"-cgroup-tree", tree}})
	dirs := treeDirs(t, first.cmd.Process.Pid, tree)
	if len(dirs) == 0 {
		t.Skipf("envd runs without cgroups here:\n%s", first.stderr)
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "user")); err != nil {
			t.Fatalf("the first envd's tree: %v\n%s", err, first.stderr)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	second := exec.CommandContext(ctx, envdBin, "-host", "127.0.0.1", "-port", strconv.Itoa(port), "-code-port", "0",
		"-no-jupyter", "-cgroup-tree", tree)
	second.Env = cleanEnv()
	out, err := second.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "listen on port "+strconv.Itoa(port)) {
		t.Fatalf("the second envd: %v, want it to fail to bind\n%s", err, out)
	}
	for _, d := range dirs {
		for _, rel := range []string{"", "user", "pty"} {
			if _, err := os.Stat(filepath.Join(d, rel)); err != nil {
				t.Errorf("the second envd removed the running one's cgroup: %v\nits output:\n%s", err, out)
			}
		}
	}
	if !strings.Contains(string(out), "another running envd uses this cgroup tree") {
		t.Errorf("the second envd did not say it leaves the tree:\n%s", out)
	}
}

// treeDirs are the directories of envd pid's cgroup tree, in the hierarchies
// it uses (read from /proc/PID/cgroup: v1's freezer, else v2 under
// /sys/fs/cgroup).
func treeDirs(t *testing.T, pid int, tree string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var v2 string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "freezer" {
				if d := filepath.Join("/sys/fs/cgroup/freezer", parts[2], tree); exists(d) {
					return []string{d}
				}
			}
		}
		if parts[0] == "0" {
			v2 = parts[2]
		}
	}
	for _, mnt := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if d := filepath.Join(mnt, v2, tree); exists(d) {
			return []string{d}
		}
	}
	return nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
