package client_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/client"

	"github.com/envd-dev/envd/internal/testutil"
)

// sandboxDir is a fresh directory for a test. envd runs on this machine, so
// the test may look at it directly too.
func sandboxDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "envd-client-files-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestFileOps(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{User: "root"})
	ctx := testContext(t, testutil.Wait)
	dir := sandboxDir(t)

	fi, err := c.MakeDir(ctx, dir+"/a/b")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Type != client.TypeDir || fi.Path != dir+"/a/b" || fi.Mode != 0o755 || fi.Permissions != "drwxr-xr-x" {
		t.Errorf("MakeDir: %+v", fi)
	}
	if _, err := c.MakeDir(ctx, dir+"/a/b"); !errors.Is(err, client.ErrAlreadyExists) {
		t.Errorf("MakeDir of an existing dir: %v, want already exists", err)
	}
	p, err := c.Upload(ctx, dir+"/a/b/f.txt", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if p != dir+"/a/b/f.txt" {
		t.Errorf("Upload returned %q", p)
	}
	fi, err = c.Stat(ctx, dir+"/a/b/f.txt")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Type != client.TypeFile || fi.Size != 5 || fi.Name != "f.txt" || fi.Mode != 0o644 || fi.ModTime.IsZero() || fi.Owner == "" {
		t.Errorf("Stat: %+v", fi)
	}
	if err := os.Symlink(dir+"/a/b/f.txt", dir+"/link"); err != nil {
		t.Fatal(err)
	}
	list, err := c.ListDir(ctx, dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range list {
		names = append(names, strings.TrimPrefix(e.Path, dir+"/"))
		if e.Name == "link" && e.SymlinkTarget != dir+"/a/b/f.txt" {
			t.Errorf("link: %+v", e)
		}
	}
	if want := []string{"a", "a/b", "a/b/f.txt", "link"}; !slices.Equal(names, want) {
		t.Errorf("ListDir depth 3: %v, want %v", names, want)
	}
	if list, err := c.ListDir(ctx, dir, 0); err != nil || len(list) != 2 {
		t.Errorf("ListDir depth 0: %d entries, %v; want 2", len(list), err)
	}
	if _, err := c.ListDir(ctx, dir, -1); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("ListDir depth -1: %v", err)
	}
	if _, err := c.ListDir(ctx, dir+"/a/b/f.txt", 1); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("ListDir of a file: %v, want invalid argument", err)
	}
	fi, err = c.Move(ctx, dir+"/a/b/f.txt", dir+"/c/g.txt")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Path != dir+"/c/g.txt" {
		t.Errorf("Move: %+v", fi)
	}
	if _, err := c.Move(ctx, dir+"/nope", dir+"/x"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Move of a missing file: %v, want not found", err)
	}
	if err := c.Remove(ctx, dir+"/a"); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, dir+"/a"); err != nil {
		t.Errorf("Remove of a missing path: %v, want success", err)
	}
	if _, err := c.Stat(ctx, dir+"/a"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Stat after Remove: %v, want not found", err)
	}
}

func TestUploadDownload(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{User: "root"})
	// Six 8 MiB transfers through -race builds on a machine the suite
	// loads: bounded as a program is.
	ctx := testContext(t, testutil.Program)
	dir := sandboxDir(t)

	data := make([]byte, 8<<20+123)
	rand.Read(data)
	tests := []struct {
		name string
		body io.Reader
	}{
		{"bytes.Reader (sized)", bytes.NewReader(data)},
		{"plain reader (chunked)", io.MultiReader(bytes.NewReader(data[:1000]), bytes.NewReader(data[1000:]))},
		{"file", func() io.Reader {
			p := filepath.Join(sandboxDir(t), "src")
			os.WriteFile(p, data, 0o644)
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			return f
		}()},
	}
	for i, tt := range tests {
		dst := filepath.Join(dir, "sub", string(rune('a'+i)))
		if _, err := c.Upload(ctx, dst, tt.body); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		r, err := c.Download(ctx, dst)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(got, data) || r.Size != int64(len(data)) {
			t.Errorf("%s: downloaded %d bytes (size %d), %v; want the %d uploaded", tt.name, len(got), r.Size, err, len(data))
		}
	}
	// An empty file.
	if _, err := c.Upload(ctx, dir+"/empty", strings.NewReader("")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir + "/empty"); err != nil || fi.Size() != 0 {
		t.Errorf("empty upload: %v, %v", fi, err)
	}

	if _, err := c.Download(ctx, dir+"/missing"); !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Download of a missing file: %v, want not found", err)
	}
	if _, err := c.Download(ctx, dir); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("Download of a directory: %v, want invalid argument", err)
	}
	if _, err := c.Upload(ctx, dir, strings.NewReader("x")); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("Upload onto a directory: %v, want invalid argument", err)
	}
	if _, err := c.Upload(ctx, "", strings.NewReader("x")); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("Upload to no path: %v, want invalid argument", err)
	}
	var e *client.Error
	if _, err := c.Download(ctx, dir+"/missing"); !errors.As(err, &e) || e.Status != 404 {
		t.Errorf("Download of a missing file: %#v, want status 404", err)
	}
}

// failingReader fails after n bytes.
type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("disk on fire")
	}
	n := min(len(p), f.n)
	clear(p[:n])
	f.n -= n
	return n, nil
}

func TestUploadReaderFails(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{User: "root"})
	ctx := testContext(t, testutil.Wait)
	dir := sandboxDir(t)
	os.WriteFile(dir+"/kept", []byte("old"), 0o644)
	if _, err := c.Upload(ctx, dir+"/kept", &failingReader{n: 1 << 20}); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("Upload from a failing reader: %v", err)
	}
	// No half-written file replaces the old one.
	if b, _ := os.ReadFile(dir + "/kept"); string(b) != "old" {
		t.Errorf("after a failed upload the file holds %d bytes", len(b))
	}
}

func TestWatch(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{User: "root"})
	ctx := testContext(t, testutil.Wait)
	dir := sandboxDir(t)
	os.Mkdir(dir+"/sub", 0o755)
	w, err := c.Watch(ctx, dir, client.WatchOptions{Recursive: true, IncludeEntry: true})
	if err != nil {
		t.Fatal(err)
	}
	// Watch returned: the watch covers dir and sub already.
	os.WriteFile(dir+"/sub/f", []byte("x"), 0o644)
	os.Remove(dir + "/sub/f")
	os.Mkdir(dir+"/new", 0o755)
	var got []string
	for ev, err := range w.Events() {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Op.String()+" "+ev.Name)
		if ev.Name == "new" {
			// Entries are read when envd sees the event (sub/f may be gone
			// by then): new stays.
			if ev.Entry == nil || ev.Entry.Type != client.TypeDir {
				t.Errorf("create new with entry %+v, want a directory", ev.Entry)
			}
			break
		}
	}
	w.Close()
	want := []string{"create sub/f", "write sub/f", "remove sub/f", "create new"}
	if !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	if _, err := c.Watch(ctx, dir+"/missing", client.WatchOptions{}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Watch of a missing dir: %v, want not found", err)
	}
}

func TestWatchClose(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{User: "root"})
	w, err := c.Watch(testContext(t, testutil.Wait), sandboxDir(t), client.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(100*time.Millisecond, func() { w.Close() })
	for _, err := range w.Events() {
		t.Errorf("event or error after Close: %v", err)
	}
}

// TestStdlibSentinels: a failed file operation matches the standard
// library's fs sentinels as os's own errors do; other failures of the same
// code do not; a caller's deadline is context.DeadlineExceeded.
func TestStdlibSentinels(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{User: "user"})
	ctx := testContext(t, testutil.Wait)
	dir := sandboxDir(t)

	_, err := c.Stat(ctx, dir+"/missing")
	if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Stat of a missing file: %v, want fs.ErrNotExist and client.ErrNotFound", err)
	}
	if _, err := c.MakeDir(ctx, dir); !errors.Is(err, fs.ErrExist) {
		t.Errorf("MakeDir of an existing dir: %v, want fs.ErrExist", err)
	}
	if err := c.Remove(ctx, "/root"); !errors.Is(err, fs.ErrPermission) {
		t.Errorf("Remove /root as user: %v, want fs.ErrPermission", err)
	}
	if err := c.Signal(ctx, client.Selector{PID: 999999}, syscall.SIGKILL); !errors.Is(err, client.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Kill of a missing pid: %v, want client.ErrNotFound and not fs.ErrNotExist", err)
	}

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = c.Run(short, client.Command{Name: "sleep", Args: []string{"30"}})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		t.Errorf("Run past the caller's deadline: %v, want context.DeadlineExceeded", err)
	}
}
