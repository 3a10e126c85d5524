package shellconnect_test

import (
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/envd-dev/envd/gen/envd/shell/v1"
	"github.com/envd-dev/envd/internal/process/processtest"
	"github.com/envd-dev/envd/internal/procstat"
	"github.com/envd-dev/envd/internal/shell/shelltest"
)

// TestInterrupt: Interrupt and a timeout end the command's whole process
// tree, whatever it is (a program, a pipeline, a loop of builtins, a
// program that ignores SIGINT), leave a background job of an earlier
// command running, and keep the session usable with its state.
func TestInterrupt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shelltest.Options{}, &pb.CreateRequest{Cwd: "/tmp"})
	r := e.runOK(`export KEEP=kept; sleep 1000 & echo $!`)
	bg, err := strconv.Atoi(strings.TrimSpace(string(r.Stdout)))
	if err != nil {
		t.Fatalf("background job's pid %q", r.Stdout)
	}
	t.Cleanup(func() { syscall.Kill(bg, syscall.SIGKILL) })
	e.waitProcs("sleep") // exec'd: it ignores SIGINT from then on
	bgStat, err := procstat.Read(bg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, cmd string
		procs     []string // the command's processes, once running
	}{
		{"program", `sleep 1000; echo not-reached`, []string{"sleep", "sleep"}},
		{"pipeline", `sleep 1000 | cat | cat; echo not-reached`, []string{"sleep", "sleep", "cat", "cat"}},
		{"builtin loop", `while :; do :; done; echo not-reached`, []string{"sleep"}},
		{"function loop", `f() { while :; do :; done; }; f; echo not-reached`, []string{"sleep"}},
		// Killed after the grace. (bash then goes on with the rest of the
		// command, as after a kill from another terminal: what it starts
		// next gets SIGINT in turn; see docs/shell.md.)
		{"ignores SIGINT", `bash -c 'trap "" INT; sleep 1000; :'`, []string{"sleep", "bash", "sleep"}},
		{"for loop", `for i in 1 2 3; do sleep 1000; done; echo not-reached`, []string{"sleep", "sleep"}},
		// Its own background job, which ignores SIGINT, goes with it.
		{"own background job", `sleep 1001 & sleep 1000; echo not-reached`, []string{"sleep", "sleep", "sleep"}},
	} {
		st := e.start(&pb.RunRequest{Command: c.cmd})
		e.waitProcs(c.procs...)
		e.interrupt()
		r := rest(st)
		if r.End.GetReason() != pb.EndReason_END_REASON_INTERRUPTED || strings.Contains(string(r.Stdout), "not-reached") {
			t.Errorf("%s: %s", c.name, r)
		}
		e.waitProcs("sleep") // the earlier command's job alone is left
		if r := e.runOK(`echo "$PWD $KEEP"`); string(r.Stdout) != "/tmp kept\n" {
			t.Errorf("after interrupting %s: %s", c.name, r)
		}
	}
	// Interrupted as it starts: it ends, and the session goes on.
	for range 3 {
		st := e.start(&pb.RunRequest{Command: `sleep 1000`})
		e.interrupt()
		if r := rest(st); r.End.GetReason() != pb.EndReason_END_REASON_INTERRUPTED {
			t.Errorf("interrupted as it starts: %s", r)
		}
	}
	// A timeout ends the command the same way.
	start := time.Now()
	r = shelltest.Run(t, e.c, &pb.RunRequest{SessionId: e.id, Command: `sleep 1000`, Timeout: dur(200 * time.Millisecond)})
	if r.End.GetReason() != pb.EndReason_END_REASON_TIMED_OUT || time.Since(start) < 200*time.Millisecond {
		t.Errorf("timeout: %s after %v", r, time.Since(start))
	}
	if r := e.runOK(`echo "$PWD $KEEP"`); string(r.Stdout) != "/tmp kept\n" {
		t.Errorf("after a timeout: %s", r)
	}
	if now, err := procstat.Read(bg); err != nil || now.Start != bgStat.Start || now.State == 'Z' {
		t.Errorf("the background job of an earlier command did not survive: %v %v", now, err)
	}
	// Nothing runs: Interrupt says so.
	res, err := e.c.Interrupt(e.ctx(), connectReq(&pb.InterruptRequest{SessionId: e.id}))
	if err != nil || res.Msg.GetInterrupted() {
		t.Errorf("Interrupt with nothing running: %v, %v", res, err)
	}
}

// waitProcs waits until the shell's descendants are exactly the programs
// names (in any order), each exec'd.
func (e *env) waitProcs(names ...string) {
	e.t.Helper()
	pid := int(e.state().GetSession().GetPid())
	slices.Sort(names)
	deadline := time.Now().Add(waitShort)
	for {
		var got []string
		for _, p := range descendantsOf(pid) {
			got = append(got, p.Comm)
		}
		slices.Sort(got)
		if slices.Equal(got, names) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the shell's processes are %v, want %v", got, names)
		}
		time.Sleep(processtest.Poll)
	}
}

// descendantsOf lists the processes below pid.
func descendantsOf(pid int) []procstat.Stat {
	all := procstat.All()
	var out []procstat.Stat
	parents := map[int]bool{pid: true}
	for changed := true; changed; {
		changed = false
		for _, p := range all {
			if parents[p.PPid] && !parents[p.Pid] {
				parents[p.Pid] = true
				out = append(out, p)
				changed = true
			}
		}
	}
	return out
}
