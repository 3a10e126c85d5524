package procstat

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, line string
		want       Stat
		bad        bool
	}{
		{name: "plain", line: "42 (sleep) S 1 42 7 0 -1", want: Stat{Pid: 42, State: 'S', PPid: 1, PGrp: 42, Session: 7, Comm: "sleep"}},
		{name: "name with spaces and parentheses", line: "42 (a) b (c)) Z 3 4 5 0", want: Stat{Pid: 42, State: 'Z', PPid: 3, PGrp: 4, Session: 5, Comm: "a) b (c)"}},
		{name: "whole line", line: "42 (bash) S 1 42 7 34816 43 4194560 1 2 0 0 3 4 0 0 20 0 1 0 123456 9 10 11",
			want: Stat{Pid: 42, State: 'S', PPid: 1, PGrp: 42, Session: 7, TPGid: 43, Start: 123456, Comm: "bash", CPU: 3 + 4}},
		{name: "bad start time", line: "42 (bash) S 1 42 7 34816 43 4194560 1 2 0 0 3 4 0 0 20 0 1 0 soon 9", bad: true},
		{name: "no parenthesis", line: "42 sleep S 1 2 3", bad: true},
		{name: "too few fields", line: "42 (x) S 1 2", bad: true},
		{name: "not a number", line: "42 (x) S 1 two 3", bad: true},
		{name: "empty", line: "", bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parse(42, tc.line)
			if tc.bad {
				if !errors.Is(err, errFormat) {
					t.Fatalf("parse(%q) = %+v, %v; want errFormat", tc.line, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parse(%q) = %+v, %v; want %+v", tc.line, got, err, tc.want)
			}
		})
	}
}

// TestReadChild: a child started in a group of its own reads with envd's
// test binary as its parent and its pid as its group; once reaped it is gone.
func TestReadChild(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	st, err := Read(pid)
	if err != nil {
		t.Fatal(err)
	}
	if st.PPid != os.Getpid() || st.PGrp != pid || st.Pid != pid || st.Comm != "sleep" || st.Start == 0 {
		t.Errorf("Read(%d) = %+v: want parent %d and group %d", pid, st, os.Getpid(), pid)
	}
	if got := Select(func(s Stat) bool { return s.PGrp == pid }); !slices.Equal(got, []int{pid}) {
		t.Errorf("Select(group %d) = %v, want [%d]", pid, got, pid)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := Read(pid); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read of a reaped child: %v, want fs.ErrNotExist", err)
	}
}
