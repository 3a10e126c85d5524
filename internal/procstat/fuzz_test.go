package procstat

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// format writes st as the kernel writes /proc/<pid>/stat, all 52 fields,
// those the parser does not keep as zeros.
func format(st Stat) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d (%s) %s %d %d %d 0 %d", st.Pid, st.Comm, []byte{st.State}, st.PPid, st.PGrp, st.Session, st.TPGid)
	for i := 7; i < 20; i++ { // fields 8 to 20 of the state's (tty is 7th)
		if i == 12 { // utime; stime, the next, stays 0
			fmt.Fprintf(&b, " %d", st.CPU)
			continue
		}
		b.WriteString(" 0")
	}
	fmt.Fprintf(&b, " %d", st.Start)
	for i := 21; i < 52; i++ {
		b.WriteString(" 0")
	}
	b.WriteString("\n")
	return b.String()
}

// FuzzParse: any stat line, the command name being what a process chose
// (prctl PR_SET_NAME, the name of the file it execs: spaces, parentheses,
// newlines), is parsed or refused with errFormat, never with a panic, and
// what is parsed comes back the same once written as the kernel writes it.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"42 (sleep) S 1 42 7 0 -1",
		"42 (a) b (c)) Z 3 4 5 0",
		"42 (bash) S 1 42 7 34816 43 4194560 1 2 0 0 3 4 0 0 20 0 1 0 123456 9 10 11",
		"42 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 99999999999999999999999",
		"42 ()) ) R -1 -2 -3 0 -4",
		"42 (\n) S 1 2 3\n",
		"42 (x",
		"42 x) S 1 2 3",
		")(",
		"",
	} {
		f.Add(s)
	}
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		f.Add(string(b))
	}
	f.Add(format(Stat{Pid: 7, State: 'S', PPid: 1, PGrp: 7, Session: 7, TPGid: -1, Start: 1 << 40, Comm: "a (b) c"}))
	f.Fuzz(func(t *testing.T, line string) {
		st, err := parse(42, line)
		if err != nil {
			if err != errFormat {
				t.Fatalf("parse(%q): %v, want errFormat", line, err)
			}
			return
		}
		if st.Pid != 42 {
			t.Fatalf("parse(%q) = %+v: not pid 42", line, st)
		}
		if strings.ContainsRune(" \t\n\v\f\r", rune(st.State)) || st.State == ')' {
			t.Fatalf("parse(%q): state %q", line, st.State)
		}
		again, err := parse(42, format(st))
		if err != nil || again != st {
			t.Fatalf("parse(%q) = %+v; written again and parsed: %+v, %v", line, st, again, err)
		}
	})
}
