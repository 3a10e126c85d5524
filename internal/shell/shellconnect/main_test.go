package shellconnect_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/envd-dev/envd/internal/process"
	"github.com/envd-dev/envd/internal/process/processtest"
	"github.com/envd-dev/envd/internal/reaper"
)

// TestMain makes the test binary a child subreaper with the real reap loop,
// as envd runs, so every wait goes through the daemon's path and orphans the
// tests make are reaped.
func TestMain(m *testing.M) {
	process.LeaveSignalsDefault() // however the tests were started
	if err := reaper.Enable(processtest.Logger()); err != nil {
		fmt.Fprintln(os.Stderr, "reaper:", err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m,
		// The reap loop lives as long as the process, as in envd.
		goleak.IgnoreAnyFunction("github.com/envd-dev/envd/internal/reaper.enable.func1"),
	)
}
