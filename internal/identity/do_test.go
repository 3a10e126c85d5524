package identity_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/testutil"
)

func doUser(t *testing.T) *identity.User {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("acting as another user needs root")
	}
	u, err := identity.Lookup("user")
	if err != nil {
		t.Skipf("account 'user' is missing: %v", err)
	}
	return u
}

func owner(t *testing.T, p string) (uid, gid uint32) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}

func TestDoCreatesAsTheUser(t *testing.T) {
	t.Parallel()
	u := doUser(t)
	dir := testutil.WorkDir(t)
	p := filepath.Join(dir, "made-by-user")
	if err := u.Do(func() error { return os.WriteFile(p, []byte("x"), 0o644) }); err != nil {
		t.Fatal(err)
	}
	if uid, gid := owner(t, p); uid != u.UID || gid != u.GID {
		t.Errorf("owner %d:%d, want %d:%d", uid, gid, u.UID, u.GID)
	}
}

func TestDoChecksTheUsersPermissions(t *testing.T) {
	t.Parallel()
	u := doUser(t)
	dir := t.TempDir() // 0700 root
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		fn   func() error
	}{
		{"read root's 0600 file", func() error { _, err := os.ReadFile(secret); return err }},
		{"create in root's 0700 dir", func() error { return os.WriteFile(filepath.Join(dir, "x"), nil, 0o644) }},
		{"remove from root's dir", func() error { return os.Remove(secret) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := u.Do(tt.fn)
			if !errors.Is(err, os.ErrPermission) {
				t.Fatalf("err = %v, want permission denied", err)
			}
		})
	}
	// Root still can.
	if _, err := os.ReadFile(secret); err != nil {
		t.Fatal(err)
	}
}

func TestDoSupplementaryGroups(t *testing.T) {
	t.Parallel()
	u := doUser(t)
	dir := testutil.WorkDir(t)
	p := filepath.Join(dir, "group-readable")
	if err := os.WriteFile(p, []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	// A group the user is not in: no access. Then pretend they are in it.
	const gid = 54321
	if err := os.Chown(p, 0, gid); err != nil {
		t.Fatal(err)
	}
	if err := u.Do(func() error { _, err := os.ReadFile(p); return err }); !errors.Is(err, os.ErrPermission) {
		t.Fatalf("without the group: err = %v, want permission denied", err)
	}
	member := *u
	member.Groups = append(append([]uint32{}, u.Groups...), gid)
	if err := member.Do(func() error { _, err := os.ReadFile(p); return err }); err != nil {
		t.Fatalf("with the group: %v", err)
	}
}

// Credentials never leak to other goroutines: while many goroutines act as
// the user, files created by plain goroutines still belong to root.
func TestDoDoesNotLeak(t *testing.T) {
	t.Parallel()
	u := doUser(t)
	dir := testutil.WorkDir(t)
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			u.Do(func() error { return os.WriteFile(filepath.Join(dir, "u"+strconv.Itoa(i)), nil, 0o644) })
		}()
		go func() {
			defer wg.Done()
			os.WriteFile(filepath.Join(dir, "r"+strconv.Itoa(i)), nil, 0o644)
		}()
	}
	wg.Wait()
	for i := range 200 {
		if uid, _ := owner(t, filepath.Join(dir, "r"+strconv.Itoa(i))); uid != 0 {
			t.Fatalf("a file made by envd itself belongs to uid %d", uid)
		}
		if uid, _ := owner(t, filepath.Join(dir, "u"+strconv.Itoa(i))); uid != u.UID {
			t.Fatalf("a file made as the user belongs to uid %d", uid)
		}
	}
}

func TestDoReturnsErrorAndPanics(t *testing.T) {
	t.Parallel()
	u := doUser(t)
	want := errors.New("boom")
	if err := u.Do(func() error { return want }); err != want {
		t.Errorf("err = %v, want %v", err, want)
	}
	defer func() {
		if r := recover(); r != "oops" {
			t.Errorf("recovered %v, want the panic re-raised", r)
		}
		// The panic happened with the user's credentials; envd's are back.
		p := filepath.Join(testutil.WorkDir(t), "after-panic")
		os.WriteFile(p, nil, 0o644)
		if uid, _ := owner(t, p); uid != 0 {
			t.Errorf("after a panic, files belong to uid %d", uid)
		}
	}()
	u.Do(func() error { panic("oops") })
}

func TestDoAsEnvdItselfRunsDirectly(t *testing.T) {
	t.Parallel()
	me, err := identity.Current()
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	if err := me.Do(func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("ran=%v err=%v", ran, err)
	}
}
