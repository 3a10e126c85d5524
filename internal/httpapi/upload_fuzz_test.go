package httpapi_test

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/auth"
	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/httpapi"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/testutil"
)

// fuzzAPI is the HTTP API's /files handlers, called directly (no
// server, no network), acting for the default user, user.
type fuzzAPI struct {
	defs             *defaults.Defaults
	user             *identity.User
	upload, download http.Handler
}

func newFuzzAPI(f *testing.F) *fuzzAPI {
	if os.Geteuid() != 0 {
		f.Skip("uploads as another user: run as root")
	}
	u, err := identity.Lookup("user")
	if err != nil {
		f.Skip("no account named user:", err)
	}
	log := slog.New(slog.DiscardHandler)
	files := filesystem.New(filesystem.Options{Logger: log})
	f.Cleanup(func() { files.Close() })
	a := &fuzzAPI{defs: defaults.New("user", nil), user: u}
	for _, r := range httpapi.New(httpapi.Options{Logger: log, Files: files, Defaults: a.defs, Token: &auth.Token{}}).Routes() {
		switch r.Pattern {
		case "POST /files":
			a.upload = r.Handler
		case "GET /files":
			a.download = r.Handler
		}
	}
	return a
}

func (a *fuzzAPI) serve(h http.Handler, method string, query url.Values, header http.Header, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "/files?"+query.Encode(), bytes.NewReader(body))
	req.Header = header
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// inside reports whether p is dir or beneath it.
func inside(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// filePart is a "file" part of a multipart body, as receive reads it.
type filePart struct {
	target  string // the path query parameter, else the part's filename
	content []byte
}

// fileParts reads body's "file" parts as receiveParts does (the same
// parser, on the same bytes), up to the first it would refuse.
func fileParts(body []byte, boundary, query string) []filePart {
	mr := multipart.NewReader(bufio.NewReaderSize(bytes.NewReader(body), 1024<<10), boundary)
	var out []filePart
	for {
		part, err := mr.NextRawPart()
		if err != nil {
			return out
		}
		_, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		if err != nil {
			return out
		}
		if params["name"] != "file" {
			continue
		}
		p := filePart{target: query}
		if p.target == "" {
			p.target = params["filename"]
		}
		if p.content, err = io.ReadAll(part); err != nil {
			return append(out, p)
		}
		out = append(out, p)
	}
}

func multipartSeed(boundary string, parts ...[3]string) []byte {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	mw.SetBoundary(boundary)
	for _, p := range parts {
		h := map[string][]string{"Content-Disposition": {p[0]}, "Content-Type": {"application/octet-stream"}}
		w, _ := mw.CreatePart(h)
		io.WriteString(w, p[1]+p[2])
	}
	mw.Close()
	return b.Bytes()
}

func tarUploadSeed(entries ...*tar.Header) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range entries {
		tw.WriteHeader(h)
		if h.Typeflag == tar.TypeReg {
			io.WriteString(tw, strings.Repeat("x", int(h.Size)))
		}
	}
	tw.Close()
	return b.Bytes()
}

// FuzzUpload: POST /files with any body, Content-Type (multipart with
// any parts, a raw file, a tar), gzip-compressed or not, and any path
// query parameter, as the default user, in a directory of its own. The
// answer is 200 or a 4xx (a 5xx would be envd failing, the request
// being the client's mistake); nothing is written outside the directory
// (the temporary directory holding it is walked), every link an archive
// made there resolves inside it, no temporary file or staging directory
// is left behind; every file a 200 names holds what its part or body
// said; and a tree a tar made comes back down as tar and as zip the
// same.
//
// Names and paths are the client's to choose, and an upload may write
// anywhere its user may: "%D" in the query and in a multipart body stands
// for the directory (relative names are in the user's home), and inputs
// whose paths lead out of the directory are not sent.
func FuzzUpload(f *testing.F) {
	a := newFuzzAPI(f)
	const b = "fuzzboundary"
	ct := "multipart/form-data; boundary=" + b
	for _, s := range []struct {
		ct, query string
		gz        bool
		body      []byte
	}{
		{ct, "", false, multipartSeed(b, [3]string{`form-data; name="file"; filename="%D/a.txt"`, "hello", "\n"})},
		{ct, "", true, multipartSeed(b, [3]string{`form-data; name="file"; filename="%D/sub/dir/b"`, "one", ""}, [3]string{`form-data; name="file"; filename="%D/c"`, "two", ""})},
		{ct, "", false, multipartSeed(b, [3]string{`form-data; name="other"`, "field", ""}, [3]string{`form-data; name="file"; filename="%D/x"`, "", ""})},
		{ct, "", false, multipartSeed(b, [3]string{`form-data; name="file"; filename="%D/same"`, "1", ""}, [3]string{`form-data; name="file"; filename="%D/./same"`, "2", ""})},
		{ct, "%D/fixed", false, multipartSeed(b, [3]string{`form-data; name="file"`, "no filename, the query's", ""})},
		{ct, "", false, multipartSeed(b, [3]string{`form-data; name="file"`, "no filename", ""})},
		{ct, "", false, multipartSeed(b, [3]string{`form-data; name="file"; filename*=UTF-8''%D%2F%C3%A9t%C3%A9`, "rfc 2231", ""})},
		{ct, "", false, multipartSeed(b, [3]string{`form-data; name=file; filename="%D/d/"`, "a directory's name", ""})},
		{ct, "", false, multipartSeed(b, [3]string{`form-data; name="file"; filename="%D/a.txt"`, "cut", ""})[:60]},
		{ct, "", false, []byte("--" + b + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%D/q\"\r\n\r\nno end")},
		{"multipart/form-data", "", false, []byte("no boundary")},
		{"multipart/mixed; boundary=\"a b\"", "", false, []byte("--a b\r\nContent-Disposition: attachment; name=\"file\"; filename=\"%D/../m\"\r\n\r\nmixed\r\n--a b--\r\n")},
		{"application/octet-stream", "%D/raw.bin", false, []byte("raw\x00bytes")},
		{"application/octet-stream", "", false, []byte("no path")},
		{"application/octet-stream; charset=binary", "%D/deep/er/raw", true, bytes.Repeat([]byte("z"), 3000)},
		{"application/x-tar", "%D/tree", false, tarUploadSeed(
			&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755},
			&tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o640, Size: 5},
			&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "d/f", Mode: 0o777},
			&tar.Header{Name: "ro/", Typeflag: tar.TypeDir, Mode: 0o555})},
		{"application/x-tar", "%D", true, tarUploadSeed(&tar.Header{Name: "esc", Typeflag: tar.TypeSymlink, Linkname: "../../etc"})},
		{"application/x-tar", "", false, tarUploadSeed(&tar.Header{Name: "f", Typeflag: tar.TypeReg, Size: 1})},
		{"text/plain", "%D/x", false, []byte("unsupported")},
		{"", "%D/x", false, nil},
		{"application/json; =", "%D/x", false, nil},
		{"application/octet-stream", "%D/\xe5", false, []byte("not UTF-8")},
		{ct, "", false, multipartSeed(b, [3]string{`form-data; name="file"; filename="%D/ok"`, "1", ""}, [3]string{"form-data; name=\"file\"; filename=\"%D/\xff\"", "2", ""})},
	} {
		f.Add(s.ct, s.query, s.gz, s.body)
	}
	f.Fuzz(func(t *testing.T, contentType, query string, gz bool, body []byte) {
		dir := filepath.Join(testutil.WorkDir(t), "up")
		a.defs.SetWorkdir(dir) // where a missing path goes
		query = strings.ReplaceAll(query, "%D", dir)
		leadsOut := func(p string) bool {
			r, err := a.user.Resolve(p, dir)
			return err == nil && !inside(r, dir)
		}
		if query != "" && leadsOut(query) {
			return
		}
		mt, params, _ := mime.ParseMediaType(contentType)
		var parts []filePart
		if strings.HasPrefix(mt, "multipart/") {
			body = bytes.ReplaceAll(body, []byte("%D"), []byte(dir))
			parts = fileParts(body, params["boundary"], query)
			if slices.ContainsFunc(parts, func(p filePart) bool { return leadsOut(p.target) }) {
				return
			}
		}

		header := http.Header{"Content-Type": {contentType}}
		sent := body
		if gz {
			var z bytes.Buffer
			zw := gzip.NewWriter(&z)
			zw.Write(body)
			zw.Close()
			sent = z.Bytes()
			header.Set("Content-Encoding", "gzip")
		}
		q := url.Values{}
		if query != "" {
			q.Set("path", query)
		}
		res := a.serve(a.upload, "POST", q, header, sent)
		checkWritten(t, dir)
		if res.Code >= 500 || res.Code < 200 || (res.Code >= 300 && res.Code < 400) {
			t.Fatalf("status %d: %s", res.Code, res.Body)
		}
		if res.Code != http.StatusOK {
			return
		}
		if !utf8.ValidString(query) || slices.ContainsFunc(parts, func(p filePart) bool { return !utf8.ValidString(p.target) }) {
			t.Fatalf("a path that is not UTF-8 was accepted: %s", res.Body)
		}
		var written []struct{ Name, Path, Type string }
		if err := json.Unmarshal(res.Body.Bytes(), &written); err != nil || len(written) == 0 {
			t.Fatalf("answer %s: %v", res.Body, err)
		}
		for i, w := range written {
			if !inside(w.Path, dir) || w.Name != filepath.Base(w.Path) {
				t.Fatalf("answer %s: %s, out of %s", res.Body, w.Path, dir)
			}
			switch {
			case w.Type == "directory" && mt == "application/x-tar":
				roundTrip(t, a, w.Path, body)
			case w.Type != "file":
				t.Fatalf("answer %s: type %q for a %s upload", res.Body, w.Type, mt)
			case mt == "application/octet-stream":
				wantFile(t, w.Path, body)
			case i < len(parts):
				wantFile(t, w.Path, parts[i].content)
			default:
				t.Fatalf("answer %s: more files than the %d parts", res.Body, len(parts))
			}
		}
	})
}

func wantFile(t *testing.T, p string, content []byte) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("%s: %v, %v: want a file", p, fi, err)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, content) {
		t.Fatalf("%s holds %q, want %q", p, b, content)
	}
}

// checkWritten fails t if anything was written in the test's temporary
// directory but in dir, if a link in dir resolves out of it, or if a
// temporary file or a staging directory is left in dir.
func checkWritten(t *testing.T, dir string) {
	t.Helper()
	top := filepath.Dir(dir)
	root := filepath.Dir(top)
	dfd, _ := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if dfd >= 0 {
		defer unix.Close(dfd)
	}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Errorf("walk %s: %v", p, err)
			return nil
		}
		if p != root && p != top && !inside(p, dir) {
			t.Errorf("%s was written, out of %s", p, dir)
		}
		if filesystem.IsTemp(p) || strings.HasPrefix(d.Name(), ".envd-untar-") {
			t.Errorf("%s left behind", p)
		}
		if d.Type() == fs.ModeSymlink && dfd >= 0 {
			rel, _ := filepath.Rel(dir, p)
			fd, err := unix.Openat2(dfd, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH})
			if err == nil {
				unix.Close(fd)
			}
			if errors.Is(err, unix.EXDEV) {
				target, _ := os.Readlink(p)
				t.Errorf("link %s -> %s resolves out of %s", rel, target, dir)
			}
		}
		return nil
	})
}

// roundTrip downloads the directory p, which the tar upload made, as tar
// and as zip: each lists what the upload's archive did, the same.
func roundTrip(t *testing.T, a *fuzzAPI, p string, upload []byte) {
	t.Helper()
	want := map[string]tarEntry{}
	tr := tar.NewReader(bytes.NewReader(upload))
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		name := filepath.Clean(h.Name)
		if name == "." {
			continue
		}
		c, _ := io.ReadAll(tr)
		e := tarEntry{h.Typeflag, h.Mode & 0o777, string(c), h.Linkname}
		switch h.Typeflag {
		case tar.TypeDir:
			name += "/"
		case tar.TypeSymlink:
			e.mode = 0o777 // a link's own mode is not kept
		}
		want[name] = e
	}
	q := url.Values{"path": {p}}
	res := a.serve(a.download, "GET", q, http.Header{"Accept": {"application/x-tar"}}, nil)
	if res.Code != http.StatusOK {
		t.Fatalf("tar download of %s: %d %s", p, res.Code, res.Body)
	}
	got := readTar(t, res.Body.Bytes())
	if len(got) != len(want) {
		t.Fatalf("tar download: %d entries, uploaded %d:\n%v\n%v", len(got), len(want), got, want)
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			t.Fatalf("tar download: %s = %+v, uploaded %+v", name, g, w)
		}
	}
	res = a.serve(a.download, "GET", q, http.Header{"Accept": {"application/zip"}}, nil)
	zr, err := zip.NewReader(bytes.NewReader(res.Body.Bytes()), int64(res.Body.Len()))
	if res.Code != http.StatusOK || err != nil {
		t.Fatalf("zip download of %s: %d %v", p, res.Code, err)
	}
	if len(zr.File) != len(want) {
		t.Fatalf("zip download: %d entries, uploaded %d", len(zr.File), len(want))
	}
	for _, zf := range zr.File {
		w, ok := want[zf.Name]
		rc, err := zf.Open()
		if err != nil {
			t.Fatalf("zip %s: %v", zf.Name, err)
		}
		c, _ := io.ReadAll(rc)
		rc.Close()
		if w.typ == tar.TypeSymlink {
			w.content = w.link
		}
		if !ok || string(c) != w.content || zf.Mode().Perm() != fs.FileMode(w.mode) {
			t.Fatalf("zip %s: %v %q, uploaded %+v", zf.Name, zf.Mode(), c, w)
		}
	}
}
