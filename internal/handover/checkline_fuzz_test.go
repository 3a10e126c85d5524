package handover

import (
	"fmt"
	"strconv"
	"testing"
)

// FuzzCheckLine: whatever a new binary's preflight prints (the binary is
// the one POST /upgrade names), parseCheckLine reads a version and a
// schema range or nothing, without a panic; a check line of any version
// and range, as CheckLine writes it, reads back exactly, this envd's own
// included.
func FuzzCheckLine(f *testing.F) {
	for _, s := range []struct {
		out, version string
		lo, hi       uint32
	}{
		{CheckLine("1.2.3"), "1.2.3", 1, 1},
		{"envd-handover version=\"0.9\" reads=1-99999999999\n", "0.9+dirty", 0, 1<<32 - 1},
		{"envd-handover version=\"a\\\"b\\\\\" reads=2-1", "quote\"back\\slash", 2, 1},
		{"  envd-handover version=\"\\xff\\u00e9\" reads=01-002  \n", "\xff\x00\n", 1, 2},
		{"envd-handover version=\"x\" reads=1-1\nmore", "", 0, 0},
		{"envd-handover version=x reads=1-1", "x", 1, 1},
		{"usage: envd [flags]", "é漢😀", 7, 7},
	} {
		f.Add([]byte(s.out), s.version, s.lo, s.hi)
	}
	f.Fuzz(func(t *testing.T, out []byte, version string, lo, hi uint32) {
		parseCheckLine(out)
		line := fmt.Sprintf("envd-handover version=%s reads=%d-%d\n", strconv.Quote(version), lo, hi)
		info, ok := parseCheckLine([]byte(line))
		if want := (Info{Version: version, ReadsLo: lo, ReadsHi: hi}); !ok || info != want {
			t.Fatalf("parseCheckLine(%q) = %+v, %v; want %+v", line, info, ok, want)
		}
		wlo, whi := Reads()
		if info, ok := parseCheckLine([]byte(CheckLine(version))); !ok || info != (Info{Version: version, ReadsLo: wlo, ReadsHi: whi}) {
			t.Fatalf("CheckLine(%q) reads as %+v, %v", version, info, ok)
		}
	})
}
