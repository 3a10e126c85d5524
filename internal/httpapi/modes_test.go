package httpapi_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/envd-dev/envd/internal/auth"
	"github.com/envd-dev/envd/internal/testutil"
)

// A root process's memory map, which `sudo -u user cat` may not read: the
// strict mode refuses it to user, the default mode reads it as upstream.
func TestProcOfRootProcess(t *testing.T) {
	t.Parallel()
	def := newEnv(t, envOpts{})
	strict := newEnv(t, envOpts{strict: true})
	maps := fmt.Sprintf("/proc/%d/maps", testutil.Sleeper(t, nil))

	wantError(t, strict.do(t, "GET", "/files", q("path", maps, "username", "user"), nil, nil), 403,
		"permission denied: user 'user' may not read "+maps)
	// Root still reads it in strict mode.
	if r := strict.do(t, "GET", "/files", q("path", maps, "username", "root"), nil, nil); r.status != 200 || !strings.Contains(r.body, "sleep") {
		t.Errorf("strict mode, as root: %d %.80q", r.status, r.body)
	}
	if r := def.do(t, "GET", "/files", q("path", maps, "username", "user"), nil, nil); r.status != 200 || !strings.Contains(r.body, "sleep") {
		t.Errorf("default mode, as user: %d %.80q", r.status, r.body)
	}
}

// Default mode writes where upstream does: what user may not create itself,
// missing parents and a new file in directories only root can change, root
// creates and gives to user.
func TestDefaultModeUploadCreatesForUser(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	usr := testutil.User(t, "user")
	priv := t.TempDir() // root's 0700, reached through names only root can change
	octet := hdr("Content-Type", "application/octet-stream")

	// As upstream's `/0/file.txt`: a missing directory at the root.
	top := fmt.Sprintf("/envd-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
	t.Cleanup(func() { os.RemoveAll(top) })
	ct, body := multipartBody(t, part{"file", top + "/file.txt", "at the top"})
	decodeWritten(t, e.do(t, "POST", "/files", q("username", "user"), hdr("Content-Type", ct), body))
	// Deeper, in a root 0700 directory, by the default user.
	decodeWritten(t, e.do(t, "POST", "/files", q("path", priv+"/a/b/new.txt"), octet, strings.NewReader("deep")))
	// A new file right in it.
	decodeWritten(t, e.do(t, "POST", "/files", q("path", priv+"/flat.txt"), octet, strings.NewReader("flat")))

	for _, p := range []string{top, top + "/file.txt", priv + "/a", priv + "/a/b", priv + "/a/b/new.txt", priv + "/flat.txt"} {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != usr.UID || st.Gid != usr.GID {
			t.Errorf("%s belongs to %d:%d, want user %d:%d", p, st.Uid, st.Gid, usr.UID, usr.GID)
		}
	}
	if read(t, top+"/file.txt") != "at the top" || read(t, priv+"/a/b/new.txt") != "deep" || read(t, priv+"/flat.txt") != "flat" {
		t.Error("wrong content")
	}
	noTemp(t, priv)
	noTemp(t, priv+"/a/b")

	// Root overwrites nothing for user: root's file in root's directory.
	testutil.WriteFile(t, priv+"/roots.txt", "root's", 0o644)
	wantError(t, e.do(t, "POST", "/files", q("path", priv+"/roots.txt"), octet, strings.NewReader("x")), 403, "user 'user' may not write "+priv+"/roots.txt")
	if read(t, priv+"/roots.txt") != "root's" || testutil.Owner(t, priv+"/roots.txt") != 0 {
		t.Error("root's file was overwritten or given away")
	}
	noTemp(t, priv)
}

// A signature binds one exact path: one made for an empty path authorizes
// no file, neither a multipart part's filename nor a download.
func TestSignedEmptyPath(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	dir := testutil.WorkDir(t)
	testutil.WriteFile(t, dir+"/a.txt", "hello", 0o644)
	e.token.Set("secret-token")
	sign := func(path, op string) string { return auth.Sign(path, op, "", "secret-token", 0) }
	target := filepath.Join(dir, "planted.txt")

	ct, body := multipartBody(t, part{"file", target, "x"})
	r := e.do(t, "POST", "/files", q("signature", sign("", "write")), hdr("Content-Type", ct), body)
	wantError(t, r, 403, "the path query parameter is empty", "sign the exact path")
	if _, err := os.Lstat(target); err == nil {
		t.Errorf("%s was written", target)
	}
	wantError(t, e.do(t, "GET", "/files", q("signature", sign("", "read")), nil, nil), 403, "a signature for an empty path authorizes nothing")

	// Signed for the exact path, the same upload goes there.
	ct, body = multipartBody(t, part{"file", "ignored-name", "x"})
	decodeWritten(t, e.do(t, "POST", "/files", q("path", target, "signature", sign(target, "write")), hdr("Content-Type", ct), body))
	if read(t, target) != "x" {
		t.Error("the signed upload did not go to its path")
	}
	if r := e.do(t, "GET", "/files", q("path", dir+"/a.txt", "signature", sign(dir+"/a.txt", "read")), nil, nil); r.status != 200 {
		t.Errorf("signed download: %d %s", r.status, r.body)
	}
}

// Default mode: what envd wrote for user, user may write again. A file
// user owns, in a directory only root can change (a template's /app,
// WORKDIR made by root), is overwritten as upstream overwrites it (as
// root, O_TRUNC): the SDK's second files.write of the same path must not
// fail where the first succeeded, nor where the user itself could write
// the file in a shell.
func TestDefaultModeUploadOverwritesUsersOwnFile(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	usr := testutil.User(t, "user")
	octet := hdr("Content-Type", "application/octet-stream")
	// root's 0755, as WORKDIR /app makes it, reachable by user.
	app := t.TempDir()
	for _, d := range []string{filepath.Dir(app), app} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := app + "/own.txt"
	decodeWritten(t, e.do(t, "POST", "/files", q("path", p), octet, strings.NewReader("first")))
	if testutil.Owner(t, p) != usr.UID {
		t.Fatalf("%s does not belong to user", p)
	}
	r := e.do(t, "POST", "/files", q("path", p), octet, strings.NewReader("second"))
	if r.status != 200 {
		t.Fatalf("overwriting user's own file %s: status %d: %s", p, r.status, r.body)
	}
	if got := read(t, p); got != "second" {
		t.Errorf("content %q, want %q", got, "second")
	}
	if testutil.Owner(t, p) != usr.UID {
		t.Errorf("%s no longer belongs to user", p)
	}
	noTemp(t, app)
}
