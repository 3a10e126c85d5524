package identity_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/envd-dev/envd/internal/testutil"
)

// TestDoStrictReadsNoRootProcMaps: Do keeps root's other capabilities, so
// the memory map of a process of root's is readable through it
// (CAP_SYS_PTRACE); DoStrict has none, as `sudo -u user cat` has none.
func TestDoStrictReadsNoRootProcMaps(t *testing.T) {
	t.Parallel()
	u := doUser(t)
	maps := fmt.Sprintf("/proc/%d/maps", testutil.Sleeper(t, nil))
	read := func() error { _, err := os.ReadFile(maps); return err }
	if err := read(); err != nil {
		t.Fatalf("as root: %v", err)
	}
	if err := u.Do(read); err != nil {
		t.Logf("Do: %v (this kernel refuses it already)", err)
	} else {
		t.Logf("Do reads %s: the gap DoStrict closes", maps)
	}
	if err := u.DoStrict(read); !errors.Is(err, os.ErrPermission) {
		t.Errorf("DoStrict: read %s: %v, want permission denied", maps, err)
	}
	if err := read(); err != nil { // envd's other threads are still root
		t.Fatalf("as root, after: %v", err)
	}
}

func TestDoStrictCreatesAsTheUserAndChecksRights(t *testing.T) {
	t.Parallel()
	u := doUser(t)
	dir := testutil.WorkDir(t)
	p := filepath.Join(dir, "made-strictly")
	if err := u.DoStrict(func() error { return os.WriteFile(p, []byte("x"), 0o644) }); err != nil {
		t.Fatal(err)
	}
	if uid, gid := owner(t, p); uid != u.UID || gid != u.GID {
		t.Errorf("owner %d:%d, want %d:%d", uid, gid, u.UID, u.GID)
	}
	sd := t.TempDir()
	if err := os.Chmod(sd, 0o700); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(sd, "secret") // in a root 0700 dir
	if err := os.WriteFile(secret, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := u.DoStrict(func() error { _, err := os.Stat(secret); return err }); !errors.Is(err, os.ErrPermission) {
		t.Errorf("stat inside root's 0700 dir: %v, want permission denied", err)
	}
}

// Many strict calls at once leave envd's other threads root.
func TestDoStrictDoesNotLeak(t *testing.T) {
	t.Parallel()
	u := doUser(t)
	dir := testutil.WorkDir(t)
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			u.DoStrict(func() error { return os.WriteFile(filepath.Join(dir, "u"+strconv.Itoa(i)), nil, 0o644) })
		}()
		go func() {
			defer wg.Done()
			os.WriteFile(filepath.Join(dir, "r"+strconv.Itoa(i)), nil, 0o644)
		}()
	}
	wg.Wait()
	for i := range 100 {
		if uid, _ := owner(t, filepath.Join(dir, "r"+strconv.Itoa(i))); uid != 0 {
			t.Fatalf("file made by a plain goroutine belongs to %d", uid)
		}
		if uid, _ := owner(t, filepath.Join(dir, "u"+strconv.Itoa(i))); uid != u.UID {
			t.Fatalf("file made strictly belongs to %d", uid)
		}
	}
}

func TestDoStrictReturnsErrorAndPanics(t *testing.T) {
	t.Parallel()
	u := doUser(t)
	want := errors.New("boom")
	if err := u.DoStrict(func() error { return want }); err != want {
		t.Errorf("err = %v", err)
	}
	defer func() {
		if r := recover(); r != "pan" {
			t.Errorf("recovered %v", r)
		}
	}()
	u.DoStrict(func() error { panic("pan") })
}

// TestDoStrictLeavesTheProcessRoot: whatever threads DoStrict used, the
// process as /proc and kill(2) see it (its main thread) stays root: were it
// the user's, that user could signal envd.
func TestDoStrictLeavesTheProcessRoot(t *testing.T) {
	t.Parallel()
	u := doUser(t)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() { u.DoStrict(func() error { return nil }) })
	}
	wg.Wait()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Uid:") && strings.Fields(line)[1:] != nil && strings.Join(strings.Fields(line)[1:], " ") != "0 0 0 0" {
			t.Errorf("after DoStrict the process is %q, want root", line)
		}
	}
}
