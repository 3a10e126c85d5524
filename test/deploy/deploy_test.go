// Package deploy_test checks the deployment examples in deploy/ against the
// real envd: each file is parsed and checked for what its consumer
// requires (systemd for deploy/firecracker/envd.service, the agent-sandbox
// CRD and the NetworkPolicy API for deploy/kubernetes, E2B's CLI for
// deploy/e2b-template), and each way a deployment starts envd is run, with
// its exact command line read from its file, against cmd/envd built by the
// test: in fresh network, pid and mount namespaces (see sandbox_test.go),
// where the test checks /health, a command and a file round trip.
//
// The tests need root (namespaces, cgroups) and the tools
// scripts/install-deps.sh installs: unshare, ip, mount, systemd-analyze,
// curl, and Jupyter for the E2B template's run. A missing one fails its test
// with what to install; none is skipped. Everything a test starts is ended
// by pid, and its namespaces and cgroups go with it.
package deploy_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/envd-dev/envd/internal/testutil"
)

// envdBin is cmd/envd, built by TestMain (with -race under -race).
var envdBin string

func TestMain(m *testing.M) {
	bin, err := testutil.Build("envd", testutil.RaceEnabled)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	envdBin = bin
	goleak.VerifyTestMain(&cleanupM{m: m})
}

// cleanupM removes the built binary once the tests ran, before goleak
// checks for leaks and exits.
type cleanupM struct{ m *testing.M }

func (c *cleanupM) Run() int {
	code := c.m.Run()
	testutil.RemoveBuilt()
	return code
}

// repoPath is the absolute path of a file of the repository, which must
// exist.
func repoPath(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// readRepoFile is the content of a file of the repository.
func readRepoFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(repoPath(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// installHint says where the tools these tests run come from.
const installHint = "scripts/install-deps.sh installs it (make deps)"

// requireTool returns the path of a program the test runs, failing the test
// (never skipping it) when the machine lacks it: pkg is the Debian package
// that has it.
func requireTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed (Debian package %s): %s", name, pkg, installHint)
	}
	return p
}

// requireRoot fails the test when it does not run as root.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("running a deployment's envd needs root (namespaces, mounts, cgroups): run the tests as root, as make test does")
	}
}

// parseDockerfile reads the repository's Dockerfile rel.
func parseDockerfile(t *testing.T, rel string) []testutil.DockerInstr {
	t.Helper()
	return testutil.ParseDockerfile(readRepoFile(t, rel))
}
