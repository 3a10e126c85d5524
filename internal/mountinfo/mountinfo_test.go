package mountinfo_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/envd-dev/envd/internal/mountinfo"
)

func TestParse(t *testing.T) {
	in := `22 1 0:21 / /sys/fs/cgroup/memory rw,relatime shared:7 - cgroup cgroup rw,memory
23 1 0:22 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
24 1 0:23 /sub /mnt/with\040space rw - nfs4 host:/export\040x rw,vers=4.2
malformed line
25 1 0:24 / /x rw -
`
	ms, err := mountinfo.Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 {
		t.Fatalf("%d mounts, want 3: %+v", len(ms), ms)
	}
	if m := ms[0]; m.Point != "/sys/fs/cgroup/memory" || m.FSType != "cgroup" || !slices.Contains(m.Super, "memory") {
		t.Errorf("v1 cgroup: %+v", m)
	}
	if m := ms[2]; m.Root != "/sub" || m.Point != "/mnt/with space" || m.FSType != "nfs4" || m.Source != "host:/export x" {
		t.Errorf("escaped: %+v", m)
	}
	for in, want := range map[string]string{`a\040b`: "a b", `\134`: `\`, `tail\04`: `tail\04`, `\999`: `\999`, "plain": "plain"} {
		if got := mountinfo.Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRead(t *testing.T) {
	ms, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(ms, func(m mountinfo.Mount) bool { return m.Point == "/" }) {
		t.Errorf("no root mount among %d", len(ms))
	}
}
