package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	fspb "github.com/envd-dev/envd/gen/filesystem"
	"github.com/envd-dev/envd/internal/testutil"
)

// attackerEnv makes this test binary, run again, the sandbox code of
// TestStrictSignalEnvd (see attack). init runs it before TestMain builds
// anything.
const attackerEnv = "ENVD_E2E_TGKILL_ATTACK"

func init() {
	if v := os.Getenv(attackerEnv); v != "" {
		os.Exit(attack(v))
	}
}

// attack is a process of an unprivileged user trying to stop envd: v is
// "envd-pid uid gid milliseconds". Started as root, it becomes uid and gid
// for good (real, effective and saved ids of every thread, no capability:
// as sandbox code running as that user), then, until the time is up, sends
// SIGSTOP with tgkill(2) to every thread listed in /proc/PID/task and to
// the next 64 tids after the highest (threads envd may start next: tgkill
// reaches a tid only if it is a thread of PID, so no other process can be
// hit). It prints how the kernel answered.
func attack(v string) int {
	var pid, uid, gid, ms int
	if _, err := fmt.Sscan(v, &pid, &uid, &gid, &ms); err != nil {
		fmt.Println("bad attack:", err)
		return 2
	}
	if err := testutil.BecomeUser(uid, gid); err != nil {
		fmt.Println(err)
		return 2
	}
	counts := map[string]int{}
	task := fmt.Sprintf("/proc/%d/task", pid)
	for deadline := time.Now().Add(time.Duration(ms) * time.Millisecond); time.Now().Before(deadline); {
		des, err := os.ReadDir(task)
		if err != nil {
			counts["list: "+err.Error()]++
			continue
		}
		highest := 0
		var tids []int
		for _, de := range des {
			if tid, err := strconv.Atoi(de.Name()); err == nil {
				tids = append(tids, tid)
				highest = max(highest, tid)
			}
		}
		for tid := highest + 1; tid <= highest+64; tid++ {
			tids = append(tids, tid)
		}
		for _, tid := range tids {
			switch err := unix.Tgkill(pid, tid, unix.SIGSTOP); {
			case err == nil:
				counts["stopped"]++
			case errors.Is(err, unix.EPERM):
				counts["eperm"]++
			case errors.Is(err, unix.ESRCH):
				counts["esrch"]++ // not (or no longer) a thread of envd
			default:
				counts[err.Error()]++
			}
		}
	}
	for k, n := range counts {
		fmt.Printf("%s=%d\n", k, n)
	}
	return 0
}

// TestStrictSignalEnvd is the attack of a sandbox user on envd's threads
// in strict mode, as reported: while envd does file operations as guest
// (Stat and ListDir loops over Connect, and a recursive watch of guest's
// home whose files keep changing), a process of guest sends SIGSTOP to
// every thread of envd, over and over. The kernel must refuse every one
// (EPERM: no thread of envd ever has guest's real or saved uid), and
// /health must keep answering throughout. envd is sent SIGCONT by pid at
// the end whatever happened, so nothing is left stopped.
func TestStrictSignalEnvd(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{guest: true, args: []string{"-strict-users", "-default-user", guestName}})
	pid := e.cmd.Process.Pid
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	guest := clientsFor(t, e, guestName)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Keep envd busy acting as guest until the attack ends.
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				rctx, rcancel := context.WithTimeout(ctx, time.Second)
				if i%2 == 0 {
					guest.fs.Stat(rctx, connect.NewRequest(&fspb.StatRequest{Path: e.guestHome}))
				} else {
					guest.fs.ListDir(rctx, connect.NewRequest(&fspb.ListDirRequest{Path: e.guestHome, Depth: 2}))
				}
				rcancel()
			}
		})
	}
	watch, err := guest.fs.WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: e.guestHome, Recursive: true, IncludeEntry: true}))
	if err != nil {
		t.Fatal(err)
	}
	if !watch.Receive() {
		t.Fatalf("watch %s as guest: %v", e.guestHome, watch.Err())
	}
	wg.Go(func() {
		defer watch.Close()
		for watch.Receive() {
		}
	})
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			p := filepath.Join(e.guestHome, fmt.Sprintf("churn-%d", i%16))
			if err := os.WriteFile(p, []byte("x"), 0o644); err == nil {
				os.Chown(p, guestUID, guestUID)
			}
			time.Sleep(time.Millisecond)
		}
	})

	const attackFor = 3 * time.Second
	var out syncBuffer
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %d %d", attackerEnv, pid, guestUID, guestUID, attackFor.Milliseconds()))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	attacked := make(chan struct{})
	go func() {
		cmd.Wait()
		close(attacked)
	}()
	defer func() {
		select {
		case <-attacked:
		default:
			cmd.Process.Kill() // by its pid
			<-attacked
		}
		syscall.Kill(pid, syscall.SIGCONT)
	}()

	// /health answers all along, each time within a second.
	hc := &http.Client{Transport: &http.Transport{}, Timeout: time.Second}
	defer hc.CloseIdleConnections()
	var healthErr error
	checks := 0
	for done := false; !done; {
		select {
		case <-attacked:
			done = true
		case <-time.After(50 * time.Millisecond):
		}
		resp, err := hc.Get(e.url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				err = fmt.Errorf("status %s", resp.Status)
			}
		}
		checks++
		if err != nil {
			healthErr = fmt.Errorf("GET /health during the attack (check %d): %v", checks, err)
			break
		}
	}
	cancel()
	select {
	case <-attacked:
	case <-time.After(requestTimeout):
		t.Errorf("the attacker did not end")
	}
	if healthErr != nil {
		state := "unknown"
		if p, ok := readProc(pid); ok {
			state = string(p.State)
		}
		t.Errorf("%v; envd's state: %s", healthErr, state)
	}
	counts := map[string]int{}
	for line := range strings.Lines(out.String()) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("attacker: %s", out.String())
		}
		counts[k] = n
	}
	for k, n := range counts {
		if k != "eperm" && k != "esrch" {
			t.Errorf("tgkill(envd, tid, SIGSTOP) as guest: %s %d times, want only EPERM (or ESRCH for a tid not envd's)", k, n)
		}
	}
	if counts["eperm"] == 0 {
		t.Errorf("the attacker reached no thread of envd: %v", counts)
	}
	t.Logf("attack: %v; %d health checks", counts, checks)
}
