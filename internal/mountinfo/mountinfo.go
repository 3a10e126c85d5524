// Package mountinfo reads /proc/self/mountinfo: the mounts this process
// sees, in the order they were made (a later one on the same point covers
// an earlier one).
package mountinfo

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Mount is one line of mountinfo.
type Mount struct {
	Root   string   // the mounted filesystem's directory that appears at Point
	Point  string   // where it is mounted
	FSType string   // "ext4", "cgroup2", "nfs4", ...
	Source string   // the mount source ("server:/export", "/dev/vda", ...)
	Super  []string // the superblock options (a v1 cgroup's controllers)
}

// Read returns the mounts of /proc/self/mountinfo.
func Read() ([]Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ms, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("read /proc/self/mountinfo: %w", err)
	}
	return ms, nil
}

// Parse reads mountinfo lines; malformed ones are skipped.
func Parse(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT POINT OPTIONS [TAGS...] - FSTYPE SOURCE SUPER
		pre, post, cut := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !cut || len(fields) < 5 || len(tail) < 2 {
			continue
		}
		m := Mount{Root: Unescape(fields[3]), Point: Unescape(fields[4]), FSType: tail[0], Source: Unescape(tail[1])}
		if len(tail) > 2 {
			m.Super = strings.Split(tail[2], ",")
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// Unescape undoes mountinfo's octal escapes (\040 for a space).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
