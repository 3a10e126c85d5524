// Package buildinfo says which source a binary was built from, for the
// -version lines of envd and envctl.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Commit is the VCS revision the binary was built from (12 hex digits,
// "-dirty" when the tree had changes), or "unknown" (built without VCS
// information, e.g. -buildvcs=false or outside a checkout).
func Commit() string {
	commit, dirty := "unknown", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value[:min(len(s.Value), 12)]
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "-dirty"
				}
			}
		}
	}
	return commit + dirty
}

// Describe is "(commit C, goX.Y.Z)", what follows a binary's name and
// version on its -version line.
func Describe() string {
	return "(commit " + Commit() + ", " + runtime.Version() + ")"
}
