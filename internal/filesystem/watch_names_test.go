package filesystem_test

import (
	"os"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/testutil"
)

// drainUntil collects a watch's events until the last one is want.
func drainUntil(t *testing.T, w *filesystem.Watch, want string) []string {
	t.Helper()
	var got []string
	deadline := time.After(waitLong)
	for {
		evs, err := w.Drain()
		for _, ev := range evs {
			got = append(got, ev.Type.String()+" "+ev.Name)
		}
		if err != nil {
			t.Fatalf("watch failed: %v (events %q)", err, got)
		}
		if len(got) > 0 && got[len(got)-1] == want {
			return got
		}
		select {
		case <-w.Ready():
		case <-deadline:
			t.Fatalf("no %q; events %q", want, got)
		}
	}
}

// linkedDir makes, in a fresh work directory DIR, the directory DIR/name
// (mode perm) and the link DIR/link to it, and returns DIR.
func linkedDir(t *testing.T, name string, perm os.FileMode) string {
	t.Helper()
	dir := testutil.WorkDir(t)
	if err := os.Mkdir(dir+"/"+name, perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(name, dir+"/link"); err != nil {
		t.Fatal(err)
	}
	return dir
}

// me is the test's own user (root).
func me(t *testing.T) *identity.User {
	t.Helper()
	u, err := identity.Current()
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// An editor's atomic save, done twice: write a temporary file, rename it
// over the target. Each save renames the temporary file away, and each
// rename must be reported: a client that misses the second one thinks the
// temporary file is still there.
func TestWatchReportsEveryRenameOfAFile(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	dir := testutil.WorkDir(t)
	root, err := identity.Current()
	if err != nil {
		t.Fatal(err)
	}
	w, err := e.files.Watch(root, dir, filesystem.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	for i := range 2 {
		if err := os.WriteFile(dir+"/f.tmp", []byte{byte('a' + i)}, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(dir+"/f.tmp", dir+"/f"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // saves apart in time: not one batch
	}
	// Nothing else happens in dir: the marker ends the test's events.
	if err := os.Mkdir(dir+"/end", 0o755); err != nil {
		t.Fatal(err)
	}
	got := drainUntil(t, w, "create end")
	n := 0
	for _, ev := range got {
		if ev == "rename f.tmp" {
			n++
		}
	}
	if n != 2 {
		t.Errorf("f.tmp was renamed twice, %d rename events: %q", n, got)
	}
}

// Two watches of one directory by two names (a symlink, a bind mount):
// each must report what happens in it.
func TestWatchSameDirectoryByTwoNames(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	dir, root := linkedDir(t, "real", 0o755), me(t)
	w1, err := e.files.Watch(root, dir+"/real", filesystem.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()
	w2, err := e.files.Watch(root, dir+"/link", filesystem.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if err := os.Mkdir(dir+"/real/x", 0o755); err != nil {
		t.Fatal(err)
	}
	drainUntil(t, w1, "create x")
	deadline := time.After(5 * time.Second)
	for {
		evs, err := w2.Drain()
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) > 0 {
			return
		}
		select {
		case <-w2.Ready():
		case <-deadline:
			t.Fatal("the watch of the link reported nothing of the create that the watch of the directory reported")
		}
	}
}

// Two watches of one directory by two names: once either is closed, the
// other still reports, under its own name. The kernel has one watch of the
// directory for both.
func TestWatchSameDirectoryByTwoNamesOneClosed(t *testing.T) {
	t.Parallel()
	for _, closed := range []string{"real", "link"} {
		t.Run("close "+closed, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, filesystem.Options{})
			dir, root := linkedDir(t, "real", 0o755), me(t)
			ws := map[string]*filesystem.Watch{}
			for _, name := range []string{"real", "link"} { // real first: fsnotify's name
				w, err := e.files.Watch(root, dir+"/"+name, filesystem.WatchOptions{})
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				ws[name] = w
			}
			ws[closed].Close()
			if err := os.Mkdir(dir+"/real/x", 0o755); err != nil {
				t.Fatal(err)
			}
			for name, w := range ws {
				if name != closed {
					drainUntil(t, w, "create x")
				}
			}
		})
	}
}

// A recursive watch holds a directory that another watch holds by another
// name, whichever came first: each reports under its own names, and the
// recursive one still reports once the other is closed.
func TestWatchSameDirectoryByTwoNamesRecursive(t *testing.T) {
	t.Parallel()
	for _, linkFirst := range []bool{false, true} {
		t.Run(map[bool]string{false: "tree first", true: "link first"}[linkFirst], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, filesystem.Options{})
			dir, root := linkedDir(t, "real", 0o755), me(t)
			watchLink := func() *filesystem.Watch {
				w, err := e.files.Watch(root, dir+"/link", filesystem.WatchOptions{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(w.Close)
				return w
			}
			var link *filesystem.Watch
			if linkFirst {
				link = watchLink()
			}
			tree, err := e.files.Watch(root, dir, filesystem.WatchOptions{Recursive: true})
			if err != nil {
				t.Fatal(err)
			}
			defer tree.Close()
			if !linkFirst {
				link = watchLink()
			}
			if err := os.Mkdir(dir+"/real/y", 0o755); err != nil {
				t.Fatal(err)
			}
			drainUntil(t, tree, "create real/y")
			drainUntil(t, link, "create y")

			link.Close()
			if err := os.Mkdir(dir+"/real/z", 0o755); err != nil {
				t.Fatal(err)
			}
			drainUntil(t, tree, "create real/z")
			// And below: the new directory is watched too.
			if err := os.Mkdir(dir+"/real/z/w", 0o755); err != nil {
				t.Fatal(err)
			}
			drainUntil(t, tree, "create real/z/w")
		})
	}
}

// In strict mode, a directory the kernel watches already for someone else
// is still refused to a user who may not read it, by whatever name.
func TestWatchSecondNameStillChecksPermission(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{StrictUsers: true})
	dir, root := linkedDir(t, "priv", 0o700), me(t)
	w, err := e.files.Watch(root, dir+"/priv", filesystem.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w2, err := e.files.Watch(guest, dir+"/link", filesystem.WatchOptions{})
	if err == nil {
		w2.Close()
	}
	wantKind(t, err, filesystem.ErrPermission, "user 'guest-test' may not watch")
}

// Two recursive watches of one tree, a subdirectory moved within it: each
// watch follows it to its new name, whichever watch sees the move first
// (fsnotify forgets a moved directory's watch, and the hub must not keep
// using the name it forgot).
func TestWatchMovedDirectoryTwoWatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	dir := testutil.WorkDir(t)
	if err := os.Mkdir(dir+"/sub", 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := identity.Current()
	if err != nil {
		t.Fatal(err)
	}
	var ws []*filesystem.Watch
	for range 2 {
		w, err := e.files.Watch(root, dir, filesystem.WatchOptions{Recursive: true})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		ws = append(ws, w)
	}
	if err := os.Rename(dir+"/sub", dir+"/moved"); err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		drainUntil(t, w, "create moved")
	}
	if err := os.Mkdir(dir+"/moved/q", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		drainUntil(t, w, "create moved/q")
	}
}

// A watched subdirectory's own chmod is reported once, not also by itself.
func TestWatchSubdirChmodOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	dir := testutil.WorkDir(t)
	if err := os.Mkdir(dir+"/sub", 0o755); err != nil {
		t.Fatal(err)
	}
	root, _ := identity.Current()
	w, err := e.files.Watch(root, dir, filesystem.WatchOptions{Recursive: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	os.Chmod(dir+"/sub", 0o700)
	os.Chmod(dir+"/sub", 0o755)
	os.Mkdir(dir+"/end", 0o755)
	n := 0
	for _, ev := range drainUntil(t, w, "create end") {
		if ev == "chmod sub" {
			n++
		}
	}
	if n != 2 {
		t.Errorf("two chmods of sub, %d events", n)
	}
}
