package httpapi_test

import (
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// Files whose size stat does not tell (procfs says 0 bytes) are sent whole,
// as reading them goes, with and without gzip: no Content-Length, no
// ranges. The content is /proc/<pid>/environ of a child whose environment
// the test chose: larger than a read, and fixed.
func TestDownloadUnsized(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	var env []string
	for i := range 4 {
		env = append(env, "BIG"+strconv.Itoa(i)+"="+strings.Repeat(strconv.Itoa(i), 100<<10))
	}
	cmd := exec.Command("sleep", "1000")
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	p := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/environ"
	want := strings.Join(env, "\x00") + "\x00"
	if fi, err := os.Stat(p); err != nil || fi.Size() != 0 {
		t.Fatalf("stat %s: %v, %v: want size 0", p, fi, err)
	}
	query := q("path", p, "username", "root")

	unsized := func(t *testing.T, r response, encoding string) {
		t.Helper()
		if r.status != 200 {
			t.Fatalf("%d %.200q", r.status, r.body)
		}
		// Sniffed, as for any file without an extension. (A short gzip body
		// may get a Content-Length from net/http: the one it has.)
		want := map[string]string{"Accept-Ranges": "", "Content-Encoding": encoding, "Content-Type": "text/plain; charset=utf-8"}
		if encoding == "" {
			want["Content-Length"] = ""
		}
		for k, v := range want {
			if got := r.header.Get(k); got != v {
				t.Errorf("%s: %q, want %q", k, got, v)
			}
		}
	}
	t.Run("identity", func(t *testing.T) {
		r := e.do(t, "GET", "/files", query, nil, nil)
		unsized(t, r, "")
		if r.body != want {
			t.Errorf("%d bytes, want the %d of the environment", len(r.body), len(want))
		}
	})
	t.Run("gzip", func(t *testing.T) {
		r := e.do(t, "GET", "/files", query, hdr("Accept-Encoding", "gzip"), nil)
		unsized(t, r, "gzip")
		zr, err := gzip.NewReader(strings.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		if b, err := io.ReadAll(zr); err != nil || string(b) != want {
			t.Errorf("inflated %d bytes (%v), want the %d of the environment", len(b), err, len(want))
		}
	})
	t.Run("range is ignored", func(t *testing.T) {
		r := e.do(t, "GET", "/files", query, hdr("Range", "bytes=0-9"), nil)
		unsized(t, r, "")
		if r.body != want {
			t.Errorf("%d bytes, want the %d of the environment", len(r.body), len(want))
		}
	})
	t.Run("head", func(t *testing.T) {
		r := e.do(t, "HEAD", "/files", query, nil, nil)
		unsized(t, r, "")
		if r.body != "" {
			t.Errorf("body %.100q", r.body)
		}
	})
	t.Run("short text", func(t *testing.T) {
		r := e.do(t, "GET", "/files", q("path", "/proc/self/status", "username", "root"), nil, nil)
		if r.status != 200 || !strings.HasPrefix(r.body, "Name:") || !strings.Contains(r.body, "\nPid:\t"+strconv.Itoa(os.Getpid())+"\n") {
			t.Fatalf("%d %q", r.status, r.body)
		}
		if ct := r.header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
			t.Errorf("Content-Type %q", ct)
		}
	})
}
