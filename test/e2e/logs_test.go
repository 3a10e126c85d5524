package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/internal/testutil"
)

// TestJSONLogsEveryLine: with -log-format json every line envd writes is
// one JSON object, the sweeps of what a dead envd left included (its
// kernels' startup files, its Jupyter runtime directory: they once logged
// through slog's default logger, in text), and a sweep that removed a
// directory says so at DEBUG, with no "error" key. Code that ran out of
// time is told at INFO.
func TestJSONLogsEveryLine(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	var stale []string
	for _, prefix := range []string{"envd-kernel-startup-", "envd-jupyter-"} {
		d := filepath.Join(tmp, fmt.Sprintf("%s%d-e2e", prefix, dead.Process.Pid))
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		stale = append(stale, d)
	}
	e := startEnvd(t, startOptions{jupyter: true, env: []string{"TMPDIR=" + tmp},
		args: []string{"-log-format", "json", "-log-level", "debug"}})
	if !testutil.PollFor(30*time.Second, func() bool {
		for _, d := range stale {
			if _, err := os.Lstat(d); err == nil {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("stale directories %v not removed", stale)
	}
	c := client.New(client.Options{Addr: e.url})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), codeTimeout)
	defer cancel()
	run, err := c.Execute(ctx, "import time\ntime.sleep(60)", client.ExecOptions{Timeout: time.Second})
	if err != nil {
		t.Fatalf("Execute: %v\n%s", err, e.stderr)
	}
	if res, err := run.Wait(); err != nil || res.Reason != client.EndTimedOut {
		t.Errorf("a run past its timeout ended with %+v, %v", res, err)
	}
	e.cmd.Process.Signal(syscall.SIGTERM)
	if code := e.wait(t, shutdownGrace+requestTimeout); code != 0 {
		t.Errorf("exit code %d", code)
	}
	removed, timedOut := 0, 0
	lines := strings.Split(strings.TrimSuffix(e.stderr.String(), "\n"), "\n")
	for _, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("not a JSON line: %q", line)
			continue
		}
		if rec["msg"] == "execution timed out" && rec["level"] == "INFO" && rec["timeout"] == float64(time.Second) {
			timedOut++
		}
		if msg, _ := rec["msg"].(string); strings.HasPrefix(msg, "removed a stale") {
			removed++
			if rec["level"] != "DEBUG" || rec["error"] != nil {
				t.Errorf("a sweep that removed a directory: %s", line)
			}
		}
	}
	if removed != len(stale) {
		t.Errorf("%d lines tell of a stale directory removed, want %d:\n%s", removed, len(stale), e.stderr)
	}
	if timedOut != 1 {
		t.Errorf("%d lines tell of the execution that timed out, want 1:\n%s", timedOut, e.stderr)
	}
	if len(lines) < 5 {
		t.Errorf("only %d lines logged:\n%s", len(lines), e.stderr)
	}
}
