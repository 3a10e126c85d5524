package e2e_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/internal/testutil"
)

// TestSIGTERMShutdown: envd with a mix of children (a shell whose background
// job becomes an orphan, an interactive login shell on a PTY, which ignores
// SIGTERM, and a shell that ignores SIGTERM on purpose) exits 0 on SIGTERM
// within the grace period plus a margin, and leaves none of them, nor their
// children, running.
func TestSIGTERMShutdown(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{})
	pc := processClient(streamClient(t), e.url)

	started := map[string]*pb.StartRequest{
		"orphan-to-be": {Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", "sleep 300 & sleep 300"}}},
		"pty login shell": {
			Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-i", "-l"}},
			Pty:     &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}},
		},
		"ignores TERM": {Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", `trap "" TERM; sleep 300`}}},
		// The trailing command keeps bash from exec'ing sleep: bash and its
		// child both ignore SIGTERM, and the child is orphaned when bash is
		// killed.
		"ignores TERM with a child": {Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", `trap "" TERM; sleep 300; true`}}},
		"plain sleep":               {Process: &pb.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"300"}}},
		"waiting shell": {
			Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", "sleep 300 & wait"}},
		},
	}
	pids := map[uint32]string{}
	for name, req := range started {
		pids[startProcess(t, pc, req)] = name
	}

	// Wait for the whole tree: 6 sleeps (2 + 1 + 1 + 1 + 1) and the PTY shell.
	var tree []proc
	testutil.Poll(t, "6 sleeps below envd", func() bool {
		tree = descendants(e.cmd.Process.Pid)
		sleeps := 0
		for _, p := range tree {
			if p.Comm == "sleep" {
				sleeps++
			}
		}
		return sleeps >= 6
	})
	for pid, name := range pids {
		if !containsPid(tree, int(pid)) {
			t.Errorf("%s (pid %d) is not below envd (pid %d): %v", name, pid, e.cmd.Process.Pid, describe(tree))
		}
	}
	t.Logf("process tree before SIGTERM: %v", describe(tree))
	// The shells that ignore SIGTERM have installed their traps (the
	// interactive one ignores it once it is ready), or the test would not
	// test them.
	for pid, name := range pids {
		if strings.HasPrefix(name, "ignores TERM") || name == "pty login shell" {
			testutil.Poll(t, name+" to ignore SIGTERM", func() bool { return ignores(int(pid), syscall.SIGTERM) })
		}
	}

	began := time.Now()
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Children that ignore SIGTERM get SIGKILL after the grace period.
	code := e.wait(t, shutdownGrace+testutil.Wait)
	t.Logf("envd exited %d after %v (grace %v)", code, time.Since(began), shutdownGrace)
	if code != 0 {
		t.Errorf("envd exit code %d, want 0\nstderr:\n%s", code, e.stderr)
	}

	var survivors []string
	for _, p := range tree {
		if p.running() {
			survivors = append(survivors, fmt.Sprintf("%d(%s)", p.Pid, p.Comm))
			p.killIfSame()
		}
	}
	if len(survivors) > 0 {
		t.Errorf("processes left running after envd exited: %v\nstderr:\n%s", survivors, e.stderr)
	}
	logs := e.stderr.String()
	for _, want := range []string{"shutting down", "killed children that ignored SIGTERM", "envd stopped"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
}

// TestSIGINTShutdown: SIGINT stops envd as SIGTERM does, at once when its
// children go quietly.
func TestSIGINTShutdown(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{})
	pc := processClient(streamClient(t), e.url)
	pid := startProcess(t, pc, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"300"}}})
	p, ok := readProc(int(pid))
	if !ok {
		t.Fatalf("pid %d not in /proc", pid)
	}
	e.cmd.Process.Signal(syscall.SIGINT)
	if code := e.wait(t, shutdownGrace+testutil.Wait); code != 0 {
		t.Errorf("exit code %d, want 0\n%s", code, e.stderr)
	}
	// Nothing waited for a grace period to run out.
	for _, unwanted := range []string{"killed children", "after the grace period"} {
		if strings.Contains(e.stderr.String(), unwanted) {
			t.Errorf("log says %q though the only child obeys SIGTERM:\n%s", unwanted, e.stderr)
		}
	}
	if p.running() {
		t.Errorf("sleep (pid %d) still running", pid)
		p.killIfSame()
	}
}

// ignores tells whether pid ignores sig (its SigIgn mask in /proc).
func ignores(pid int, sig syscall.Signal) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if mask, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64)
			return err == nil && m&(1<<(uint(sig)-1)) != 0
		}
	}
	return false
}

func containsPid(ps []proc, pid int) bool {
	for _, p := range ps {
		if p.Pid == pid {
			return true
		}
	}
	return false
}

func describe(ps []proc) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%d<-%d:%s", p.Pid, p.PPid, p.Comm))
	}
	return out
}
