package filesystem_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/testutil"
)

// tarOf builds a tar of entries: "d/" a directory, "name -> target" a
// symbolic link, anything else a file holding "data".
func tarOf(t *testing.T, entries ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e, Typeflag: tar.TypeReg, Mode: 0o644, Size: 4}
		switch name, target, isLink := strings.Cut(e, " -> "); {
		case isLink:
			h = &tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}
		case strings.HasSuffix(e, "/"):
			h = &tar.Header{Name: e, Typeflag: tar.TypeDir, Mode: 0o755}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte("data"))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// escapeDirs are the directories of the escaping archive: six deep.
var escapeDirs = []string{"a/", "a/b/", "a/b/c/", "a/b/c/d/", "a/b/c/d/e/", "a/b/c/d/e/f/"}

// TestExtractTarLinkEscapes: links that lexically stay in the directory but,
// resolved as the kernel resolves them (through a link, then ".."), lead
// out of it are refused, whatever their order in the archive, and nothing
// is unpacked; links that stay inside are unpacked and resolve inside.
func TestExtractTarLinkEscapes(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	files := filesystem.New(filesystem.Options{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { files.Close() })
	u, err := identity.Lookup("user")
	if err != nil {
		t.Fatal(err)
	}
	// The escaping archive: L goes up to the top, and esc goes through L
	// and up again, to /etc.
	issue := append(append([]string{}, escapeDirs...),
		"a/b/c/d/e/f/L -> ../../../../../..",
		"esc -> a/b/c/d/e/f/L/../../../../../../../etc")
	reordered := append([]string{"esc -> a/b/c/d/e/f/L/../../../../../../../etc"}, escapeDirs...)
	reordered = append(reordered, "a/b/c/d/e/f/L -> ../../../../../..")
	for _, tc := range []struct {
		name    string
		entries []string
	}{
		{"the issue's archive", issue},
		{"the link first", reordered},
		{"a link to the top, then up", []string{"top -> .", "esc -> top/.."}},
		{"up through a link not made yet", []string{"esc -> top/../etc", "top -> ."}},
		{"up through a link in a directory", []string{"d/", "d/l -> .", "up -> d/l/../.."}},
		// Harmless alone, but a later upload could make "later" a link.
		{"up through a name not there", []string{"esc -> later/../x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(testutil.WorkDir(t), "out")
			_, err := files.ExtractTar(u, dir, bytes.NewReader(tarOf(t, tc.entries...)))
			if !errors.Is(err, filesystem.ErrArchive) || !strings.Contains(err.Error(), "after a name") {
				t.Fatalf("ExtractTar: %v, want a refused archive", err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("a refused archive left %v", entries)
			}
		})
	}

	// Links that stay inside: unpacked, and each resolves beneath the
	// directory as the kernel resolves it.
	dir := filepath.Join(testutil.WorkDir(t), "ok")
	ok := append(append([]string{}, escapeDirs...),
		"a/b/c/d/e/f/L -> ../../../../../..", // the top itself
		"a/b/c/d/e/f/file",
		"up -> a/b/c/d/e/f/L/a/b/c/d/e/f/file", // through L, only down
		"sib -> ./a/b/../b/c",                  // refused below: ".." after a name
	)
	if _, err := files.ExtractTar(u, dir, bytes.NewReader(tarOf(t, ok...))); err == nil || !strings.Contains(err.Error(), `sib`) {
		t.Fatalf(`"sib" accepted: %v`, err)
	}
	ok = ok[:len(ok)-1]
	ok = append(ok, "lib -> a/b", "a/b/c/bin -> ../../../lib/c", "dangling -> nothing/here", "self -> self")
	if _, err := files.ExtractTar(u, dir, bytes.NewReader(tarOf(t, ok...))); err != nil {
		t.Fatalf("ExtractTar: %v", err)
	}
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(root)
	for _, l := range []string{"a/b/c/d/e/f/L", "up", "lib", "a/b/c/bin", "dangling", "self"} {
		fd, err := unix.Openat2(root, l, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH})
		if err == nil {
			unix.Close(fd)
		}
		if errors.Is(err, unix.EXDEV) {
			t.Errorf("%s resolves out of the directory", l)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "up")); err != nil || string(b) != "data" {
		t.Errorf("up: %q %v", b, err)
	}
}
