package httpapi_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/testutil"
)

func TestDownload(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	dir := testutil.WorkDir(t)
	testutil.WriteFile(t, dir+"/a.txt", "hello", 0o644)
	priv := testutil.PrivateDir(t)
	testutil.WriteFile(t, priv+"/secret", "s", 0o600)
	testutil.WriteFile(t, dir+"/root-only", "s", 0o600)

	t.Run("identity", func(t *testing.T) {
		r := e.do(t, "GET", "/files", q("path", dir+"/a.txt"), nil, nil)
		if r.status != 200 || r.body != "hello" {
			t.Fatalf("%d %q", r.status, r.body)
		}
		for k, want := range map[string]string{
			"Content-Type": "text/plain; charset=utf-8", "Content-Length": "5", "Accept-Ranges": "bytes",
			"Content-Disposition": "inline; filename=a.txt", "Vary": "Accept-Encoding",
		} {
			if got := r.header.Get(k); got != want {
				t.Errorf("%s: %q, want %q", k, got, want)
			}
		}
		if r.header.Get("Last-Modified") == "" {
			t.Error("no Last-Modified")
		}
	})
	t.Run("range", func(t *testing.T) {
		r := e.do(t, "GET", "/files", q("path", dir+"/a.txt"), hdr("Range", "bytes=1-2", "Accept-Encoding", "gzip"), nil)
		if r.status != 206 || r.body != "el" || r.header.Get("Content-Range") != "bytes 1-2/5" || r.header.Get("Content-Encoding") != "" {
			t.Fatalf("%d %q %v", r.status, r.body, r.header)
		}
	})
	t.Run("gzip as the SDK asks", func(t *testing.T) {
		r := e.do(t, "GET", "/files", q("path", dir+"/a.txt"), hdr("Accept-Encoding", "gzip, deflate"), nil)
		if r.status != 200 || r.header.Get("Content-Encoding") != "gzip" || r.header.Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Fatalf("%d %v", r.status, r.header)
		}
		zr, err := gzip.NewReader(strings.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := io.ReadAll(zr); string(b) != "hello" {
			t.Errorf("inflated %q", b)
		}
	})
	t.Run("identity preferred", func(t *testing.T) {
		r := e.do(t, "GET", "/files", q("path", dir+"/a.txt"), hdr("Accept-Encoding", "gzip;q=0.5, identity"), nil)
		if r.body != "hello" || r.header.Get("Content-Encoding") != "" {
			t.Fatalf("%q %v", r.body, r.header)
		}
	})
	t.Run("nothing acceptable", func(t *testing.T) {
		r := e.do(t, "GET", "/files", q("path", dir+"/a.txt"), hdr("Accept-Encoding", "identity;q=0, br"), nil)
		wantError(t, r, 406, "error parsing Accept-Encoding: no acceptable encoding found, supported: [gzip]")
	})
	t.Run("head", func(t *testing.T) {
		r := e.do(t, "HEAD", "/files", q("path", dir+"/a.txt"), nil, nil)
		if r.status != 200 || r.body != "" || r.header.Get("Content-Length") != "5" {
			t.Fatalf("%d %q %v", r.status, r.body, r.header)
		}
	})
	t.Run("relative to the home", func(t *testing.T) {
		usr := testutil.User(t, "user")
		name := fmt.Sprintf("dl-rel-%d", os.Getpid())
		testutil.WriteFile(t, filepath.Join(usr.Home, name), "home", 0o644)
		t.Cleanup(func() { os.Remove(filepath.Join(usr.Home, name)) })
		if r := e.do(t, "GET", "/files", q("path", name), nil, nil); r.body != "home" {
			t.Fatalf("%d %q", r.status, r.body)
		}
	})

	errs := []struct {
		name   string
		query  []string
		status int
		msg    string
	}{
		{"missing", []string{"path", dir + "/missing.txt"}, 404, "path '" + dir + "/missing.txt' does not exist"},
		{"directory", []string{"path", dir}, 400, "path '" + dir + "' is a directory"},
		{"unknown user", []string{"path", dir + "/a.txt", "username", "nosuchuser"}, 401, "error looking up user 'nosuchuser': user: unknown user nosuchuser"},
		{"other user's home", []string{"path", "~root/x"}, 400, "~root"},
		{"fifo", []string{"path", dir + "/fifo", "username", "root"}, 400, "is not a regular file"},
	}
	unix.Mkfifo(dir+"/fifo", 0o644)
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, e.do(t, "GET", "/files", q(tt.query...), nil, nil), tt.status, tt.msg)
		})
	}
	if r := e.do(t, "GET", "/files", q("path", dir+"/root-only", "username", "root"), nil, nil); r.body != "s" {
		t.Errorf("root cannot read its file: %d %q", r.status, r.body)
	}

	// What a user may not read in a shell: the default mode reads it, as
	// upstream; the strict mode refuses it.
	strict := newEnv(t, envOpts{strict: true})
	reads := []struct {
		name  string
		query []string
		msg   string
	}{
		{"user reads root's 0600 file", []string{"path", dir + "/root-only", "username", "user"}, "permission denied: user 'user' may not read " + dir + "/root-only"},
		{"default user reads root's 0600 file", []string{"path", dir + "/root-only"}, "user 'user'"},
		{"dot dot into a private dir", []string{"path", dir + "/../" + filepath.Base(filepath.Dir(priv)) + "/private/secret"}, "user 'user'"},
	}
	for _, tt := range reads {
		t.Run("default mode: "+tt.name, func(t *testing.T) {
			if r := e.do(t, "GET", "/files", q(tt.query...), nil, nil); r.status != 200 || r.body != "s" {
				t.Errorf("%d %q, want 200 and the content", r.status, r.body)
			}
		})
		t.Run("strict mode: "+tt.name, func(t *testing.T) {
			wantError(t, strict.do(t, "GET", "/files", q(tt.query...), nil, nil), 403, tt.msg)
		})
	}
}

func TestDownloadNames(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	dir := testutil.WorkDir(t)
	for _, name := range []string{"with space.txt", "ünïcödé 文件.txt", "new\nline", `quote"d`, "semi;colon"} {
		t.Run(name, func(t *testing.T) {
			testutil.WriteFile(t, filepath.Join(dir, name), name, 0o644)
			r := e.do(t, "GET", "/files", q("path", filepath.Join(dir, name)), nil, nil)
			if r.status != 200 || r.body != name {
				t.Fatalf("%d %q", r.status, r.body)
			}
			_, params, err := mime.ParseMediaType(r.header.Get("Content-Disposition"))
			if err != nil || params["filename"] != name {
				t.Errorf("Content-Disposition %q gives %q (%v)", r.header.Get("Content-Disposition"), params["filename"], err)
			}
		})
	}
}

type writtenJSON struct {
	Name     string            `json:"name"`
	Path     string            `json:"path"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata"`
}

func decodeWritten(t *testing.T, r response) []writtenJSON {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var out []writtenJSON
	if err := json.Unmarshal([]byte(r.body), &out); err != nil {
		t.Fatalf("%q: %v", r.body, err)
	}
	return out
}

func TestUploadMultipart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	usr := testutil.User(t, "user")
	dir := testutil.WorkDir(t)

	ct, body := multipartBody(t, part{"file", dir + "/ignored-name", "hello"})
	out := decodeWritten(t, e.do(t, "POST", "/files", q("path", dir+"/a.txt"), hdr("Content-Type", ct), body))
	if len(out) != 1 || fmt.Sprint(out[0]) != fmt.Sprint(writtenJSON{Name: "a.txt", Path: dir + "/a.txt", Type: "file"}) || read(t, dir+"/a.txt") != "hello" {
		t.Fatalf("%+v", out)
	}
	if testutil.Owner(t, dir+"/a.txt") != usr.UID {
		t.Error("the default user's upload is not theirs")
	}
	fi, _ := os.Stat(dir + "/a.txt")
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}

	// Several files, named by their filenames (paths, parents created),
	// other form fields ignored.
	ct, body = multipartBody(t,
		part{"file", dir + "/m1.txt", "one"},
		part{"other", "", "ignored"},
		part{"file", dir + "/sub/deeper/m2.txt", "two"},
		part{"file", "rel-" + filepath.Base(dir) + ".txt", "three"},
	)
	out = decodeWritten(t, e.do(t, "POST", "/files", nil, hdr("Content-Type", ct), body))
	relPath := filepath.Join(usr.Home, "rel-"+filepath.Base(dir)+".txt")
	t.Cleanup(func() { os.Remove(relPath) })
	want := []writtenJSON{
		{Name: "m1.txt", Path: dir + "/m1.txt", Type: "file"},
		{Name: "m2.txt", Path: dir + "/sub/deeper/m2.txt", Type: "file"},
		{Name: filepath.Base(relPath), Path: relPath, Type: "file"},
	}
	if fmt.Sprint(out) != fmt.Sprint(want) {
		t.Fatalf("got %+v\nwant %+v", out, want)
	}
	if read(t, dir+"/sub/deeper/m2.txt") != "two" || read(t, relPath) != "three" {
		t.Error("content")
	}
	for _, p := range []string{dir + "/sub", dir + "/sub/deeper"} {
		if fi, _ := os.Stat(p); testutil.Owner(t, p) != usr.UID || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: owner %d mode %v", p, testutil.Owner(t, p), fi.Mode().Perm())
		}
	}

	// As root, by username.
	ct, body = multipartBody(t, part{"file", dir + "/r.txt", "r"})
	decodeWritten(t, e.do(t, "POST", "/files", q("username", "root"), hdr("Content-Type", ct), body))
	if testutil.Owner(t, dir+"/r.txt") != 0 {
		t.Error("root's upload is not root's")
	}

	// Overwriting keeps the file's mode.
	testutil.WriteFile(t, dir+"/script.sh", "old", 0o755)
	ct, body = multipartBody(t, part{"file", dir + "/script.sh", "new"})
	decodeWritten(t, e.do(t, "POST", "/files", q("username", "root"), hdr("Content-Type", ct), body))
	if fi, _ := os.Stat(dir + "/script.sh"); fi.Mode().Perm() != 0o755 || read(t, dir+"/script.sh") != "new" {
		t.Errorf("overwritten: mode %v", fi.Mode().Perm())
	}
	noTemp(t, dir)
}

// chunked hides the length, so the body is sent chunked, as Node does.
type chunked struct{ io.Reader }

func TestUploadRawChunkedGzip(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	dir := testutil.WorkDir(t)
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	out := decodeWritten(t, e.do(t, "POST", "/files", q("path", dir+"/o.txt"), hdr("Content-Type", "application/octet-stream"), chunked{strings.NewReader(big)}))
	if out[0].Path != dir+"/o.txt" || read(t, dir+"/o.txt") != big {
		t.Fatalf("%+v", out)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	io.WriteString(zw, "gz content")
	zw.Close()
	decodeWritten(t, e.do(t, "POST", "/files", q("path", dir+"/g.txt"), hdr("Content-Type", "application/octet-stream", "Content-Encoding", "gzip"), chunked{&gz}))
	if read(t, dir+"/g.txt") != "gz content" {
		t.Error("gzip body")
	}
	// A gzipped multipart body.
	ct, body := multipartBody(t, part{"file", dir + "/gm.txt", "gzipped multipart"})
	gz.Reset()
	zw = gzip.NewWriter(&gz)
	io.Copy(zw, body)
	zw.Close()
	decodeWritten(t, e.do(t, "POST", "/files", nil, hdr("Content-Type", ct, "Content-Encoding", "gzip"), &gz))
	if read(t, dir+"/gm.txt") != "gzipped multipart" {
		t.Error("gzip multipart")
	}
	// An empty file.
	decodeWritten(t, e.do(t, "POST", "/files", q("path", dir+"/empty"), hdr("Content-Type", "application/octet-stream"), nil))
	if fi, err := os.Stat(dir + "/empty"); err != nil || fi.Size() != 0 {
		t.Errorf("empty: %v", err)
	}
	// Names with spaces, unicode and newlines.
	for _, name := range []string{"with space.txt", "ünïcödé 文件.txt", "new\nline"} {
		out := decodeWritten(t, e.do(t, "POST", "/files", q("path", filepath.Join(dir, name)), hdr("Content-Type", "application/octet-stream"), strings.NewReader(name)))
		if out[0].Name != name || read(t, filepath.Join(dir, name)) != name {
			t.Errorf("%q: %+v", name, out)
		}
	}
	noTemp(t, dir)
}

func TestUploadMetadata(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	dir := testutil.WorkDir(t)
	out := decodeWritten(t, e.do(t, "POST", "/files", q("path", dir+"/meta.txt"),
		hdr("Content-Type", "application/octet-stream", "X-Metadata-Foo", "bar", "X-Metadata-Other-Key", "v 2"), strings.NewReader("m")))
	if out[0].Metadata["foo"] != "bar" || out[0].Metadata["other-key"] != "v 2" {
		t.Fatalf("%+v", out)
	}
	buf := make([]byte, 64)
	n, err := unix.Getxattr(dir+"/meta.txt", "user.e2b.foo", buf)
	if err != nil || string(buf[:n]) != "bar" {
		t.Fatalf("xattr: %q %v", buf[:n], err)
	}
	// A new upload without metadata clears it.
	decodeWritten(t, e.do(t, "POST", "/files", q("path", dir+"/meta.txt"), hdr("Content-Type", "application/octet-stream"), strings.NewReader("m2")))
	if _, err := unix.Getxattr(dir+"/meta.txt", "user.e2b.foo", buf); err == nil {
		t.Error("metadata kept after an upload without it")
	}
	for _, tt := range []struct {
		name string
		h    []string
		msg  string
	}{
		{"non-ascii value", []string{"X-Metadata-K", "vä"}, "printable ASCII"},
		{"too long key", []string{"X-Metadata-" + strings.Repeat("k", 300), "v"}, "longer than"},
		{"too big", []string{"X-Metadata-A", strings.Repeat("v", 4000), "X-Metadata-B", strings.Repeat("v", 200)}, "bytes in all"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := hdr(append([]string{"Content-Type", "application/octet-stream"}, tt.h...)...)
			wantError(t, e.do(t, "POST", "/files", q("path", dir+"/bad-meta"), h, strings.NewReader("x")), 400, "invalid metadata", tt.msg)
			if _, err := os.Stat(dir + "/bad-meta"); err == nil {
				t.Error("written despite bad metadata")
			}
		})
	}
}

func TestUploadErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	dir := testutil.WorkDir(t)
	priv := testutil.PrivateDir(t)
	testutil.WriteFile(t, dir+"/roots.txt", "root's", 0o644)
	testutil.WriteFile(t, dir+"/a.txt", "old", 0o644)
	os.Chmod(dir+"/a.txt", 0o666)
	octet := hdr("Content-Type", "application/octet-stream")
	ct1, dup := multipartBody(t, part{"file", "x", "first"}, part{"file", "y", "second"})
	ct2, none := multipartBody(t, part{"other", "", "x"})
	ct3, noName := multipartBody(t, part{"file", "", "x"})
	tests := []struct {
		name   string
		query  []string
		header http.Header
		body   io.Reader
		status int
		msg    string
	}{
		{"bad content type", []string{"path", dir + "/x"}, hdr("Content-Type", "text/plain"), strings.NewReader("x"), 400,
			"unsupported content type: text/plain, expected multipart/form-data or application/octet-stream"},
		{"no content type", []string{"path", dir + "/x"}, nil, strings.NewReader("x"), 400, "unsupported content type"},
		{"raw without path", nil, octet, strings.NewReader("x"), 400, "path query parameter is required for raw body upload"},
		{"onto a directory", []string{"path", dir}, octet, strings.NewReader("x"), 400, "path is a directory: " + dir},
		{"below a file", []string{"path", dir + "/a.txt/x"}, octet, strings.NewReader("x"), 400, dir + "/a.txt is a file"},
		{"bad encoding", []string{"path", dir + "/x"}, hdr("Content-Type", "application/octet-stream", "Content-Encoding", "br"), strings.NewReader("x"), 400,
			"error decompressing request body: unsupported Content-Encoding"},
		{"not gzip", []string{"path", dir + "/x"}, hdr("Content-Type", "application/octet-stream", "Content-Encoding", "gzip"), strings.NewReader("plain"), 400,
			"error decompressing request body"},
		{"same path twice", []string{"path", dir + "/dup.txt"}, hdr("Content-Type", ct1), dup, 400,
			"you cannot upload multiple files to the same path '" + dir + "/dup.txt' in one upload request"},
		{"no file part", []string{"path", dir + "/x"}, hdr("Content-Type", ct2), none, 400, `no file in the multipart body`},
		{"part without a name", nil, hdr("Content-Type", ct3), noName, 400, "part 1 has no filename"},
		{"no boundary", []string{"path", dir + "/x"}, hdr("Content-Type", "multipart/form-data"), strings.NewReader("x"), 400, "no boundary"},
		{"unknown user", []string{"path", dir + "/x", "username", "nosuchuser"}, octet, strings.NewReader("x"), 401, "error looking up user 'nosuchuser'"},
		{"other user's home", []string{"path", "~root/x"}, octet, strings.NewReader("x"), 400, "~root"},
		// Root never overwrites a file for a user (a difference from upstream).
		{"user over root's file", []string{"path", dir + "/roots.txt"}, octet, strings.NewReader("x"), 403, "user 'user' may not write " + dir + "/roots.txt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, e.do(t, "POST", "/files", q(tt.query...), tt.header, tt.body), tt.status, tt.msg)
		})
	}
	if read(t, dir+"/roots.txt") != "root's" || read(t, dir+"/dup.txt") != "first" {
		t.Error("a refused upload changed a file")
	}
	for _, p := range []string{dir + "/x"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was written", p)
		}
	}
	noTemp(t, dir)
	// Strict mode: only what a shell as user may write.
	strict := newEnv(t, envOpts{strict: true})
	never := fmt.Sprintf("/root/envd-test-never-%d", os.Getpid())
	for _, tt := range []struct{ name, path, msg string }{
		{"user into root's private dir", priv + "/x", "permission denied: user 'user' may not write " + priv + "/x"},
		{"user over root's file", dir + "/roots.txt", "user 'user' may not write " + dir + "/roots.txt"},
		{"user into /root", never, "user 'user'"},
		{"user makes a dir in /root", never + "/sub/f", "user 'user'"},
	} {
		t.Run("strict mode: "+tt.name, func(t *testing.T) {
			wantError(t, strict.do(t, "POST", "/files", q("path", tt.path), octet, strings.NewReader("x")), 403, tt.msg)
		})
	}
	for _, p := range []string{priv + "/x", never} {
		if _, err := os.Lstat(p); err == nil {
			os.RemoveAll(p)
			t.Errorf("%s was written", p)
		}
	}
	if read(t, dir+"/roots.txt") != "root's" {
		t.Error("a refused upload changed a file")
	}
	// The daemon still serves.
	decodeWritten(t, e.do(t, "POST", "/files", q("path", dir+"/after"), octet, strings.NewReader("ok")))
}

// Broken bodies leave the target as it was and no temporary file.
func TestUploadIsAtomic(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	dir := testutil.WorkDir(t)
	target := dir + "/keep.txt"
	testutil.WriteFile(t, target, "old content", 0o666)

	ct, body := multipartBody(t, part{"file", target, strings.Repeat("new", 100000)})
	truncated := body.Bytes()[:body.Len()/2]
	wantError(t, e.do(t, "POST", "/files", nil, hdr("Content-Type", ct), bytes.NewReader(truncated)), 400, "ended early", "nothing was written")
	wantError(t, e.do(t, "POST", "/files", nil, hdr("Content-Type", ct), strings.NewReader("garbage without boundaries")), 400, "malformed multipart body")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	io.WriteString(zw, strings.Repeat("z", 1<<20))
	zw.Close()
	wantError(t, e.do(t, "POST", "/files", q("path", target), hdr("Content-Type", "application/octet-stream", "Content-Encoding", "gzip"),
		bytes.NewReader(gz.Bytes()[:gz.Len()-10])), 400, "ended early")
	if read(t, target) != "old content" {
		t.Fatal("a broken upload changed the target")
	}
	noTemp(t, dir)

	// A client that hangs up mid-body.
	for _, mode := range []string{"content-length", "chunked"} {
		t.Run("disconnect "+mode, func(t *testing.T) {
			// The temporary file's creation and removal are the signals.
			fw, err := fsnotify.NewWatcher()
			if err != nil {
				t.Fatal(err)
			}
			defer fw.Close()
			if err := fw.Add(dir); err != nil {
				t.Fatal(err)
			}
			tempEvent := func(op fsnotify.Op) {
				t.Helper()
				timeout := time.After(waitShort)
				for {
					select {
					case ev := <-fw.Events:
						if ev.Has(op) && strings.HasPrefix(filepath.Base(ev.Name), ".envd-upload-") {
							return
						}
					case err := <-fw.Errors:
						t.Fatal(err)
					case <-timeout:
						t.Fatalf("no %v of a temporary file in %v", op, waitShort)
					}
				}
			}
			conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			req := "POST /files?path=" + target + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
			if mode == "chunked" {
				req += "Transfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n", 1<<20) + strings.Repeat("n", 300000)
			} else {
				req += "Content-Length: 1048576\r\n\r\n" + strings.Repeat("n", 300000)
			}
			if _, err := io.WriteString(conn, req); err != nil {
				t.Fatal(err)
			}
			// Once the temporary file exists, hang up; it goes.
			tempEvent(fsnotify.Create)
			conn.Close()
			tempEvent(fsnotify.Remove)
			noTemp(t, dir)
			if read(t, target) != "old content" {
				t.Fatal("the target changed")
			}
		})
	}
}

// A full disk: 507, the old file intact, no temporary file.
func TestUploadDiskFull(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	dir := testutil.WorkDir(t)
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m,mode=0777"); err != nil {
		t.Skipf("cannot mount a small tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	testutil.WriteFile(t, dir+"/f", "old", 0o666)
	r := e.do(t, "POST", "/files", q("path", dir+"/f"), hdr("Content-Type", "application/octet-stream"), bytes.NewReader(make([]byte, 2<<20)))
	wantError(t, r, 507, "not enough disk space available")
	if read(t, dir+"/f") != "old" {
		t.Error("the target changed")
	}
	noTemp(t, dir)
	decodeWritten(t, e.do(t, "POST", "/files", q("path", dir+"/small"), hdr("Content-Type", "application/octet-stream"), strings.NewReader("fits")))
}
