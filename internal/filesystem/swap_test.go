package filesystem_test

import (
	"os"
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
	root, err := identity.Current()
	if err != nil {
		t.Fatal(err)
	}
	target := testutil.WorkDir(t) + "/out.txt"
	testutil.SwapFIFO(t, target)
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
	tree := testutil.WorkDir(t) + "/tree"
	if err := os.Mkdir(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := identity.Current()
	if err != nil {
		t.Fatal(err)
	}
	testutil.SwapFIFO(t, tree+"/out.txt")
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
