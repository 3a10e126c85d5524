package httpapi_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/testutil"
)

func composeBody(t *testing.T, v any) *bytes.Reader {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(b)
}

type composeReq struct {
	SourcePaths []string `json:"source_paths"`
	Destination string   `json:"destination"`
	Username    string   `json:"username,omitempty"`
}

// POST /files/compose: the parts in order, the sources gone, the entry of
// the destination, owned by the user as an upload is.
func TestCompose(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	dir := testutil.WorkDir(t)
	var srcs []string
	var want strings.Builder
	for i, part := range []string{"first part\n", "", strings.Repeat("x", 3<<20), "last\n"} {
		p := filepath.Join(dir, "part"+string(rune('0'+i)))
		testutil.WriteFile(t, p, part, 0o644)
		srcs = append(srcs, p)
		want.WriteString(part)
	}
	dst := filepath.Join(dir, "whole")
	r := e.do(t, "POST", "/files/compose", nil, hdr("Content-Type", "application/json"), composeBody(t, composeReq{srcs, dst, "user"}))
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var entry map[string]any
	if err := json.Unmarshal([]byte(r.body), &entry); err != nil {
		t.Fatal(err)
	}
	// The filesystem service's EntryInfo in protojson (an int64 is a string).
	if entry["name"] != "whole" || entry["path"] != dst || entry["type"] != "FILE_TYPE_FILE" || entry["owner"] != "user" ||
		entry["size"] != strconv.Itoa(want.Len()) {
		t.Errorf("entry %s", r.body)
	}
	if got := read(t, dst); got != want.String() {
		t.Errorf("destination holds %d bytes, want %d", len(got), want.Len())
	}
	for _, s := range srcs {
		if _, err := os.Lstat(s); !os.IsNotExist(err) {
			t.Errorf("source %s left: %v", s, err)
		}
	}
	noTemp(t, dir)
}

// Bad input: nothing composed, every source kept, the destination as it was.
func TestComposeErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	dir := testutil.WorkDir(t)
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	testutil.WriteFile(t, a, "A", 0o644)
	testutil.WriteFile(t, b, "B", 0o644)
	dst := filepath.Join(dir, "dst")
	testutil.WriteFile(t, dst, "old", 0o666)
	secret := filepath.Join(dir, "secret")
	testutil.WriteFile(t, secret, "root only", 0o600)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(a, link); err != nil {
		t.Fatal(err)
	}
	ct := hdr("Content-Type", "application/json")
	for _, tc := range []struct {
		name   string
		body   string
		status int
		subs   []string
	}{
		{"missing source", mustJSON(t, composeReq{[]string{a, dir + "/nope"}, dst, "user"}), 404, []string{dir + "/nope"}},
		{"a link as source", mustJSON(t, composeReq{[]string{a, link}, dst, "user"}), 400, []string{"symbolic link"}},
		{"a directory as source", mustJSON(t, composeReq{[]string{dir}, dst, "user"}), 400, []string{"not a regular file"}},
		{"destination among sources", mustJSON(t, composeReq{[]string{a, dst}, dst, "user"}), 400, []string{"also a source"}},
		{"a source twice", mustJSON(t, composeReq{[]string{a, b, a}, dst, "user"}), 400, []string{"named twice"}},
		{"a source the user may not read", mustJSON(t, composeReq{[]string{a, secret}, dst, "user"}), 403, []string{"user 'user' may not read " + secret}},
		{"no sources", mustJSON(t, composeReq{nil, dst, "user"}), 400, []string{"source_paths is empty"}},
		{"no destination", mustJSON(t, composeReq{[]string{a}, "", "user"}), 400, []string{"destination is empty"}},
		{"unknown user", mustJSON(t, composeReq{[]string{a}, dst, "nobody-here"}), 401, []string{"nobody-here"}},
		{"another user's home", mustJSON(t, composeReq{[]string{"~root/x"}, dst, "user"}), 400, []string{"another user's home"}},
		{"not JSON", "source_paths=a", 400, []string{"JSON object"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(t, "POST", "/files/compose", nil, ct, strings.NewReader(tc.body))
			wantError(t, r, tc.status, tc.subs...)
			if read(t, dst) != "old" || read(t, a) != "A" || read(t, b) != "B" {
				t.Error("something changed")
			}
			noTemp(t, dir)
		})
	}
	e.token.Set("tok")
	wantError(t, e.do(t, "POST", "/files/compose", nil, ct, strings.NewReader(mustJSON(t, composeReq{[]string{a}, dst, "user"}))), 401, "requires an access token")
}

// A full disk: 507, the destination unchanged, the sources kept.
func TestComposeDiskFull(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	small := testutil.WorkDir(t)
	if err := unix.Mount("tmpfs", small, "tmpfs", 0, "size=1m,mode=0777"); err != nil {
		t.Fatalf("mount a small tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(small, unix.MNT_DETACH) })
	dir := testutil.WorkDir(t)
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	testutil.WriteFile(t, a, strings.Repeat("a", 1<<20), 0o644)
	testutil.WriteFile(t, b, strings.Repeat("b", 1<<20), 0o644)
	dst := filepath.Join(small, "dst")
	testutil.WriteFile(t, dst, "old", 0o666)
	r := e.do(t, "POST", "/files/compose", nil, hdr("Content-Type", "application/json"), strings.NewReader(mustJSON(t, composeReq{[]string{a, b}, dst, "user"})))
	wantError(t, r, 507, "not enough disk space")
	if read(t, dst) != "old" || len(read(t, a)) != 1<<20 || len(read(t, b)) != 1<<20 {
		t.Error("something changed")
	}
	noTemp(t, small)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
