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
