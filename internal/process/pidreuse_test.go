package process_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/process"
	"github.com/envd-dev/envd/internal/process/processtest"
	"github.com/envd-dev/envd/internal/reaper"
)

// pidNSVar marks a test binary re-executed in a PID namespace of its own:
// its value is the test to run there.
const pidNSVar = "ENVD_TEST_IN_PID_NAMESPACE"

// inPIDNamespace runs the calling test again in a re-executed test binary,
// in new PID and mount namespaces (unshare -mpf --mount-proc), and returns
// false: the caller returns at once. In that binary it returns true: the
// caller steers the namespace's pid allocation (ns_last_pid) without
// touching the machine's, and whatever it starts goes with the namespace.
func inPIDNamespace(t *testing.T) bool {
	t.Helper()
	if os.Getenv(pidNSVar) == t.Name() {
		return true
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes a PID namespace")
	}
	// Through the reaper, which this binary's TestMain enabled: it, not
	// exec.Cmd.Wait, reaps the children.
	log, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command("unshare", "-mpf", "--mount-proc", "--kill-child",
		os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), pidNSVar+"="+t.Name())
	cmd.Stdout, cmd.Stderr = log, log
	exitc, err := reaper.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	var ex reaper.Exit
	select {
	case ex = <-exitc:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill() // --kill-child: the namespace goes with it
		ex = <-exitc
	}
	out, _ := os.ReadFile(log.Name())
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("%s in its PID namespace: %s\n%s", t.Name(), ex, out)
	}
	t.Logf("in its PID namespace:\n%s", out)
	return false
}

// setNextPid makes the kernel hand out pid (or the first free one after it)
// to the next task forked in this pid namespace, as pid wraparound does in
// a sandbox whose pid_max is 32768 (a busy build wraps it in seconds).
func setNextPid(t *testing.T, pid int) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
		t.Fatalf("steer the namespace's pid allocation: %v", err)
	}
}

// startWithPid starts `sleep 30` in a process group of its own whose pid
// (and so pgid) is pid: a process unrelated to envd's that reuses a freed
// pid. It returns its exit channel.
func startWithPid(t *testing.T, pid int) <-chan reaper.Exit {
	t.Helper()
	for range 200 {
		setNextPid(t, pid)
		cmd := exec.Command("sleep", "30")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		exitc, err := reaper.Start(cmd)
		if err != nil {
			t.Fatal(err)
		}
		if cmd.Process.Pid == pid {
			processtest.KillAtCleanup(t, pid)
			return exitc
		}
		cmd.Process.Kill()
		<-exitc
	}
	t.Fatalf("could not get pid %d for the victim", pid)
	return nil
}

// orphanedLeader starts a shell that leaves a setsid'd child holding its
// output (a daemon that keeps stdout) and exits, and waits until the
// shell was reaped and its process group is empty: the pid is free, while
// the process is still live (its output is not at EOF).
func orphanedLeader(t *testing.T, m *process.Manager, o process.StartOptions) *process.Process {
	t.Helper()
	o.Config = process.Config{Cmd: "/bin/sh", Args: []string{"-c", "setsid sleep 30 & echo $!"}}
	o.User, o.Dir = lookup(t, "root"), "/"
	p, err := m.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	cur := p.Output()
	var out string
	processtest.Eventually(t, waitShort, func() bool {
		recs, _ := cur.Read()
		for _, r := range recs {
			out += string(r.Data)
		}
		return strings.Contains(out, "\n")
	}, "no pid printed")
	orphan, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("no pid in %q", out)
	}
	processtest.KillAtCleanup(t, orphan)
	processtest.Eventually(t, waitShort, func() bool {
		return errors.Is(syscall.Kill(-int(p.Pid()), 0), syscall.ESRCH)
	}, "group %d not gone", p.Pid())
	if _, ended := p.Exit(); ended {
		t.Fatal("process ended: its orphan does not hold the output")
	}
	// A pid comes back only once the allocation wrapped around: not
	// within microseconds (32768 forks take seconds).
	time.Sleep(300 * time.Millisecond)
	return p
}

// TestSignalAfterPidReuse: a process whose leader exited (reaped, its group
// empty) but whose output a setsid'd orphan still holds stays live and
// listed. A signal sent to it then must not reach whoever got its pid
// since: here an unrelated process group.
func TestSignalAfterPidReuse(t *testing.T) {
	if !inPIDNamespace(t) {
		return
	}
	m := newManager(t, process.Options{})
	p := orphanedLeader(t, m, process.StartOptions{})
	victim := startWithPid(t, int(p.Pid()))
	err := p.Signal(syscall.SIGTERM) // as SendSignal of the listed pid does
	select {
	case ex := <-victim:
		t.Errorf("Signal(SIGTERM) of process %d (its leader gone, its pid reused) = %v, and killed an unrelated process group: %s", p.Pid(), err, ex)
	case <-time.After(500 * time.Millisecond):
	}
}

// TestTimeoutAfterPidReuse: the lifetime timer of such a process kills
// the group that reused its pid.
func TestTimeoutAfterPidReuse(t *testing.T) {
	if !inPIDNamespace(t) {
		return
	}
	m := newManager(t, process.Options{})
	p := orphanedLeader(t, m, process.StartOptions{Timeout: 1500 * time.Millisecond})
	victim := startWithPid(t, int(p.Pid()))
	select {
	case ex := <-victim:
		t.Errorf("the lifetime of process %d (its leader gone, its pid reused) ran out and killed an unrelated process group: %s", p.Pid(), ex)
	case <-time.After(3 * time.Second):
	}
}

// TestTagNewestAfterPidWrap: a tag picks the newest process that has it,
// also once pids wrapped around (pid_max is 32768 in the sandbox).
func TestTagNewestAfterPidWrap(t *testing.T) {
	if !inPIDNamespace(t) {
		return
	}
	m := newManager(t, process.Options{})
	max, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	hi, _ := strconv.Atoi(strings.TrimSpace(string(max)))
	tag := processtest.UniqueTag("wrap")
	o := domainOptions(t, "sleep", []string{"30"})
	o.Tag = &tag
	setNextPid(t, hi-200)
	older, err := m.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	setNextPid(t, 400) // the allocation wrapped
	newer, err := m.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	if newer.Pid() >= older.Pid() {
		t.Fatalf("pids did not wrap: %d then %d", older.Pid(), newer.Pid())
	}
	if got, err := m.Get(process.Selector{Tag: &tag}); err != nil || got != newer {
		t.Errorf("Get by tag = pid %d, %v; want the newer process %d (the older is %d)", got.Pid(), err, newer.Pid(), older.Pid())
	}
}
