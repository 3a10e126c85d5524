package buildinfo_test

import (
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/envd-dev/envd/internal/buildinfo"
)

func TestDescribe(t *testing.T) {
	t.Parallel()
	// A test binary carries no VCS stamp: "unknown"; a stamped one 12 hex
	// digits, maybe -dirty.
	if c := buildinfo.Commit(); !regexp.MustCompile(`^(unknown|[0-9a-f]{12})(-dirty)?$`).MatchString(c) {
		t.Errorf("Commit() = %q", c)
	}
	if d := buildinfo.Describe(); !strings.HasPrefix(d, "(commit "+buildinfo.Commit()+", ") || !strings.HasSuffix(d, runtime.Version()+")") {
		t.Errorf("Describe() = %q", d)
	}
}
