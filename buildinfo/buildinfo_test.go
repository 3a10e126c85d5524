package buildinfo_test

import (
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/envd-dev/envd/buildinfo"
)

// semver is semver.org's own pattern for a version, with its pre-release
// and build metadata.
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// pep440 is a PEP 440 final release with an optional local version label.
var pep440 = regexp.MustCompile(`^\d+(\.\d+)*(\+[a-z0-9]+([._-][a-z0-9]+)*)?$`)

func TestVersion(t *testing.T) {
	t.Parallel()
	// A test binary carries no VCS stamp: "unknown"; a stamped one 12 hex
	// digits, maybe -dirty.
	c := buildinfo.Commit()
	if !regexp.MustCompile(`^(unknown|[0-9a-f]{12})(-dirty)?$`).MatchString(c) {
		t.Errorf("Commit() = %q", c)
	}
	v := buildinfo.Version()
	if !semver.MatchString(v) {
		t.Errorf("Version() = %q, not semver", v)
	}
	if m := semver.FindStringSubmatch(v); m != nil && m[4] != "" {
		t.Errorf("Version() = %q has a pre-release, which sorts before %s: the SDKs' gates would close", v, buildinfo.WireVersion)
	}
	// The Python SDK compares with packaging's Version (PEP 440): a release
	// with a local label of dot-separated lowercase letters and digits.
	if !pep440.MatchString(v) {
		t.Errorf("Version() = %q is not a PEP 440 version: the Python SDK could not compare it", v)
	}
	if !strings.HasPrefix(v, buildinfo.WireVersion) {
		t.Errorf("Version() = %q, want it to start with %s", v, buildinfo.WireVersion)
	}
	if c != "unknown" && v != buildinfo.WireVersion+"+"+strings.ReplaceAll(c, "-", ".") {
		t.Errorf("Version() = %q, want %s with the commit %s as build metadata", v, buildinfo.WireVersion, c)
	}
	if !semver.MatchString(buildinfo.WireVersion) {
		t.Errorf("WireVersion %q is not semver", buildinfo.WireVersion)
	}
	if d := buildinfo.Describe(); !strings.HasPrefix(d, "(commit "+c+", ") || !strings.HasSuffix(d, runtime.Version()+")") {
		t.Errorf("Describe() = %q", d)
	}
}
