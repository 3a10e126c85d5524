package httpapi_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/envd-dev/envd/internal/cgroup"
	"github.com/envd-dev/envd/internal/httpapi"
	"github.com/envd-dev/envd/internal/procstat"
	"github.com/envd-dev/envd/internal/testutil"
)

// TestFreezeNotFrozen: a task that cannot stop within maxWaitMs is counted
// in notFrozen. The task is stat(2) on a FUSE filesystem whose server never
// answers (the test mounts /dev/fuse in a private mount namespace and never
// reads it): the kernel waits for the answer killably but not freezably.
// The v2 freezer stops a task only on its way back to user space, so the
// cgroup never reads frozen: notFrozen. The v1 freezer of this kernel
// (6.18) reads FROZEN all the same (the task cannot run user code either),
// so on v1 the freeze completes: the test checks that, and that /unfreeze
// then thaws it. Either way SIGKILL ends the task.
func TestFreezeNotFrozen(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("this test needs /dev/fuse (the fuse module): %v", err)
	}
	for _, v := range []cgroup.Version{cgroup.V1, cgroup.V2} {
		t.Run(v.String(), func(t *testing.T) {
			cg := testCgroups(t, v)
			e, _ := hooksEnv(t, httpapi.HooksOptions{Cgroups: cg, FSPath: t.TempDir()})
			g, err := cg.Group(cgroup.User).NewChild()
			if err != nil {
				t.Fatal(err)
			}
			// In its own mount namespace, which goes with its last
			// process: mount a FUSE filesystem served by no one (fd 3 is
			// kept open, never read), then stat a file in it. exec keeps
			// the pid: the stat is the process the test started.
			const script = `set -e; exec 3<>/dev/fuse; ` +
				`mount -i -t fuse -o fd=3,rootmode=40000,user_id=0,group_id=0 envd-test "$1"; ` +
				`echo mounted; exec stat "$1/never"`
			cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", t.TempDir())
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := g.Start(cmd, cmd.Start); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				e.do(t, "POST", "/unfreeze", nil, tok, nil)
				cmd.Process.Signal(syscall.SIGKILL)
				cmd.Wait()
				g.Remove()
			})
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil || line != "mounted\n" {
				t.Fatalf("mount the FUSE filesystem: %q, %v; stderr: %s", line, err, stderr.String())
			}
			testutil.Poll(t, "the stat to block in the kernel (state D)", func() bool {
				st, err := procstat.Read(cmd.Process.Pid)
				return err == nil && st.State == 'D'
			})

			r := e.do(t, "POST", "/freeze", q("maxWaitMs", "300"), tok, nil)
			if r.status != 200 {
				t.Fatalf("freeze with maxWaitMs: %d %s", r.status, r.body)
			}
			var res struct {
				Requested, Frozen, NotFrozen int
			}
			if err := json.Unmarshal([]byte(r.body), &res); err != nil {
				t.Fatal(err)
			}
			switch {
			case v == cgroup.V2 && (res.NotFrozen < 1 || res.Frozen+res.NotFrozen > res.Requested):
				t.Errorf("freeze result %s: want at least the stat's cgroup in notFrozen", r.body)
			case v == cgroup.V1 && (res.NotFrozen != 0 || res.Frozen != res.Requested):
				t.Errorf("freeze result %s: want every cgroup frozen (v1 counts a task asleep in the kernel as frozen)", r.body)
			}
			if r := e.do(t, "POST", "/unfreeze", nil, tok, nil); r.status != 204 {
				t.Fatalf("unfreeze: %d %s", r.status, r.body)
			}
			if ok, _ := g.Frozen(); ok {
				t.Error("the stat's cgroup reads frozen after /unfreeze")
			}
		})
	}
}
