package filesystem

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
)

// kernelStatus is the start of /proc/PID/status as the kernel writes it
// for a process named comm (its name escaped as proc_task_name does:
// a newline and a backslash as "\n" and "\\", the name cut at 15 bytes or
// at a NUL, as a task's comm is).
func kernelStatus(comm string, tgid uint32) []byte {
	comm, _, _ = strings.Cut(comm, "\x00")
	if len(comm) > 15 {
		comm = comm[:15]
	}
	name := strings.NewReplacer("\\", `\\`, "\n", `\n`).Replace(comm)
	return fmt.Appendf(nil, "Name:\t%s\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t%d\nNgid:\t0\nPid:\t%d\nPPid:\t1\nTracerPid:\t0\n",
		name, tgid, tgid+1)
}

// FuzzParseTgid: whatever a status file holds, parseTgid gives a Tgid
// without blanks or line breaks, never a panic; and whatever name a
// process gives itself (prctl PR_SET_NAME: sandbox code's choice), its
// status read as tgidOf reads it (its first 512 bytes) gives its own Tgid,
// so no process can pass for envd.
func FuzzParseTgid(f *testing.F) {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		f.Add(b, "cat", uint32(1))
	}
	f.Add([]byte("Name:\tx\nTgid:\t 42 \n"), "Tgid:\t1", uint32(42))
	f.Add([]byte("Name:\tx\\nTgid:\t1\nTgid:\t2\n"), "x\nTgid:\t1\n", uint32(2))
	f.Add([]byte("Name:\tkthreadd\nUmask:\t0000\nState:\tS\n"), "\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\", uint32(1<<31))
	f.Add([]byte("\nTgid:"), "a\x00\nTgid:\t1", uint32(0))
	f.Fuzz(func(t *testing.T, data []byte, comm string, tgid uint32) {
		if got := parseTgid(data); strings.ContainsAny(got, "\n") || strings.TrimSpace(got) != got {
			t.Fatalf("parseTgid(%q) = %q", data, got)
		}
		status := kernelStatus(comm, tgid)
		status = status[:min(len(status), 512)] // what tgidOf reads
		if got, want := parseTgid(status), fmt.Sprint(tgid); got != want {
			t.Fatalf("process named %q: Tgid %q, want %s\n%s", comm, got, want, status)
		}
		if bytes.Count(status, []byte("\n")) < 4 {
			t.Fatalf("status cut short:\n%s", status)
		}
	})
}
