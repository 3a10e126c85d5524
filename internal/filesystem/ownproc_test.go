package filesystem_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/testutil"
)

// otherThread is a thread of this process (envd, for these tests) other
// than its main one.
func otherThread(t *testing.T) int {
	t.Helper()
	des, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if tid, err := strconv.Atoi(de.Name()); err == nil && tid != os.Getpid() {
			return tid
		}
	}
	t.Fatal("a single thread")
	return 0
}

// TestStrictOwnProc: in strict mode, a user other than root reads nothing
// of envd's own /proc (this test process is envd here), whatever the path
// it goes through: a thread acting as the user is exempt from the
// kernel's checks there. A user's own process stays readable, root and the
// default mode are unchanged.
func TestStrictOwnProc(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{StrictUsers: true})
	def := newEnv(t, filesystem.Options{})
	usr := testutil.User(t, "user")
	root := testutil.User(t, "root")
	pid, tid := os.Getpid(), otherThread(t)
	mine := testutil.Sleeper(t, usr) // a process of user's own
	dir := testutil.WorkDir(t)
	link := func(name, target string) string {
		p := filepath.Join(dir, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, int(usr.UID), int(usr.GID)); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mapsLink := link("maps", fmt.Sprintf("/proc/%d/maps", pid))
	selfLink := link("self", "/proc/self")
	fdLink := link("fd0", fmt.Sprintf("/proc/%d/fd/0", pid))
	const own = "it is envd's own process"

	for _, p := range []string{
		fmt.Sprintf("/proc/%d/maps", pid),
		"/proc/self/maps",
		"/proc/self/status",
		"/proc/thread-self/status",
		fmt.Sprintf("/proc/%d/task/%d/maps", pid, tid),
		fmt.Sprintf("/proc/%d/status", tid),
		"/proc/net/unix",
		mapsLink,
		selfLink + "/status",
		fdLink,
	} {
		_, err := e.files.Open(usr, p)
		if p == fdLink {
			// Its target is a magic link: refused as any is.
			wantKind(t, err, filesystem.ErrPermission, "goes through a /proc link")
		} else {
			wantKind(t, err, filesystem.ErrPermission, own, "user 'user'")
		}
		_, err = e.files.Stat(usr, p)
		if p != mapsLink && p != fdLink { // the link itself is user's own
			wantKind(t, err, filesystem.ErrPermission, own)
		}
		_, err = e.files.Compose(usr, []string{p}, filepath.Join(dir, "composed"))
		if p == mapsLink || p == fdLink {
			wantKind(t, err, filesystem.ErrInvalid, "is a symbolic link") // a source is never a link
		} else {
			wantKind(t, err, filesystem.ErrPermission, own)
		}
	}
	for _, p := range []string{fmt.Sprintf("/proc/%d/root/etc/passwd", pid), fmt.Sprintf("/proc/%d/cwd/x", mine), fmt.Sprintf("/proc/%d/exe", mine)} {
		_, err := e.files.Open(usr, p)
		wantKind(t, err, filesystem.ErrPermission, "goes through a /proc link")
	}
	for _, p := range []string{"/proc/self", "/proc/thread-self", fmt.Sprintf("/proc/%d", pid), fmt.Sprintf("/proc/%d/fd/0", pid), fmt.Sprintf("/proc/%d/cwd", pid)} {
		_, err := e.files.Stat(usr, p)
		wantKind(t, err, filesystem.ErrPermission, own)
	}
	for _, p := range []string{"/proc/self/fd", fmt.Sprintf("/proc/%d", tid), selfLink, fmt.Sprintf("/proc/%d/task", pid)} {
		_, err := e.files.ListDir(usr, p, 1)
		wantKind(t, err, filesystem.ErrPermission, own)
		_, err = e.files.Watch(usr, p, filesystem.WatchOptions{Recursive: true})
		wantKind(t, err, filesystem.ErrPermission, own)
		if p == selfLink {
			p += "/fd" // a walk's root is never a link
		}
		err = e.files.WalkTree(usr, p, func(filesystem.TreeEntry) error { return nil })
		wantKind(t, err, filesystem.ErrPermission, own)
	}

	// A link of the user's own is refused as a source for what it is, as
	// in the default mode.
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("x"), 0o666); err != nil {
		t.Fatal(err)
	}
	_, err := e.files.Compose(usr, []string{link("plain-link", plain)}, filepath.Join(dir, "composed"))
	wantKind(t, err, filesystem.ErrInvalid, "is a symbolic link")

	// What the user's links lead to stays untold.
	for _, p := range []string{mapsLink, fdLink, selfLink} {
		en, err := e.files.Stat(usr, p)
		if err != nil {
			t.Fatal(err)
		}
		if en.SymlinkTarget == nil || *en.SymlinkTarget != p {
			t.Errorf("Stat %s: target %v, want the link's own path (it leads nowhere the user may see)", p, en.SymlinkTarget)
		}
	}

	// A watch describes a link the user makes to envd's /proc as leading
	// nowhere.
	wdir := filepath.Join(dir, "watched")
	if err := os.Mkdir(wdir, 0o777); err != nil {
		t.Fatal(err)
	}
	w, err := e.files.Watch(usr, wdir, filesystem.WatchOptions{IncludeEntry: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := os.Symlink(fmt.Sprintf("/proc/%d/fd/0", pid), filepath.Join(wdir, "l")); err != nil {
		t.Fatal(err)
	}
	var evs []filesystem.Event
	for ctx := testutil.Context(t, waitLong); len(evs) == 0; {
		select {
		case <-w.Ready():
		case <-ctx.Done():
			t.Fatal("no event")
		}
		evs, err = w.Drain()
		if err != nil {
			t.Fatal(err)
		}
	}
	if en := evs[0].Entry; en == nil || en.SymlinkTarget == nil || *en.SymlinkTarget != filepath.Join(wdir, "l") {
		t.Errorf("watch event %+v: want the link's own path as its target", evs[0])
	}

	// /proc lists, without envd's own entries; a walk of a procfs with
	// envd's entries in it leaves them out.
	es, err := e.files.ListDir(usr, "/proc", 2)
	if err != nil {
		t.Fatal(err)
	}
	sawMine := false
	for _, en := range es {
		for _, o := range []string{fmt.Sprintf("/proc/%d", pid), "/proc/self", "/proc/thread-self"} {
			if en.Path == o || strings.HasPrefix(en.Path, o+"/") {
				t.Errorf("ListDir /proc lists %s", en.Path)
			}
		}
		sawMine = sawMine || en.Path == fmt.Sprintf("/proc/%d/status", mine)
	}
	if !sawMine {
		t.Errorf("ListDir /proc lacks /proc/%d/status, of user's own process", mine)
	}
	var walked []string
	err = e.files.WalkTree(usr, fmt.Sprintf("/proc/%d/task/..", mine), func(en filesystem.TreeEntry) error {
		walked = append(walked, en.Rel)
		return nil
	})
	_ = err // a process's /proc has files no one may read: the walk stops at one
	if len(walked) == 0 {
		t.Errorf("WalkTree of user's own /proc/%d saw nothing", mine)
	}

	// user's own process, root, and the default mode.
	f, err := e.files.Open(usr, fmt.Sprintf("/proc/%d/status", mine))
	if err != nil {
		t.Fatalf("user's own process: %v", err)
	}
	if !strings.Contains(readAll(t, f), fmt.Sprintf("Uid:\t%d", usr.UID)) {
		t.Errorf("user's own process: not user's status")
	}
	if _, err := e.files.Stat(usr, fmt.Sprintf("/proc/%d/cwd", mine)); err != nil {
		t.Errorf("Stat user's own /proc/%d/cwd: %v", mine, err)
	}
	for _, c := range []struct {
		name  string
		files *filesystem.Files
		user  string
	}{{"root, strict", e.files, "root"}, {"user, default mode", def.files, "user"}} {
		u := root
		if c.user == "user" {
			u = usr
		}
		f, err := c.files.Open(u, "/proc/self/maps")
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !bytes.Contains([]byte(readAll(t, f)), []byte("[stack]")) {
			t.Errorf("%s: no memory map", c.name)
		}
		if _, err := c.files.ListDir(u, "/proc/self/fd", 1); err != nil {
			t.Errorf("%s: ListDir /proc/self/fd: %v", c.name, err)
		}
	}

	// A message the user can act on (over Connect, permission_denied:
	// fsconnect's TestStrictModeOverConnect).
	_, err = e.files.ListDir(usr, "/proc/self/fd", 1)
	wantKind(t, err, filesystem.ErrPermission, "user 'user' may not read /proc/self/fd: it is envd's own process", "read /proc/<pid> of a process of your own instead")
}
