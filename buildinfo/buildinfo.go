// Package buildinfo says which envd a binary is: the version it reports to
// E2B's template builder, SDKs and API (envd -version, X-Envd-Version), and
// the commit it was built from.
//
// The version is a semver whose major, minor and patch are upstream E2B
// envd's version whose wire behaviour envd implements (WireVersion): the
// SDKs and the API compare it against their feature gates, and every gate up
// to it opens for what envd does (docs/wire.md has the table). Its build
// metadata is the commit, so two builds of different commits report
// different versions while comparing equal as semver.
//
// It lives at the module's root rather than under internal/ because envctl
// prints its own version with it (the line envd -version prints, for the
// same commit), and envctl, like the client, must not import envd's
// internals. Builds stamp it by this path:
//
//	-ldflags "-X github.com/envd-dev/envd/buildinfo.commit=..."
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// WireVersion is upstream envd's version whose wire behaviour (RPCs,
// HTTP routes, headers, feature gates) envd implements.
const WireVersion = "0.6.13"

// Stamped by the build with -ldflags "-X ...":
//   - commit: the commit the binary was built from (make build and the
//     Dockerfile stamp it: a container build has no .git for Go to read);
//   - version: the whole version, replacing WireVersion+commit (tests build
//     binaries with versions of their own).
var (
	commit  string
	version string
)

// Commit is the commit the binary was built from: as stamped, else Go's VCS
// stamp (12 hex digits, "-dirty" when the tree had changes), else "unknown"
// (built outside a checkout, or with -buildvcs=false).
func Commit() string {
	if commit != "" {
		return commit
	}
	c, dirty := "unknown", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				c = s.Value[:min(len(s.Value), 12)]
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "-dirty"
				}
			}
		}
	}
	return c + dirty
}

// Version is the version envd reports: WireVersion with the commit as
// build metadata ("0.6.13+0123456789ab", "0.6.13+0123456789ab.dirty"), or
// WireVersion alone when the commit is unknown.
func Version() string {
	if version != "" {
		return version
	}
	c := Commit()
	if c == "unknown" {
		return WireVersion
	}
	// Build metadata is dot-separated [0-9A-Za-z-] identifiers; PEP 440's
	// local versions (the Python SDK) take dots, not dashes.
	return WireVersion + "+" + strings.ReplaceAll(c, "-", ".")
}

// Describe is "(commit C, goX.Y.Z)", what follows a binary's name and
// version on a human-readable version line (envctl --version).
func Describe() string {
	return "(commit " + Commit() + ", " + runtime.Version() + ")"
}
