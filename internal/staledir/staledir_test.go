package staledir_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/staledir"
)

// deadPid is the pid of a process that has ended.
func deadPid(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func TestReclaim(t *testing.T) {
	prefix := "envd-staledir-test-" + strconv.Itoa(os.Getpid()) + "x-"
	// Ours, alive: kept.
	live, lock, err := staledir.Create(prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { lock.Close(); os.RemoveAll(live) }()
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(os.TempDir(), prefix+name)
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		t.Cleanup(func() { os.RemoveAll(p) })
		return p
	}
	dead := strconv.Itoa(deadPid(t))
	stale := mk(dead+"-a", 0o700)                       // creator gone: removed
	open := mk(dead+"-b", 0o777)                        // writable by others: a look-alike, kept
	locked := mk(dead+"-c", 0o700)                      // lock held: kept
	alive := mk(strconv.Itoa(os.Getppid())+"-d", 0o700) // creator alive: kept
	l, err := staledir.Open(-100, locked)               // AT_FDCWD
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := unix.Flock(int(l.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	var removed []string
	staledir.Reclaim(prefix, func(tmpfd int, name string, _ *os.File) error {
		return os.Remove(filepath.Join(os.TempDir(), name))
	}, func(dir string, err error) {
		if err != nil {
			t.Errorf("%s: %v", dir, err)
		}
		removed = append(removed, dir)
	})
	if len(removed) != 1 || removed[0] != stale {
		t.Errorf("removed %v, want only %s", removed, stale)
	}
	for _, p := range []string{live, open, locked, alive} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s: %v, want it kept", p, err)
		}
	}
}

// TestAdopt: the directory this pid made is taken over (locked again)
// once its first lock is gone, as after a live upgrade's exec; one of
// another pid's, one outside the temporary directory, one that others can
// write, and one still locked are refused.
func TestAdopt(t *testing.T) {
	const prefix = "envd-staledir-adopt-"
	dir, lock, err := staledir.Create(prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if _, err := staledir.Adopt(prefix, dir); err == nil {
		t.Errorf("adopted %s while its lock is held", dir)
	}
	lock.Close()
	again, err := staledir.Adopt(prefix, dir)
	if err != nil {
		t.Fatalf("adopt %s: %v", dir, err)
	}
	again.Close()

	other := filepath.Join(os.TempDir(), prefix+"1-x")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(other)
	if _, err := staledir.Adopt(prefix, other); err == nil || !strings.Contains(err.Error(), "not a directory of this envd's") {
		t.Errorf("adopted another pid's %s: %v", other, err)
	}
	if _, err := staledir.Adopt(prefix, filepath.Join(t.TempDir(), filepath.Base(dir))); err == nil {
		t.Error("adopted a directory outside the temporary directory")
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := staledir.Adopt(prefix, dir); err == nil || !strings.Contains(err.Error(), "writable by others") {
		t.Errorf("adopted %s writable by others: %v", dir, err)
	}
}
