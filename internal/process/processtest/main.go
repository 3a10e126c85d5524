package processtest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/envd-dev/envd/internal/process"
	"github.com/envd-dev/envd/internal/reaper"
)

// Main is the TestMain of a package whose tests start real processes: the
// test binary leaves every signal at its default disposition for them
// (however the tests were started), becomes a child subreaper with the real
// reap loop, as envd runs, so every wait goes through the daemon's path and
// orphans the tests make are reaped, and fails if a goroutine outlives the
// tests.
func Main(m *testing.M) {
	process.LeaveSignalsDefault()
	if err := reaper.Enable(Logger()); err != nil {
		fmt.Fprintln(os.Stderr, "reaper:", err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m,
		// The reap loop lives as long as the process, as in envd.
		goleak.IgnoreAnyFunction("github.com/envd-dev/envd/internal/reaper.enable.func1"),
	)
}
