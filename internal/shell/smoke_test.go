package shell_test

import (
	"os/exec"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/process"
	"github.com/envd-dev/envd/internal/shell"
)

// runAll runs cmd in s and collects its output and end.
func runAll(tb testing.TB, s *shell.Session, cmd string) (out, errOut string, end shell.End) {
	tb.Helper()
	_, r, err := s.Run(shell.RunOptions{Command: cmd})
	if err != nil {
		tb.Fatal(err)
	}
	defer r.Close()
	deadline := time.After(20 * time.Second)
	for {
		evs, done := r.Next()
		for _, e := range evs {
			switch e.Kind {
			case shell.EventOutput:
				if e.Stream == process.Stderr {
					errOut += string(e.Data)
				} else {
					out += string(e.Data)
				}
			case shell.EventEnd:
				end = e.End
			}
		}
		if done {
			return
		}
		select {
		case <-r.Ready():
		case <-deadline:
			tb.Fatalf("no end; so far %q %q", out, errOut)
		}
	}
}

// BenchmarkCommand runs `true` in a session, end to end through the
// domain (the line written, the markers found, the end message read), and
// in the same run the baseline: `bash -c true` started and waited for
// directly. It reports envd's time over the baseline's (a command in a
// session needs no fork of a shell, so the ratio may be under 1).
//
//	go test -run '^$' -bench Command ./internal/shell/
func BenchmarkCommand(b *testing.B) {
	pm := process.NewManager(process.Options{})
	m := shell.New(shell.Options{Processes: pm})
	u, err := identity.Current()
	if err != nil {
		b.Fatal(err)
	}
	s, err := m.Create(shell.CreateOptions{User: u, Dir: "/tmp"})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Cleanup()
	defer m.Close(s.ID(), nil)
	var viaShell, direct time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, _, end := runAll(b, s, "true"); end.Reason != shell.EndExited || end.ExitCode != 0 {
			b.Fatalf("true: %+v", end)
		}
		viaShell += time.Since(t0)
		t0 = time.Now()
		if err := exec.Command("bash", "-c", "true").Run(); err != nil {
			b.Fatal(err)
		}
		direct += time.Since(t0)
	}
	b.ReportMetric(float64(viaShell.Microseconds())/float64(b.N), "us/command")
	b.ReportMetric(float64(direct.Microseconds())/float64(b.N), "us/direct")
	b.ReportMetric(float64(viaShell)/float64(direct), "ratio")
}
