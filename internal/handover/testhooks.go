package handover

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// testHooks is set to "1" only by test builds (-ldflags -X); production
// builds leave it empty and ignore the variables below. The e2e tests
// start an old envd with these variables set; the test build they upgrade
// to (its preflight and the exec'd envd inherit them) then claims another
// schema range or fails its adoption, so the tests can see the old envd
// refuse it, or come back.
var testHooks string

const (
	// envTestReads, "LO-HI", replaces the schemas a test build reads.
	envTestReads = "ENVD_TEST_HANDOVER_READS"
	// envTestFail, "panic", makes a test build's adoption panic.
	envTestFail = "ENVD_TEST_HANDOVER_FAIL"
)

func testReads() (lo, hi uint32, ok bool) {
	v := os.Getenv(envTestReads)
	if testHooks != "1" || v == "" {
		return 0, 0, false
	}
	a, b, _ := strings.Cut(v, "-")
	l, err1 := strconv.ParseUint(a, 10, 32)
	h, err2 := strconv.ParseUint(b, 10, 32)
	if err1 != nil || err2 != nil {
		panic(fmt.Sprintf("handover: %s=%q: want LO-HI", envTestReads, v))
	}
	return uint32(l), uint32(h), true
}

// TestFailAdopt panics when a test build is asked to fail its adoption.
func TestFailAdopt() {
	if testHooks == "1" && os.Getenv(envTestFail) == "panic" {
		panic("handover: adoption fails, as " + envTestFail + " asks this test build")
	}
}
