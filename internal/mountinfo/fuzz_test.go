package mountinfo_test

import (
	"bytes"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/envd-dev/envd/internal/mountinfo"
)

// escape writes s as mountinfo does a path, and more: every byte that is
// not printable ASCII, the backslash and the dash (a name "-" would read
// as the separator: the kernel's names are absolute, never "-"), as an
// octal escape.
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' || c == '\\' || c == '-' {
			fmt.Fprintf(&b, `\%03o`, c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// FuzzParse: any mountinfo (mount points and sources are names sandbox
// code may choose, when it may mount) is parsed without a panic into no
// more mounts than lines, each with a filesystem type; written back, with
// its names escaped, it parses the same.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`22 1 0:21 / /sys/fs/cgroup/memory rw,relatime shared:7 - cgroup cgroup rw,memory
23 1 0:22 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
24 1 0:23 /sub /mnt/with\040space rw - nfs4 host:/export\040x rw,vers=4.2
malformed line
25 1 0:24 / /x rw -
`))
	f.Add([]byte("1 2 3:4 /a\\ /b\\1 rw - t s\n1 2 3:4 \\777 \\0400 rw - - - -\n"))
	f.Add([]byte("1 2 3:4 / / rw - ext4 /dev/vda rw,,\r\n\n - \n"))
	f.Add([]byte("1 2 3:4 /a - b - c d e\n"))
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ms, err := mountinfo.Parse(bytes.NewReader(data))
		if err != nil {
			return // a line over the scanner's 1 MiB
		}
		if lines := bytes.Count(data, []byte("\n")) + 1; len(ms) > lines {
			t.Fatalf("%d mounts from %d lines", len(ms), lines)
		}
		var again bytes.Buffer
		for i, m := range ms {
			if m.FSType == "" || strings.ContainsAny(m.FSType, " \t\n") {
				t.Fatalf("mount %d: filesystem type %q", i, m.FSType)
			}
			fmt.Fprintf(&again, "%d 1 0:%d %s %s rw,relatime shared:1 - %s %s", i, i, escape(m.Root), escape(m.Point), m.FSType, escape(m.Source))
			if m.Super != nil {
				again.WriteString(" " + strings.Join(m.Super, ","))
			}
			again.WriteString("\n")
		}
		back, err := mountinfo.Parse(&again)
		if err != nil {
			t.Fatal(err)
		}
		if len(back) != len(ms) || (len(ms) > 0 && !reflect.DeepEqual(back, ms)) {
			t.Fatalf("parsed %+v\nwritten again and parsed %+v\n%q", ms, back, again.String())
		}
		// Unescape undoes any escaping, and never makes a name longer.
		if s := string(data); mountinfo.Unescape(escape(s)) != s || len(mountinfo.Unescape(s)) > len(s) {
			t.Fatalf("Unescape(escape(%q)) = %q; Unescape(%[1]q) = %q", s, mountinfo.Unescape(escape(s)), mountinfo.Unescape(s))
		}
	})
}
