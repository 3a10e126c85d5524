package httpapi_test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/envd-dev/envd/internal/auth"
	"github.com/envd-dev/envd/internal/testutil"
)

// tree makes dir's test tree: files with their modes, an empty directory,
// a link inside the tree.
func tree(t *testing.T, dir string) {
	t.Helper()
	testutil.WriteFile(t, filepath.Join(dir, "a.txt"), "alpha\n", 0o644)
	testutil.WriteFile(t, filepath.Join(dir, "sub", "run.sh"), "#!/bin/sh\necho hi\n", 0o755)
	testutil.WriteFile(t, filepath.Join(dir, "sub", "private"), "mine", 0o600)
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub/run.sh", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
}

type tarEntry struct {
	typ     byte
	mode    int64
	content string
	link    string
}

func readTar(t *testing.T, b []byte) map[string]tarEntry {
	t.Helper()
	out := map[string]tarEntry{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("read tar: %v", err)
		}
		c, _ := io.ReadAll(tr)
		out[h.Name] = tarEntry{h.Typeflag, h.Mode, string(c), h.Linkname}
	}
}

// A directory down as tar and zip, and the tar back up elsewhere: the same
// tree, modes and link included, owned by the user who uploaded it.
func TestDirectoryArchives(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	src := filepath.Join(testutil.WorkDir(t), "src")
	tree(t, src)
	r := e.do(t, "GET", "/files", q("path", src), hdr("Accept", "application/x-tar"), nil)
	if r.status != 200 || r.header.Get("Content-Type") != "application/x-tar" || !strings.Contains(r.header.Get("Content-Disposition"), "src.tar") {
		t.Fatalf("tar download: %d %v %.200s", r.status, r.header, r.body)
	}
	got := readTar(t, []byte(r.body))
	want := map[string]tarEntry{
		"a.txt":       {tar.TypeReg, 0o644, "alpha\n", ""},
		"sub/":        {tar.TypeDir, 0o755, "", ""},
		"sub/run.sh":  {tar.TypeReg, 0o755, "#!/bin/sh\necho hi\n", ""},
		"sub/private": {tar.TypeReg, 0o600, "mine", ""},
		"empty/":      {tar.TypeDir, 0o750, "", ""},
		"link":        {tar.TypeSymlink, 0o777, "", "sub/run.sh"},
	}
	if len(got) != len(want) {
		t.Errorf("tar entries %v", got)
	}
	for name, w := range want {
		if g := got[name]; g != w {
			t.Errorf("tar %s = %+v, want %+v", name, g, w)
		}
	}

	z := e.do(t, "GET", "/files", q("path", src), hdr("Accept", "application/zip"), nil)
	zr, err := zip.NewReader(strings.NewReader(z.body), int64(len(z.body)))
	if z.status != 200 || err != nil {
		t.Fatalf("zip download: %d %v", z.status, err)
	}
	zipped := map[string]string{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		c, _ := io.ReadAll(rc)
		rc.Close()
		zipped[f.Name] = f.Mode().String() + " " + string(c)
	}
	if zipped["sub/run.sh"] != "-rwxr-xr-x #!/bin/sh\necho hi\n" || zipped["link"] != "Lrwxrwxrwx sub/run.sh" || !strings.HasPrefix(zipped["empty/"], "d") {
		t.Errorf("zip entries %q", zipped)
	}

	dst := filepath.Join(testutil.WorkDir(t), "copy", "of", "src")
	up := e.do(t, "POST", "/files", q("path", dst, "username", "user"), hdr("Content-Type", "application/x-tar"), strings.NewReader(r.body))
	if up.status != 200 || !strings.Contains(up.body, `"type":"directory"`) {
		t.Fatalf("tar upload: %d %s", up.status, up.body)
	}
	back := e.do(t, "GET", "/files", q("path", dst), hdr("Accept", "application/x-tar"), nil)
	if again := readTar(t, []byte(back.body)); len(again) != len(got) {
		t.Errorf("round trip: %v", again)
	} else {
		for name, w := range got {
			if g := again[name]; g != w {
				t.Errorf("round trip %s = %+v, want %+v", name, g, w)
			}
		}
	}
	uid := lookupUID(t, "user")
	for _, rel := range []string{"a.txt", "sub", "sub/run.sh", "link"} {
		fi, err := os.Lstat(filepath.Join(dst, rel))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t).Uid; st != uid {
			t.Errorf("%s owned by uid %d, want user's %d", rel, st, uid)
		}
	}
	noStaging(t, dst)

	// Unpacking again merges: files replaced, others kept.
	testutil.WriteFile(t, filepath.Join(dst, "extra"), "kept", 0o644)
	testutil.WriteFile(t, filepath.Join(dst, "a.txt"), "changed", 0o644)
	up = e.do(t, "POST", "/files", q("path", dst, "username", "user"), hdr("Content-Type", "application/x-tar"), strings.NewReader(r.body))
	if up.status != 200 || read(t, filepath.Join(dst, "a.txt")) != "alpha\n" || read(t, filepath.Join(dst, "extra")) != "kept" {
		t.Errorf("merge: %d %s", up.status, up.body)
	}

	wantError(t, e.do(t, "GET", "/files", q("path", filepath.Join(src, "a.txt")), hdr("Accept", "application/x-tar"), nil), 400, "not a directory")
}

// Archives that would write outside their directory, or that are broken:
// 400, and the target as it was, without a staging directory.
func TestBadTarUploads(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	dst := testutil.WorkDir(t)
	testutil.WriteFile(t, filepath.Join(dst, "keep"), "old", 0o666)
	mk := func(entries ...*tar.Header) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, h := range entries {
			if h.Typeflag == tar.TypeReg {
				h.Size = int64(len("data"))
			}
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				io.WriteString(tw, "data")
			}
		}
		tw.Close()
		return b.Bytes()
	}
	file := func(name string) *tar.Header { return &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644} }
	good := mk(file("ok.txt"), file("keep"))
	for _, tc := range []struct {
		name string
		body []byte
		subs []string
	}{
		{"climbs out", mk(file("ok.txt"), file("../evil")), []string{"climbs out"}},
		{"climbs out after a dir", mk(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, file("d/../../evil")), []string{"climbs out"}},
		{"absolute", mk(file("/tmp/evil")), []string{"absolute"}},
		{"absolute link", mk(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}), []string{"absolute targets"}},
		{"link out", mk(&tar.Header{Name: "d/l", Typeflag: tar.TypeSymlink, Linkname: "../../x"}), []string{"not a directory of the archive"}},
		{"link out at the top", mk(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../x"}), []string{"points out"}},
		{"through a link", mk(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "."}, file("l/x")), []string{"not a directory of the archive"}},
		{"hard link", mk(&tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "keep"}), []string{"not unpacked"}},
		{"twice", mk(file("x"), file("x")), []string{"appears twice"}},
		{"cut", good[:512+2], []string{"bad archive", "ok.txt"}},
		{"not tar", []byte("hello"), []string{"bad archive"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(t, "POST", "/files", q("path", dst, "username", "user"), hdr("Content-Type", "application/x-tar"), bytes.NewReader(tc.body))
			wantError(t, r, 400, tc.subs...)
			entries, _ := os.ReadDir(dst)
			if len(entries) != 1 || read(t, filepath.Join(dst, "keep")) != "old" {
				t.Errorf("the target changed: %v", entries)
			}
			if _, err := os.Lstat("/tmp/evil"); err == nil {
				t.Error("/tmp/evil was written")
			}
		})
	}
}

func noStaging(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".envd-untar-") {
			t.Errorf("staging directory left: %s", e.Name())
		}
	}
}

func lookupUID(t *testing.T, name string) uint32 {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(u.Uid)
	return uint32(n)
}

// An escaping archive: L climbs to the top of the directory (lexically
// inside), and esc climbs through L to /etc (lexically inside too). It is
// refused with a message, and nothing is unpacked or reachable outside.
func TestTarLinkEscape(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	dst := filepath.Join(testutil.WorkDir(t), "up")
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, d := range []string{"a/", "a/b/", "a/b/c/", "a/b/c/d/", "a/b/c/d/e/", "a/b/c/d/e/f/"} {
		tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755})
	}
	tw.WriteHeader(&tar.Header{Name: "a/b/c/d/e/f/L", Typeflag: tar.TypeSymlink, Linkname: "../../../../../.."})
	tw.WriteHeader(&tar.Header{Name: "esc", Typeflag: tar.TypeSymlink, Linkname: "a/b/c/d/e/f/L/../../../../../../../etc"})
	tw.Close()
	r := e.do(t, "POST", "/files", q("path", dst, "username", "user"), hdr("Content-Type", "application/x-tar"), &b)
	wantError(t, r, 400, `link esc -> "a/b/c/d/e/f/L/../../../../../../../etc"`, `".." after a name`)
	if entries, _ := os.ReadDir(dst); len(entries) != 0 {
		t.Errorf("a refused archive left %v", entries)
	}
}

// A URL signed for writing one file does not unpack an archive (403, and
// nothing written); the same URL still writes the file.
func TestSignedWriteIsNotArchive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	dir := testutil.WorkDir(t)
	e.token.Set("secret-token")
	target := dir + "/up.txt"
	signed := q("path", target, "username", "user", "signature", auth.Sign(target, "write", "user", "secret-token", 0))
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: "x", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2})
	tw.Write([]byte("hi"))
	tw.Close()
	r := e.do(t, "POST", "/files", signed, hdr("Content-Type", "application/x-tar"), bytes.NewReader(b.Bytes()))
	wantError(t, r, 403, "a signed URL authorizes writing one file, not unpacking an archive")
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("the refused archive made %s: %v", target, err)
	}
	// With the token, the archive is unpacked.
	if r := e.do(t, "POST", "/files", q("path", dir+"/tree", "username", "user"), hdr("Content-Type", "application/x-tar", "X-Access-Token", "secret-token"), bytes.NewReader(b.Bytes())); r.status != 200 || read(t, dir+"/tree/x") != "hi" {
		t.Fatalf("tar upload with the token: %d %s", r.status, r.body)
	}
	// The plain signed write still works.
	if r := e.do(t, "POST", "/files", signed, hdr("Content-Type", "application/octet-stream"), strings.NewReader("file")); r.status != 200 || read(t, target) != "file" {
		t.Fatalf("signed write: %d %s", r.status, r.body)
	}
}
