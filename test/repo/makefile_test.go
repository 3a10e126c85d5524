package repo_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestMakeRunInstallsNoTestDeps: the README's first command installs what
// running envd needs and nothing only the tests use (install-deps.sh
// leaves out the SDK suite's npm tree and the test tools with
// ENVD_SKIP_COMPAT=1: minutes on a fresh clone); the second installs it all.
func TestMakeRunInstallsNoTestDeps(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	install := func(target string) string {
		t.Helper()
		cmd := exec.Command("make", "-n", "--no-print-directory", target)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("make -n %s: %v", target, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "scripts/install-deps.sh") {
				return strings.TrimSpace(line)
			}
		}
		t.Fatalf("make -n %s runs no scripts/install-deps.sh:\n%s", target, out)
		return ""
	}
	if got := install("run"); got != "ENVD_SKIP_COMPAT=1 scripts/install-deps.sh" {
		t.Errorf("make run installs with %q: want ENVD_SKIP_COMPAT=1 scripts/install-deps.sh", got)
	}
	if got := install("test"); got != "scripts/install-deps.sh" {
		t.Errorf("make test installs with %q: want everything (scripts/install-deps.sh)", got)
	}
}
