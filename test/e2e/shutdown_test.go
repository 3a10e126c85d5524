package e2e_test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/envd-dev/envd/gen/process"
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
	deadline := time.Now().Add(requestTimeout)
	for {
		tree = descendants(e.cmd.Process.Pid)
		sleeps := 0
		for _, p := range tree {
			if p.comm == "sleep" {
				sleeps++
			}
		}
		if sleeps >= 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("want 6 sleeps below envd, have %d: %v", sleeps, describe(tree))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for pid, name := range pids {
		if !containsPid(tree, int(pid)) {
			t.Errorf("%s (pid %d) is not below envd (pid %d): %v", name, pid, e.cmd.Process.Pid, describe(tree))
		}
	}
	t.Logf("process tree before SIGTERM: %v", describe(tree))
	// Let the shells install their traps and the login shell read its profile.
	time.Sleep(300 * time.Millisecond)

	began := time.Now()
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Children that ignore SIGTERM get SIGKILL after the grace period; the
	// margin covers a -race binary on a busy machine.
	const margin = 5 * time.Second
	code := e.wait(t, shutdownGrace+margin+requestTimeout)
	took := time.Since(began)
	t.Logf("envd exited %d after %v (grace %v)", code, took, shutdownGrace)
	if code != 0 {
		t.Errorf("envd exit code %d, want 0\nstderr:\n%s", code, e.stderr)
	}
	if took > shutdownGrace+margin {
		t.Errorf("shutdown took %v, want at most the grace %v plus %v", took, shutdownGrace, margin)
	}

	var survivors []string
	for _, p := range tree {
		if p.running() {
			survivors = append(survivors, fmt.Sprintf("%d(%s)", p.pid, p.comm))
			p.killIfSame()
		}
	}
	if len(survivors) > 0 {
		t.Errorf("processes left running after envd exited: %v\nstderr:\n%s", survivors, e.stderr)
	}
	logs := e.stderr.String()
	for _, want := range []string{"shutting down", "envd stopped"} {
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
	began := time.Now()
	e.cmd.Process.Signal(syscall.SIGINT)
	if code := e.wait(t, shutdownGrace+requestTimeout); code != 0 {
		t.Errorf("exit code %d, want 0\n%s", code, e.stderr)
	}
	if took := time.Since(began); took > shutdownGrace {
		t.Errorf("shutdown took %v though the only child obeys SIGTERM", took)
	}
	if p.running() {
		t.Errorf("sleep (pid %d) still running", pid)
		p.killIfSame()
	}
}

func containsPid(ps []proc, pid int) bool {
	for _, p := range ps {
		if p.pid == pid {
			return true
		}
	}
	return false
}

func describe(ps []proc) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%d<-%d:%s", p.pid, p.ppid, p.comm))
	}
	return out
}
