package main

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/envd-dev/envd/client"
)

func TestCompleteAt(t *testing.T) {
	t.Parallel()
	// ask completes the identifier before the cursor against names, as a
	// kernel does (positions in code points).
	names := []string{"héllo_world", "héllo_there", "print"}
	var asked []string
	ask := func(code string, cursor int) (*client.Completion, error) {
		asked = append(asked, string([]rune(code)[:cursor])+"|")
		r := []rune(code)
		start := cursor
		for start > 0 && (r[start-1] == '_' || r[start-1] >= 'a' && r[start-1] <= 'z' || r[start-1] > 0x7f) {
			start--
		}
		if strings.HasPrefix(string(r[start:cursor]), "fail") {
			return nil, errors.New("busy")
		}
		c := &client.Completion{Start: start, End: cursor}
		for _, n := range names {
			if strings.HasPrefix(n, string(r[start:cursor])) {
				c.Matches = append(c.Matches, n)
			}
		}
		return c, nil
	}
	for _, tc := range []struct {
		name, pending, line string
		pos                 int // bytes; -1: the end
		want                string
		wantPos             int // bytes
		list                []string
	}{
		{"one match", "", "x = pri", -1, "x = print", 9, nil},
		{"common prefix", "", "hé", -1, "héllo_", 7, nil},
		{"nothing to add: listed", "", "héllo_", -1, "héllo_", 7, []string{"héllo_world", "héllo_there"}},
		{"cursor inside", "", "pri + 1", 3, "print + 1", 5, nil},
		{"in a block", "for i in x:\n", "    héllo_w", -1, "    héllo_world", 16, nil},
		{"indent", "if x:\n", "", 0, "    ", 4, nil},
		{"no match", "", "zzz", -1, "zzz", 3, nil},
		{"error", "", "fail", -1, "fail", 4, nil},
	} {
		pos := tc.pos
		if pos < 0 {
			pos = len(tc.line)
		}
		asked = nil
		c := completeAt(tc.pending, tc.line, pos, ask)
		if c.line != tc.want || c.pos != tc.wantPos || !slices.Equal(c.list, tc.list) {
			t.Errorf("%s: %q at %d, list %q; want %q at %d, list %q (asked %q)", tc.name, c.line, c.pos, c.list,
				tc.want, tc.wantPos, tc.list, asked)
		}
		if tc.pending != "" && len(asked) > 0 && !strings.HasPrefix(asked[0], tc.pending) {
			t.Errorf("%s: asked %q without the block's lines", tc.name, asked)
		}
	}
}

func TestColumns(t *testing.T) {
	t.Parallel()
	got := columns([]string{"bb", "a", "ccc"}, 10)
	if got != "a    bb\r\nccc\r\n" {
		t.Errorf("columns: %q", got)
	}
	many := make([]string, maxListed+5)
	for i := range many {
		many[i] = "x"
	}
	if got := columns(many, 80); !strings.HasSuffix(got, "... and 5 more\r\n") {
		t.Errorf("many: %q", got[len(got)-40:])
	}
}
