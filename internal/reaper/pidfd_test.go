package reaper_test

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/reaper"
)

// TestWaitPidfd: a child reaped through its pidfd ends as wait4 describes
// it (code, signal, usage); before its exit there is nothing yet, and once
// reaped nothing more. The reap loop is paused meanwhile, so the pidfd is
// the only way the child is reaped. Not parallel: Pause stops every test's
// reaping.
func TestWaitPidfd(t *testing.T) {
	tests := []struct {
		name     string
		script   string
		wantCode int
		wantStr  string
	}{
		{name: "success", script: "exit 0", wantCode: 0, wantStr: "exit status 0"},
		{name: "exit code", script: "exit 3", wantCode: 3, wantStr: "exit status 3"},
		{name: "exit 255", script: "exit 255", wantCode: 255, wantStr: "exit status 255"},
		{name: "killed", script: "kill -KILL $$", wantCode: -1, wantStr: "signal: killed"},
		{name: "terminated", script: "kill -TERM $$", wantCode: -1, wantStr: "signal: terminated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pidfd := -1
			cmd := exec.Command("/bin/sh", "-c", "read x; "+tt.script)
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.SysProcAttr = &syscall.SysProcAttr{PidFD: &pidfd}
			reaper.Pause()
			paused := true
			defer func() {
				if paused {
					reaper.Resume()
				}
			}()
			if err := cmd.Start(); err != nil {
				t.Fatalf("start: %v", err)
			}
			defer unix.Close(pidfd)
			if err := unix.SetNonblock(pidfd, true); err != nil {
				t.Fatal(err)
			}
			if e, done := reaper.WaitPidfd(pidfd); e != nil || done {
				t.Fatalf("before the exit: WaitPidfd = %v, %v; want nothing yet", e, done)
			}
			stdin.Close()
			deadline := time.Now().Add(10 * time.Second)
			for {
				st, _, ok := procState(cmd.Process.Pid)
				if !ok {
					t.Fatal("the child is gone before it was reaped")
				}
				if st == 'Z' {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the child is still in state %c", st)
				}
				time.Sleep(time.Millisecond)
			}
			e, done := reaper.WaitPidfd(pidfd)
			if e == nil || !done {
				t.Fatalf("after the exit: WaitPidfd = %v, %v; want the exit", e, done)
			}
			if e.Code() != tt.wantCode || e.String() != tt.wantStr {
				t.Errorf("exit = %d %q, want %d %q", e.Code(), e.String(), tt.wantCode, tt.wantStr)
			}
			if e.Usage == nil || e.Usage.Maxrss <= 0 {
				t.Errorf("usage = %+v, want the child's (maxrss > 0)", e.Usage)
			}
			if e, done := reaper.WaitPidfd(pidfd); e != nil || !done {
				t.Errorf("once reaped: WaitPidfd = %v, %v; want done, nothing", e, done)
			}
			if _, _, ok := procState(cmd.Process.Pid); ok {
				t.Errorf("pid %d still in /proc after its reap", cmd.Process.Pid)
			}
			reaper.Resume()
			paused = false
		})
	}
}

// TestStartReapsThroughPidfd: Start's children are reaped through their
// pidfds (the reap loop, woken by SIGCHLD through os/signal, is the slower
// way and may win some), and each exit reaches its owner once.
func TestStartReapsThroughPidfd(t *testing.T) {
	t.Parallel()
	before := reaper.PidfdReaps()
	for i := range 20 {
		ch, err := reaper.Start(exec.Command("/bin/sh", "-c", "exit 7"))
		if err != nil {
			t.Fatalf("Start %d: %v", i, err)
		}
		if e := waitExit(t, ch); e.Code() != 7 {
			t.Fatalf("child %d: %v, want exit status 7", i, e)
		}
		select {
		case e := <-ch:
			t.Fatalf("child %d: a second exit %v", i, e)
		default:
		}
	}
	if n := reaper.PidfdReaps() - before; n == 0 {
		t.Errorf("none of 20 children was reaped through its pidfd")
	}
}
