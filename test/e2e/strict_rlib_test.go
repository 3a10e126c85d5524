package e2e_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	pb "github.com/envd-dev/envd/gen/process"
)

// TestStrictRootRLibrary: with -strict-users, R run as root does not load
// packages from the site library install-deps.sh gives the sandbox user
// (/usr/local/lib/R/site-library), which user does. R_LIBS_SITE alone
// was not enough: Debian's /etc/R/Renviron.site puts that library first
// again whatever R_LIBS_SITE says, and did so on the code before the fix.
func TestStrictRootRLibrary(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("Rscript"); err != nil {
		t.Skip("no R")
	}
	const userLib = "/usr/local/lib/R/site-library"
	e := startEnvd(t, startOptions{args: []string{"-strict-users"}})
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	libPaths := &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "Rscript", Args: []string{"-e", `cat(.libPaths(), sep = "\n")`}}}
	out, end, err := run(ctx, clientsFor(t, e, "root").proc, libPaths)
	if err != nil || end.GetExitCode() != 0 {
		t.Fatalf("Rscript as root: %v %v %q", err, end, out)
	}
	if strings.Contains(out, userLib) || !strings.Contains(out, "/usr/lib/R/library") {
		t.Errorf("root's .libPaths():\n%s\nwant R's own libraries without %s", out, userLib)
	}
	out, _, err = run(ctx, clientsFor(t, e, "user").proc, libPaths)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, userLib+"\n") {
		t.Errorf("user's .libPaths():\n%s\nwant %s first", out, userLib)
	}
}
