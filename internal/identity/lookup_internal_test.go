package identity

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// The cache answers from memory while the files are unchanged, reads again
// once either was written or replaced, never keeps a failure, and hands out
// copies.
func TestUserCache(t *testing.T) {
	dir := t.TempDir()
	passwd, group := filepath.Join(dir, "passwd"), filepath.Join(dir, "group")
	for _, p := range []string{passwd, group} {
		if err := os.WriteFile(p, []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	reads := 0
	c := &userCache{files: [2]string{passwd, group}, read: func(name string) (*User, error) {
		reads++
		if name == "nobody-here" {
			return nil, ErrUnknownUser
		}
		return &User{Name: name, UID: uint32(1000 + reads), Groups: []uint32{1, 2}}, nil
	}}
	get := func(name string) *User {
		t.Helper()
		u, err := c.lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	first := get("alice")
	first.Groups[0] = 99 // the caller's copy
	if u := get("alice"); reads != 1 || u.UID != first.UID || u.Groups[0] != 1 {
		t.Fatalf("second lookup: %+v after %d reads; want the first answer, unchanged, from memory", u, reads)
	}
	for range 2 {
		if _, err := c.lookup("nobody-here"); !errors.Is(err, ErrUnknownUser) {
			t.Fatalf("unknown user: %v", err)
		}
	}
	if reads != 3 {
		t.Fatalf("%d reads: a failed lookup was kept", reads)
	}

	// Written in place (size changes), then replaced (rename, new inode).
	if err := os.WriteFile(group, []byte("x\ny\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if u := get("alice"); reads != 4 || u.UID == first.UID {
		t.Fatalf("after /etc/group changed: %+v, %d reads; want a new read", u, reads)
	}
	tmp := filepath.Join(dir, "passwd.new")
	if err := os.WriteFile(tmp, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, passwd); err != nil {
		t.Fatal(err)
	}
	get("alice")
	if get("alice"); reads != 5 {
		t.Fatalf("after /etc/passwd was replaced: %d reads, want 5", reads)
	}
}
