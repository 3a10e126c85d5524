package client_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/envd-dev/envd/client"
)

// A directory down as tar and back up elsewhere; a bad archive refused.
func TestDirArchives(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{User: "root"})
	ctx := testContext(t, 30*time.Second)
	src := sandboxDir(t)
	if err := os.MkdirAll(filepath.Join(src, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "sub", "f"), []byte("content"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub/f", filepath.Join(src, "l")); err != nil {
		t.Fatal(err)
	}
	fr, err := c.DownloadDir(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	var archive bytes.Buffer
	if _, err := io.Copy(&archive, fr); err != nil {
		t.Fatal(err)
	}
	fr.Close()
	names := map[string]byte{}
	tr := tar.NewReader(bytes.NewReader(archive.Bytes()))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[h.Name] = h.Typeflag
	}
	if len(names) != 3 || names["sub/"] != tar.TypeDir || names["sub/f"] != tar.TypeReg || names["l"] != tar.TypeSymlink {
		t.Errorf("archive entries %v", names)
	}

	dst := filepath.Join(sandboxDir(t), "copy")
	if err := c.UploadDir(ctx, dst, bytes.NewReader(archive.Bytes())); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "l")); err != nil || string(b) != "content" {
		t.Errorf("through the copied link: %q %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "sub", "f")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("copied file: %v %v", fi, err)
	}

	var bad bytes.Buffer
	tw := tar.NewWriter(&bad)
	tw.WriteHeader(&tar.Header{Name: "../out", Typeflag: tar.TypeReg, Mode: 0o644})
	tw.Close()
	if err := c.UploadDir(ctx, dst, &bad); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("an archive that climbs out: %v", err)
	}
	if _, err := c.DownloadDir(ctx, filepath.Join(src, "sub", "f")); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("a file as a directory: %v", err)
	}
}
