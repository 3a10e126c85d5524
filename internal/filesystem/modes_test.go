package filesystem_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/testutil"
)

// guest is a second unprivileged uid, with no account: DoStrict needs none.
var guest = &identity.User{Name: "guest-test", UID: 54321, GID: 54321, Groups: []uint32{54321}, Home: "/nonexistent"}

func wantKind(t *testing.T, err, kind error, subs ...string) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("error %v, want %v", err, kind)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
}

func readAll(t *testing.T, f *os.File) string {
	t.Helper()
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// In strict mode user has no right on a root process that a shell as user
// lacks; the default mode reads as root, as upstream. (Over Connect:
// fsconnect's TestStrictModeOverConnect.)
func TestStrictModeRootProcess(t *testing.T) {
	t.Parallel()
	strict := newEnv(t, filesystem.Options{StrictUsers: true})
	def := newEnv(t, filesystem.Options{})
	usr := testutil.User(t, "user")
	pid := testutil.Sleeper(t, nil)
	maps := fmt.Sprintf("/proc/%d/maps", pid)
	cwd := fmt.Sprintf("/proc/%d/cwd", pid)

	_, err := strict.files.Open(usr, maps)
	wantKind(t, err, filesystem.ErrPermission, "permission denied: user 'user' may not read "+maps)
	_, err = strict.files.ListDir(usr, cwd, 1)
	wantKind(t, err, filesystem.ErrPermission, "user 'user' may not access "+cwd)
	_, err = strict.files.ListDir(usr, fmt.Sprintf("/proc/%d/root/root", pid), 1)
	wantKind(t, err, filesystem.ErrPermission, "user 'user'")

	f, err := def.files.Open(usr, maps)
	if err != nil {
		t.Fatalf("default mode: %v", err)
	}
	if !strings.Contains(readAll(t, f), "sleep") {
		t.Error("default mode: no map of sleep")
	}
	if _, err := def.files.ListDir(usr, cwd, 1); err != nil {
		t.Errorf("default mode: %v", err)
	}
}

// Strict mode: user writes only where a shell as user may.
func TestStrictModeWrites(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{StrictUsers: true})
	usr := testutil.User(t, "user")
	dir := testutil.WorkDir(t)
	priv := testutil.PrivateDir(t)
	testutil.WriteFile(t, dir+"/roots.txt", "root's", 0o666)
	os.Chmod(dir+"/roots.txt", 0o644)
	testutil.WriteFile(t, dir+"/mine", "m", 0o644)
	os.Chown(dir+"/mine", int(usr.UID), int(usr.GID))
	never := fmt.Sprintf("/root/envd-test-never-%d", os.Getpid())

	_, err := e.files.Create(usr, priv+"/x", nil)
	wantKind(t, err, filesystem.ErrPermission, "user 'user' may not write "+priv+"/x")
	_, err = e.files.Create(usr, never+"/sub/x", nil)
	wantKind(t, err, filesystem.ErrPermission, "user 'user'")
	_, err = e.files.Create(usr, dir+"/roots.txt", nil)
	wantKind(t, err, filesystem.ErrPermission, "user 'user' may not write "+dir+"/roots.txt")
	_, err = e.files.MakeDir(usr, never)
	wantKind(t, err, filesystem.ErrPermission, "user 'user' may not create directory "+never)
	_, err = e.files.Move(usr, dir+"/mine", priv+"/planted")
	wantKind(t, err, filesystem.ErrPermission, "user 'user'")
	testutil.WriteFile(t, dir+"/rdir/f", "root's", 0o666)
	err = e.files.Remove(usr, dir+"/rdir/f")
	wantKind(t, err, filesystem.ErrPermission, "user 'user' may not remove "+dir+"/rdir/f")
	for _, p := range []string{priv + "/x", never, priv + "/planted"} {
		if _, err := os.Lstat(p); err == nil {
			os.RemoveAll(p)
			t.Errorf("%s was made", p)
		}
	}
	noTempIn(t, dir)

	// Where user may write, it writes, and owns what it makes.
	up, err := e.files.Create(usr, dir+"/d/new.txt", map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(up, "new")
	if err := up.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir + "/d", dir + "/d/new.txt"} {
		if uid := testutil.Owner(t, p); uid != usr.UID {
			t.Errorf("%s belongs to %d", p, uid)
		}
	}
	if b, _ := os.ReadFile(dir + "/d/new.txt"); string(b) != "new" {
		t.Errorf("content %q", b)
	}
}

// A second unprivileged uid, in strict mode, cannot read user's private
// file nor its processes' memory maps; user can.
func TestStrictModeOtherUser(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{StrictUsers: true})
	usr := testutil.User(t, "user")
	dir := testutil.WorkDir(t)
	secret := dir + "/user-secret"
	testutil.WriteFile(t, secret, "user's", 0o600)
	os.Chown(secret, int(usr.UID), int(usr.GID))
	maps := fmt.Sprintf("/proc/%d/maps", testutil.Sleeper(t, usr))

	_, err := e.files.Open(guest, secret)
	wantKind(t, err, filesystem.ErrPermission, "user 'guest-test' may not read "+secret)
	_, err = e.files.Open(guest, maps)
	wantKind(t, err, filesystem.ErrPermission, "user 'guest-test' may not read "+maps)
	_, err = e.files.Create(guest, secret, nil)
	wantKind(t, err, filesystem.ErrPermission, "user 'guest-test' may not write "+secret)

	f, err := e.files.Open(usr, secret)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, f); got != "user's" {
		t.Errorf("user reads %q", got)
	}
	f, err = e.files.Open(usr, maps)
	if err != nil {
		t.Fatalf("user reads its own process's map: %v", err)
	}
	f.Close()
}

// The default mode creates what upstream creates as root (missing parents,
// a new file), gives it to the user, and nothing more: no overwrite, no
// link followed, nothing in a directory another user controls.
func TestDefaultModeCreatesForUser(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	usr := testutil.User(t, "user")
	dir := testutil.WorkDir(t)
	// Root's 0700 directory, in root's directory in /tmp: only root can
	// change it or the names that lead to it.
	priv := t.TempDir()

	owned := func(p string) {
		t.Helper()
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != usr.UID || st.Gid != usr.GID {
			t.Errorf("%s belongs to %d:%d, want %d:%d", p, st.Uid, st.Gid, usr.UID, usr.GID)
		}
	}
	write := func(p, content string) error {
		up, err := e.files.Create(usr, p, nil)
		if err != nil {
			return err
		}
		io.WriteString(up, content)
		return up.Commit()
	}

	// As upstream's `/0/file.txt`.
	top := fmt.Sprintf("/envd-test-%d-create", os.Getpid())
	t.Cleanup(func() { os.RemoveAll(top) })
	if err := write(top+"/file.txt", "top"); err != nil {
		t.Fatal(err)
	}
	owned(top)
	owned(top + "/file.txt")
	if err := write(priv+"/a/b/c.txt", "deep"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/a", "/a/b", "/a/b/c.txt"} {
		owned(priv + p)
	}
	if _, err := e.files.MakeDir(usr, priv+"/m/n"); err != nil {
		t.Fatal(err)
	}
	owned(priv + "/m")
	owned(priv + "/m/n")
	// Move: root makes the missing parents; the user moves.
	// From the user's directory at the top: a move between filesystems
	// (/tmp is often one of its own) is refused.
	testutil.WriteFile(t, top+"/mine", "m", 0o644)
	os.Chown(top+"/mine", int(usr.UID), int(usr.GID))
	top2 := fmt.Sprintf("/envd-test-%d-move", os.Getpid())
	t.Cleanup(func() { os.RemoveAll(top2) })
	if _, err := e.files.Move(usr, top+"/mine", top2+"/moved/mine"); err != nil {
		t.Fatal(err)
	}
	owned(top2)
	owned(top2 + "/moved")
	owned(top2 + "/moved/mine")

	// A new file right in root's directory: root makes it for the user,
	// and renames it into place only if nothing came there meanwhile.
	if err := write(priv+"/flat.txt", "flat"); err != nil {
		t.Fatal(err)
	}
	owned(priv + "/flat.txt")
	up, err := e.files.Create(usr, priv+"/raced.txt", map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(up, "user's")
	testutil.WriteFile(t, priv+"/raced.txt", "root's", 0o644)
	wantKind(t, up.Commit(), filesystem.ErrExists, "cannot write "+priv+"/raced.txt")
	if b, _ := os.ReadFile(priv + "/raced.txt"); string(b) != "root's" || testutil.Owner(t, priv+"/raced.txt") != 0 {
		t.Error("root's file changed")
	}
	noTempIn(t, priv)

	// Root overwrites nothing for the user.
	testutil.WriteFile(t, priv+"/roots.txt", "root's", 0o644)
	wantKind(t, write(priv+"/roots.txt", "x"), filesystem.ErrPermission, "user 'user' may not write "+priv+"/roots.txt")
	if b, _ := os.ReadFile(priv + "/roots.txt"); string(b) != "root's" || testutil.Owner(t, priv+"/roots.txt") != 0 {
		t.Error("root's file changed")
	}
	// Root follows no link: user's symlink to root's directory.
	os.Symlink(priv, dir+"/ulink")
	os.Lchown(dir+"/ulink", int(usr.UID), int(usr.GID))
	wantKind(t, write(dir+"/ulink/via-link.txt", "x"), filesystem.ErrPermission, "user 'user' may not write "+dir+"/ulink/via-link.txt")
	wantKind(t, write(dir+"/ulink/new/via-link.txt", "x"), filesystem.ErrPermission, "user 'user'")
	_, err = e.files.MakeDir(usr, dir+"/ulink/newdir")
	wantKind(t, err, filesystem.ErrPermission, "user 'user' may not create directory")
	// Nor in a directory another user controls.
	other := dir + "/guests"
	os.Mkdir(other, 0o755)
	os.Chown(other, int(guest.UID), int(guest.GID))
	wantKind(t, write(other+"/x.txt", "x"), filesystem.ErrPermission, "user 'user' may not write "+other+"/x.txt")
	_, err = e.files.MakeDir(usr, other+"/d")
	wantKind(t, err, filesystem.ErrPermission, "user 'user' may not create directory "+other+"/d")
	for _, p := range []string{priv + "/via-link.txt", priv + "/new", priv + "/newdir", other + "/x.txt", other + "/d"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was made", p)
		}
	}
	// Nor in root's directory when user could have put it there: the 0777
	// WorkDir lets user rename its entries.
	swappable := testutil.PrivateDir(t)
	wantKind(t, write(swappable+"/x.txt", "x"), filesystem.ErrPermission, "user 'user' may not write "+swappable+"/x.txt")
	_, err = e.files.MakeDir(usr, swappable+"/d")
	wantKind(t, err, filesystem.ErrPermission, "user 'user' may not create directory "+swappable+"/d")
	for _, p := range []string{swappable + "/x.txt", swappable + "/d"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was made", p)
		}
	}
	noTempIn(t, swappable)
	// Remove stays the user's own.
	wantKind(t, e.files.Remove(usr, priv+"/roots.txt"), filesystem.ErrPermission, "user 'user' may not remove")
	noTempIn(t, priv)
	noTempIn(t, other)
}

// rootApp is root's 0755 directory, as WORKDIR /app makes it: user may
// enter it but not write it, and only root can change it or the names that
// lead to it.
func rootApp(t *testing.T) string {
	t.Helper()
	app := t.TempDir()
	for _, d := range []string{filepath.Dir(app), app} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return app
}

// upload writes content to p as u.
func upload(e *env, u *identity.User, p, content string) error {
	up, err := e.files.Create(u, p, nil)
	if err != nil {
		return err
	}
	io.WriteString(up, content)
	return up.Commit()
}

// give makes p (not what it links to) belong to u.
func give(t *testing.T, p string, u *identity.User) {
	t.Helper()
	if err := os.Lchown(p, int(u.UID), int(u.GID)); err != nil {
		t.Fatal(err)
	}
}

func gone(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s is still there", p)
		}
	}
}

func there(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// Default mode: what envd made for user in root's directory (an upload,
// a MakeDir), user may remove, as upstream removes it: root unlinks user's
// own entry there, through the directory, once user's own attempt removed
// what it could. Nothing else: not root's nor another user's entry, not in
// a directory user could have swapped, not through a link; in strict mode,
// not at all.
func TestDefaultModeRemovesUsersOwnInRootDir(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	strict := newEnv(t, filesystem.Options{StrictUsers: true})
	usr := testutil.User(t, "user")
	app := rootApp(t)
	dir := testutil.WorkDir(t)

	if err := upload(e, usr, app+"/a.txt", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.files.MakeDir(usr, app+"/sub"); err != nil {
		t.Fatal(err)
	}
	if err := upload(e, usr, app+"/sub/deep/f.txt", "f"); err != nil {
		t.Fatal(err)
	}
	testutil.WriteFile(t, app+"/roots.txt", "root's", 0o666)
	os.Symlink(app+"/roots.txt", app+"/link")
	give(t, app+"/link", usr)
	testutil.WriteFile(t, app+"/guests.txt", "guest's", 0o666)
	give(t, app+"/guests.txt", guest)
	// User's directory holding root's, which holds root's file: user
	// cannot empty it.
	testutil.WriteFile(t, app+"/mixed/roots/f", "root's", 0o666)
	give(t, app+"/mixed", usr)

	for _, p := range []string{app + "/a.txt", app + "/sub", app + "/link"} {
		wantKind(t, strict.files.Remove(usr, p), filesystem.ErrPermission, "user 'user' may not remove "+p)
	}
	there(t, app+"/a.txt", app+"/sub", app+"/link")

	for _, p := range []string{app + "/roots.txt", app + "/guests.txt", app + "/mixed"} {
		wantKind(t, e.files.Remove(usr, p), filesystem.ErrPermission, "user 'user' may not remove "+p)
	}
	there(t, app+"/roots.txt", app+"/guests.txt", app+"/mixed/roots/f")

	for _, p := range []string{app + "/a.txt", app + "/sub", app + "/link"} {
		if err := e.files.Remove(usr, p); err != nil {
			t.Errorf("remove %s: %v", p, err)
		}
	}
	gone(t, app+"/a.txt", app+"/sub", app+"/link")
	if b, _ := os.ReadFile(app + "/roots.txt"); string(b) != "root's" {
		t.Errorf("the link's target changed: %q", b)
	}

	// Root follows no link: user's link to root's directory.
	if err := upload(e, usr, app+"/b.txt", "b"); err != nil {
		t.Fatal(err)
	}
	os.Symlink(app, dir+"/ulink")
	give(t, dir+"/ulink", usr)
	wantKind(t, e.files.Remove(usr, dir+"/ulink/b.txt"), filesystem.ErrPermission, "user 'user' may not remove "+dir+"/ulink/b.txt")
	// Nor acts in root's directory when user could have put it there
	// (the 0777 WorkDir), nor where user may not go (root's 0700).
	swappable := dir + "/roots"
	testutil.WriteFile(t, swappable+"/mine", "m", 0o644)
	give(t, swappable+"/mine", usr)
	wantKind(t, e.files.Remove(usr, swappable+"/mine"), filesystem.ErrPermission, "user 'user' may not remove "+swappable+"/mine")
	priv := t.TempDir()
	os.Chmod(priv, 0o700)
	if err := upload(e, usr, priv+"/mine", "m"); err != nil {
		t.Fatal(err)
	}
	wantKind(t, e.files.Remove(usr, priv+"/mine"), filesystem.ErrPermission, "user 'user' may not remove "+priv+"/mine")
	there(t, app+"/b.txt", swappable+"/mine", priv+"/mine")
}

// Default mode: user renames its own entry in root's directory, within it
// and out of it, as upstream does: root renames it, through the
// directories, when user may do the rest (reach both, write the other if
// it is not root's), and replaces only user's own file there. Not into it
// from a directory user may write.
func TestDefaultModeMovesUsersOwnInRootDir(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	strict := newEnv(t, filesystem.Options{StrictUsers: true})
	usr := testutil.User(t, "user")
	app := rootApp(t)
	dir := testutil.WorkDir(t) // user may write it; /tmp as app
	read := func(p string) string {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	move := func(src, dst string) {
		t.Helper()
		en, err := e.files.Move(usr, src, dst)
		if err != nil {
			t.Fatalf("move %s to %s: %v", src, dst, err)
		}
		if en.Path != dst {
			t.Errorf("entry %+v", en)
		}
		gone(t, src)
		if testutil.Owner(t, dst) != usr.UID {
			t.Errorf("%s does not belong to user", dst)
		}
	}

	if err := upload(e, usr, app+"/a.txt", "a"); err != nil {
		t.Fatal(err)
	}
	_, err := strict.files.Move(usr, app+"/a.txt", app+"/b.txt")
	wantKind(t, err, filesystem.ErrPermission, "user 'user' may not move "+app+"/a.txt to "+app+"/b.txt")
	there(t, app+"/a.txt")

	move(app+"/a.txt", app+"/b.txt") // within
	if err := upload(e, usr, app+"/c.txt", "c"); err != nil {
		t.Fatal(err)
	}
	move(app+"/b.txt", app+"/c.txt") // over user's own file
	if read(app+"/c.txt") != "a" {
		t.Error("user's own file was not replaced")
	}
	move(app+"/c.txt", dir+"/out.txt") // out of
	// Not into it from a directory user may write: sandbox code could
	// swap what root checked there for an entry that is not user's.
	_, err = e.files.Move(usr, dir+"/out.txt", app+"/in.txt")
	wantKind(t, err, filesystem.ErrPermission, "user 'user' may not move "+dir+"/out.txt to "+app+"/in.txt")
	gone(t, app+"/in.txt")
	if err := upload(e, usr, app+"/in.txt", read(dir+"/out.txt")); err != nil {
		t.Fatal(err)
	}
	move(app+"/in.txt", app+"/new/deeper/in.txt") // into what root makes for user
	move(app+"/new", dir+"/new")                  // a directory, out of
	if read(dir+"/new/deeper/in.txt") != "a" {
		t.Error("content lost on the way")
	}
	_, err = e.files.Move(usr, dir+"/new", app+"/back") // and not back
	wantKind(t, err, filesystem.ErrPermission, "user 'user' may not move "+dir+"/new to "+app+"/back")
	if err := upload(e, usr, app+"/in.txt", "a"); err != nil {
		t.Fatal(err)
	}

	// Root replaces nothing but user's own file, moves nothing but user's.
	testutil.WriteFile(t, app+"/roots.txt", "root's", 0o644)
	testutil.WriteFile(t, app+"/guests.txt", "guest's", 0o644)
	give(t, app+"/guests.txt", guest)
	for _, dst := range []string{app + "/roots.txt", app + "/guests.txt"} {
		_, err := e.files.Move(usr, app+"/in.txt", dst)
		wantKind(t, err, filesystem.ErrPermission, "user 'user' may not move "+app+"/in.txt to "+dst)
	}
	for _, src := range []string{app + "/roots.txt", app + "/guests.txt"} {
		_, err := e.files.Move(usr, src, app+"/taken")
		wantKind(t, err, filesystem.ErrPermission, "user 'user' may not move")
		_, err = e.files.Move(usr, src, dir+"/taken")
		wantKind(t, err, filesystem.ErrPermission, "user 'user' may not move")
	}
	if read(app+"/roots.txt") != "root's" || read(app+"/guests.txt") != "guest's" || read(app+"/in.txt") != "a" {
		t.Error("a refused move changed a file")
	}
	gone(t, app+"/taken", dir+"/taken")

	// Nor where user may not write the other directory (another user's),
	// nor reach it (root's 0700), nor where user could have swapped the
	// directory (root's, in the 0777 WorkDir).
	guests := dir + "/guests"
	os.Mkdir(guests, 0o755)
	give(t, guests, guest)
	priv := t.TempDir()
	os.Chmod(priv, 0o700)
	swappable := dir + "/roots"
	os.Mkdir(swappable, 0o755)
	for _, dst := range []string{guests + "/x", priv + "/x", swappable + "/x"} {
		_, err := e.files.Move(usr, app+"/in.txt", dst)
		wantKind(t, err, filesystem.ErrPermission, "user 'user' may not move "+app+"/in.txt to "+dst)
	}
	gone(t, guests+"/x", priv+"/x", swappable+"/x")

	// Root follows no link: user's link to root's directory, at either
	// end.
	os.Symlink(app, dir+"/ulink")
	give(t, dir+"/ulink", usr)
	testutil.WriteFile(t, dir+"/mine", "m", 0o644)
	give(t, dir+"/mine", usr)
	for _, m := range [][2]string{
		{dir + "/ulink/in.txt", dir + "/ulink/via.txt"},
		{dir + "/ulink/in.txt", dir + "/via.txt"},
		{dir + "/mine", dir + "/ulink/via.txt"},
	} {
		_, err := e.files.Move(usr, m[0], m[1])
		wantKind(t, err, filesystem.ErrPermission, "user 'user' may not move "+m[0]+" to "+m[1])
	}
	there(t, app+"/in.txt", dir+"/mine")
	gone(t, app+"/via.txt", dir+"/via.txt")
}

// An upload's temporary file is renamed and removed through the descriptor
// of the directory it was made in: the user swapping that directory for a
// symlink mid-upload makes envd touch nothing elsewhere.
func TestUploadTempStaysInItsDirectory(t *testing.T) {
	t.Parallel()
	usr := testutil.User(t, "user")
	for _, strict := range []bool{false, true} {
		for _, end := range []string{"abort", "commit", "commit fails"} {
			t.Run(fmt.Sprintf("strict=%v %s", strict, end), func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, filesystem.Options{StrictUsers: strict})
				dir := testutil.WorkDir(t)
				ud, victim := dir+"/ud", dir+"/victim"
				os.Mkdir(ud, 0o755)
				os.Chown(ud, int(usr.UID), int(usr.GID))
				os.Mkdir(victim, 0o755)
				if end == "commit fails" {
					// A directory where the target is: the rename fails.
					os.Mkdir(ud+"/t.txt.d", 0o755)
				}
				target := ud + "/t.txt"
				up, err := e.files.Create(usr, target, nil)
				if err != nil {
					t.Fatal(err)
				}
				des, _ := os.ReadDir(ud)
				var tmp string
				for _, de := range des {
					if filesystem.IsTemp(de.Name()) {
						tmp = de.Name()
					}
				}
				if tmp == "" {
					t.Fatal("no temporary file")
				}
				io.WriteString(up, "new")
				// What user's code could do: move its directory away, put
				// a link to root's directory in its place, where root's
				// file has the temporary file's name.
				if err := os.Rename(ud, ud+".old"); err != nil {
					t.Fatal(err)
				}
				if end == "commit fails" {
					os.Rename(ud+".old/t.txt.d", ud+".old/t.txt")
				}
				os.Symlink(victim, ud)
				testutil.WriteFile(t, victim+"/"+tmp, "root's", 0o644)

				switch end {
				case "abort":
					up.Abort()
				case "commit":
					if err := up.Commit(); err != nil {
						t.Fatal(err)
					}
					if b, _ := os.ReadFile(ud + ".old/t.txt"); string(b) != "new" {
						t.Errorf("committed content %q", b)
					}
				case "commit fails":
					if err := up.Commit(); err == nil {
						t.Fatal("committed over a directory")
					}
				}
				if b, err := os.ReadFile(victim + "/" + tmp); string(b) != "root's" {
					t.Errorf("root's file: %q %v", b, err)
				}
				if _, err := os.Lstat(victim + "/t.txt"); err == nil {
					t.Error("the target went to root's directory")
				}
				noTempIn(t, ud+".old")
			})
		}
	}
}

func noTempIn(t *testing.T, dir string) {
	t.Helper()
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		if filesystem.IsTemp(de.Name()) {
			t.Errorf("temporary file left in %s: %s", dir, de.Name())
		}
	}
}

// BenchmarkStatDoVsDoStrict measures what the strict mode costs a Stat:
// each iteration stats one file as user with Do, then with DoStrict.
func BenchmarkStatDoVsDoStrict(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("acts as user: run as root")
	}
	usr, err := identity.Lookup("user")
	if err != nil {
		b.Fatal(err)
	}
	p := filepath.Join(testutil.WorkDir(b), "f")
	testutil.WriteFile(b, p, "x", 0o644)
	statAs := func(do func(func() error) error) error {
		return do(func() error { _, err := os.Lstat(p); return err })
	}
	var doNs, strictNs int64
	b.ResetTimer()
	for range b.N {
		t0 := time.Now().UnixNano()
		if err := statAs(usr.Do); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now().UnixNano()
		if err := statAs(usr.DoStrict); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now().UnixNano()
		doNs += t1 - t0
		strictNs += t2 - t1
	}
	b.ReportMetric(float64(doNs)/float64(b.N), "Do-ns/op")
	b.ReportMetric(float64(strictNs)/float64(b.N), "DoStrict-ns/op")
	b.ReportMetric(float64(strictNs)/float64(doNs), "ratio")
}
