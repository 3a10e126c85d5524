package filesystem_test

import (
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/testutil"
)

// Open checks that path is a regular file, then opens it: sandbox code
// swapping a FIFO in between must not get envd a FIFO to read, which, with
// the sandbox holding its write end open, a download (gzip) or an archive
// would read from forever.
func TestOpenNeverReturnsAFIFO(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	dir := testutil.WorkDir(t)
	root, err := identity.Current()
	if err != nil {
		t.Fatal(err)
	}
	target := dir + "/out.txt"
	if err := os.WriteFile(dir+"/reg", []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(dir+"/fifo", 0o644); err != nil {
		t.Fatal(err)
	}
	// Keep a writer on the FIFO, as the sandbox would.
	w, err := os.OpenFile(dir+"/fifo", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// "sandbox code": out.txt is the regular file, then the FIFO, in turn.
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			os.Link(dir+"/reg", dir+"/tmp1")
			os.Rename(dir+"/tmp1", target)
			os.Link(dir+"/fifo", dir+"/tmp2")
			os.Rename(dir+"/tmp2", target)
		}
	}()
	defer func() { stop.Store(true); <-done }()
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		f, err := e.files.Open(root, target)
		if err != nil {
			continue // the FIFO, seen as such: refused, as it should be
		}
		fi, err := f.Stat()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() {
			t.Fatalf("after %d tries, Open returned %s, a %v, not a regular file", i, target, fi.Mode().Type())
		}
	}
}

// WalkTree (a directory downloaded as an archive) lstats an entry, then
// opens it: the same swap must not hand the archive writer a FIFO.
func TestWalkTreeNeverReturnsAFIFO(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	dir := testutil.WorkDir(t)
	tree := dir + "/tree"
	if err := os.Mkdir(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := identity.Current()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/reg", []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(dir+"/fifo", 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(dir+"/fifo", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			os.Link(dir+"/reg", dir+"/tmp1")
			os.Rename(dir+"/tmp1", tree+"/out.txt")
			os.Link(dir+"/fifo", dir+"/tmp2")
			os.Rename(dir+"/tmp2", tree+"/out.txt")
		}
	}()
	defer func() { stop.Store(true); <-done }()
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		err := e.files.WalkTree(root, tree, func(te filesystem.TreeEntry) error {
			if te.File == nil {
				return nil
			}
			fi, err := te.File.Stat()
			if err != nil {
				return err
			}
			if !fi.Mode().IsRegular() {
				t.Fatalf("after %d walks, WalkTree gave %s open as a %v, described as a regular file of %d bytes", i, te.Rel, fi.Mode().Type(), te.Stat.Size)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
