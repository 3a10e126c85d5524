package filesystem_test

import (
	"bytes"
	"io"
	"os"
	"strconv"
	"testing"

	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/testutil"
)

// An upload to a symlink writes through it (docs/wire.md): when the user
// may not reach the link's target, the upload is refused, as `echo > link`
// is in a shell; the link is never replaced by a file of its own.
func TestUploadThroughUnreachableLinkKeepsTheLink(t *testing.T) {
	t.Parallel()
	for _, strict := range []bool{false, true} {
		e := newEnv(t, filesystem.Options{StrictUsers: strict})
		usr := testutil.User(t, "user")
		dir := testutil.WorkDir(t)
		priv := testutil.PrivateDir(t) // root's, 0700
		testutil.WriteFile(t, priv+"/target", "root's", 0o666)
		if err := os.Symlink(priv+"/target", dir+"/link"); err != nil {
			t.Fatal(err)
		}
		up, err := e.files.Create(usr, dir+"/link", nil)
		if err == nil {
			io.WriteString(up, "new")
			err = up.Commit()
		}
		fi, lerr := os.Lstat(dir + "/link")
		if lerr != nil {
			t.Fatal(lerr)
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("strict=%v: upload to %s/link (err %v) replaced the link with a %v", strict, dir, err, fi.Mode().Type())
		}
		if err == nil {
			t.Errorf("strict=%v: upload through a link to a file user may not reach succeeded", strict)
		}
	}
}

// An archive whose file would replace a directory of DIR is refused; it
// must leave DIR as it was (docs/wire.md: the archive is staged, then
// moved into place), not half unpacked.
func TestExtractTarConflictLeavesDirAsItWas(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	usr := testutil.User(t, "user")
	dir := testutil.WorkDir(t)
	if err := os.Mkdir(dir+"/b", 0o777); err != nil {
		t.Fatal(err)
	}
	entries := []string{"b"}
	for i := range 50 {
		entries = append(entries, "a"+strconv.Itoa(i))
	}
	_, err := e.files.ExtractTar(usr, dir, bytes.NewReader(tarOf(t, entries...)))
	if err == nil {
		t.Fatal("a file over a directory was unpacked")
	}
	des, _ := os.ReadDir(dir)
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	if len(names) != 1 {
		t.Errorf("ExtractTar failed (%v) and left %d entries in DIR, want only b: %q", err, len(names), names)
	}
}
