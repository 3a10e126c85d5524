package identity_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/testutil"
)

// probeEnv makes the test binary, run again, a process of another user
// that tries to reach one thread of envd (see probe).
const probeEnv = "IDENTITY_TEST_PROBE"

func init() {
	if v := os.Getenv(probeEnv); v != "" {
		os.Exit(probe(v))
	}
}

// probe runs in a child started as root: "pid tid uid gid". It becomes
// uid and gid for good (real, effective and saved, every thread), as a
// shell of that user is, then asks the kernel whether it may signal
// (tgkill with signal 0: the permission check alone, nothing is sent) and
// renice the thread tid of pid. It prints what the kernel answered.
func probe(v string) int {
	var pid, tid, uid, gid int
	if _, err := fmt.Sscan(v, &pid, &tid, &uid, &gid); err != nil {
		fmt.Println("bad probe:", err)
		return 2
	}
	if err := testutil.BecomeUser(uid, gid); err != nil {
		fmt.Println(err)
		return 2
	}
	answer := func(err error) string {
		if err == nil {
			return "allowed"
		}
		return err.Error()
	}
	fmt.Printf("tgkill=%s\n", answer(unix.Tgkill(pid, tid, 0)))
	fmt.Printf("setpriority=%s\n", answer(unix.Setpriority(unix.PRIO_PROCESS, tid, 19)))
	fmt.Printf("prlimit=%s\n", answer(unix.Prlimit(tid, unix.RLIMIT_NOFILE, nil, &unix.Rlimit{})))
	return 0
}

// readStatus reads the fields of a /proc status file: "Uid" gives the
// real, effective, saved and filesystem uids.
func readStatus(path string) (map[string][]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.Fields(v)
		}
	}
	return out, nil
}

// TestDoStrictThreadCannotBeSignalled: while DoStrict's fn runs, its thread
// keeps root's real and saved uid, so a process of the user can neither
// signal it (kill(2) and tgkill(2) compare the sender's ids with the
// target's real and saved uid: SIGSTOP or SIGKILL on one thread acts on
// all of envd) nor renice it or change its limits; only the effective and
// filesystem ids are the user's, and no capability is effective.
func TestDoStrictThreadCannotBeSignalled(t *testing.T) {
	t.Parallel()
	u := doUser(t)
	tids := make(chan int, 1)
	done := make(chan struct{})
	var status map[string][]string
	res := make(chan error, 1)
	go func() {
		res <- u.DoStrict(func() error {
			var err error
			status, err = readStatus("/proc/thread-self/status")
			tids <- unix.Gettid()
			<-done // the probe runs while fn does
			return err
		})
	}()
	tid := <-tids
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %d %d", probeEnv, os.Getpid(), tid, u.UID, u.GID))
	out, perr := cmd.CombinedOutput()
	close(done)
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	if perr != nil {
		t.Fatalf("probe: %v: %s", perr, out)
	}
	id, gid := strconv.Itoa(int(u.UID)), strconv.Itoa(int(u.GID))
	if got, want := strings.Join(status["Uid"], " "), "0 "+id+" 0 "+id; got != want {
		t.Errorf("Uid (real effective saved fs) while acting as %s: %q, want %q", u.Name, got, want)
	}
	if got, want := strings.Join(status["Gid"], " "), "0 "+gid+" 0 "+gid; got != want {
		t.Errorf("Gid (real effective saved fs) while acting as %s: %q, want %q", u.Name, got, want)
	}
	if got := strings.Join(status["CapEff"], ""); got != "0000000000000000" {
		t.Errorf("CapEff while acting as %s: %s, want none", u.Name, got)
	}
	var groups []string
	for _, g := range slices.Sorted(slices.Values(u.Groups)) { // as the kernel keeps them
		groups = append(groups, strconv.Itoa(int(g)))
	}
	if got, want := strings.Join(status["Groups"], " "), strings.Join(groups, " "); got != want {
		t.Errorf("Groups while acting as %s: %q, want %q", u.Name, got, want)
	}
	if !strings.Contains(string(out), "tgkill=operation not permitted\n") {
		t.Errorf("a process of %s signals thread %d of envd: %q, want tgkill=operation not permitted", u.Name, tid, out)
	}
	for _, call := range []string{"setpriority", "prlimit"} {
		if !strings.Contains(string(out), call+"=") || strings.Contains(string(out), call+"=allowed") {
			t.Errorf("a process of %s changes thread %d of envd: %q, want %s refused", u.Name, tid, out, call)
		}
	}
}

// TestDoStrictGivesTheUsersFileRights: what fn opens is checked as the
// user: root's 0600 file is refused, the user's own 0600 file is read,
// and neither an access(2) with AT_EACCESS nor a file a group of root's
// may read lets the user through.
func TestDoStrictGivesTheUsersFileRights(t *testing.T) {
	t.Parallel()
	u := doUser(t)
	dir := testutil.WorkDir(t)
	rootFile := filepath.Join(dir, "root-only")
	if err := os.WriteFile(rootFile, []byte("r"), 0o600); err != nil {
		t.Fatal(err)
	}
	rootGroupFile := filepath.Join(dir, "root-group")
	if err := os.WriteFile(rootGroupFile, []byte("g"), 0o640); err != nil {
		t.Fatal(err)
	}
	userFile := filepath.Join(dir, "users-own")
	if err := os.WriteFile(userFile, []byte("u"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(userFile, int(u.UID), int(u.GID)); err != nil {
		t.Fatal(err)
	}
	err := u.DoStrict(func() error {
		var errs []error
		for _, p := range []string{rootFile, rootGroupFile} {
			if _, err := os.ReadFile(p); !errors.Is(err, os.ErrPermission) {
				errs = append(errs, fmt.Errorf("read %s: %v, want permission denied", p, err))
			}
			if err := unix.Faccessat(unix.AT_FDCWD, p, unix.R_OK, unix.AT_EACCESS); !errors.Is(err, unix.EACCES) {
				errs = append(errs, fmt.Errorf("access(R_OK, AT_EACCESS) %s: %v, want EACCES", p, err))
			}
		}
		if b, err := os.ReadFile(userFile); err != nil || string(b) != "u" {
			errs = append(errs, fmt.Errorf("read the user's own file: %q, %v", b, err))
		}
		if err := os.WriteFile(filepath.Join(dir, "made"), nil, 0o600); err != nil {
			errs = append(errs, fmt.Errorf("create in a 0777 directory: %v", err))
		}
		return errors.Join(errs...)
	})
	if err != nil {
		t.Fatal(err)
	}
	if uid, gid := owner(t, filepath.Join(dir, "made")); uid != u.UID || gid != u.GID {
		t.Errorf("a file made in DoStrict belongs to %d:%d, want %d:%d", uid, gid, u.UID, u.GID)
	}
}

// TestDoStrictThreadIsRootAgain: a thread DoStrict used, if Go runs
// anything else on it afterwards, is root again, with every capability it
// had.
func TestDoStrictThreadIsRootAgain(t *testing.T) {
	t.Parallel()
	u := doUser(t)
	before, err := readStatus(fmt.Sprintf("/proc/self/task/%d/status", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		var tid int
		if err := u.DoStrict(func() error { tid = unix.Gettid(); return nil }); err != nil {
			t.Fatal(err)
		}
		after, err := readStatus(fmt.Sprintf("/proc/self/task/%d/status", tid))
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue // the thread ended: nothing can run on it
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"Uid", "Gid", "Groups", "CapEff", "CapPrm", "CapInh", "CapBnd"} {
			if got, want := strings.Join(after[k], " "), strings.Join(before[k], " "); got != want {
				t.Errorf("thread %d after DoStrict: %s %q, want %q as before", tid, k, got, want)
			}
		}
	}
}
