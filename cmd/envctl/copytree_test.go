package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/client"
)

func TestLinkOut(t *testing.T) {
	t.Parallel()
	tests := []struct{ rel, target, want string }{
		{"link", "run.sh", ""},
		{"sub/up", "../secret", ""},
		{"sub/deep/l", "../../sub/./deep", ""},
		{"dangling", "nowhere", ""},
		{"self", ".", ""},
		{"out", "/etc/passwd", "an absolute target"},
		{"escape", "../outside/victim", "climbs out"},
		{"sub/escape", "../../x", "climbs out"},
		{"parent", "..", "climbs out"},
		{"sub/round", "../../src/x", "climbs out"}, // back in only if the tree keeps its name
	}
	for _, tt := range tests {
		if got := linkOut(tt.rel, tt.target); got != tt.want {
			t.Errorf("linkOut(%q, %q) = %q, want %q", tt.rel, tt.target, got, tt.want)
		}
	}
}

func TestCheckLinks(t *testing.T) {
	t.Parallel()
	ok := []treeEntry{{rel: ".", kind: kindDir}, {rel: "a", kind: kindLink, target: "b"}, {rel: "b", kind: kindFile}}
	if err := checkLinks("/src", ok); err != nil {
		t.Errorf("links inside: %v", err)
	}
	one := append(slices.Clone(ok), treeEntry{rel: "out", kind: kindLink, target: "/etc"})
	want := "cp: a symlink in '/src' points out of it, and envd unpacks only relative links that stay inside the directory copied in: '/src/out' -> '/etc' (an absolute target); nothing was copied"
	if err := checkLinks("/src", one); err == nil || err.Error() != want {
		t.Errorf("one link out: %v\nwant %s", err, want)
	}
	many := slices.Clone(ok)
	for i := range maxNamedLinks + 2 {
		many = append(many, treeEntry{rel: fmt.Sprintf("d/l%02d", i), kind: kindLink, target: "../../x"})
	}
	err := checkLinks("/src", many)
	if err == nil || !strings.Contains(err.Error(), "12 symlinks in '/src' point out of it") ||
		!strings.Contains(err.Error(), "'/src/d/l00' -> '../../x' (climbs out), ") || !strings.Contains(err.Error(), "'/src/d/l09' -> '../../x' (climbs out) and 2 more;") {
		t.Errorf("many links out: %v", err)
	}
}

func TestArchiveName(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"a": "a", "a/": "a", "./a/b": "a/b", "a/../b": "b", "./": ".", "a/..": "."} {
		if got, ok := archiveName(in); !ok || got != want {
			t.Errorf("archiveName(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "/etc/passwd", "..", "../x", "a/../../x", "a\x00b"} {
		if got, ok := archiveName(in); ok {
			t.Errorf("archiveName(%q) = %q, accepted", in, got)
		}
	}
}

// TestTarRoundTrip writes a local tree as cp -r sends it and reads it
// back as cp -r reads envd's: names under the tree's name, modes, link
// texts, contents; a fifo is skipped.
func TestTarRoundTrip(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(filepath.Join(src, "sub"), 0o750))
	must(os.WriteFile(filepath.Join(src, "sub", "f"), []byte("hello"), 0o640))
	must(os.Chmod(filepath.Join(src, "sub", "f"), 0o640))
	must(os.Symlink("sub/f", filepath.Join(src, "link")))
	must(syscall.Mkfifo(filepath.Join(src, "fifo"), 0o600))
	root, err := os.OpenRoot(src)
	must(err)
	defer root.Close()
	entries, stats, err := localTree(root, src)
	must(err)
	if !slices.Equal(stats.skipped, []string{filepath.Join(src, "fifo")}) {
		t.Errorf("skipped %q", stats.skipped)
	}
	var archive, stdout bytes.Buffer
	e := &env{stdout: &stdout, stderr: io.Discard}
	dest := remoteDest{top: "/home/user/tree", dir: "/home/user", prefix: "tree"}
	must(writeTar(&archive, e, &cpOpts{verbose: true}, root, src, dest, entries, &stats, newProgress(io.Discard, "", 0)))
	if got := stats.String(); got != "2 directories, 1 file (5 B) and 1 symlink" {
		t.Errorf("stats %q", got)
	}
	if !strings.Contains(stdout.String(), "'"+filepath.Join(src, "sub", "f")+"' -> 'envd:/home/user/tree/sub/f'\n") {
		t.Errorf("-v printed %q", stdout.String())
	}

	// As envd sees it: everything under "tree/", the root first.
	var names []string
	tr := tar.NewReader(bytes.NewReader(archive.Bytes()))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		must(err)
		names = append(names, fmt.Sprintf("%s %c %o %q", h.Name, h.Typeflag, h.Mode, h.Linkname))
	}
	want := []string{`tree/ 5 %o ""`, `tree/link 2 777 "sub/f"`, `tree/sub/ 5 750 ""`, `tree/sub/f 0 640 ""`}
	st, _ := os.Stat(src)
	want[0] = fmt.Sprintf(want[0], st.Mode().Perm())
	if !slices.Equal(names, want) {
		t.Errorf("archive %q\nwant %q", names, want)
	}

	// Read back as envd's archive of /home/user/tree/.. would be: entries
	// relative to the directory read.
	var got []string
	err = readTar(bytes.NewReader(archive.Bytes()), "/home/user", func(ent treeEntry, content io.Reader) error {
		b, _ := io.ReadAll(content)
		got = append(got, fmt.Sprintf("%s %d %o %q %q", ent.rel, ent.kind, ent.mode, ent.target, b))
		return nil
	})
	must(err)
	want = []string{fmt.Sprintf(`tree %d %o "" ""`, kindDir, st.Mode().Perm()), fmt.Sprintf(`tree/link %d 777 "sub/f" ""`, kindLink),
		fmt.Sprintf(`tree/sub %d 750 "" ""`, kindDir), fmt.Sprintf(`tree/sub/f %d 640 "" "hello"`, kindFile)}
	if !slices.Equal(got, want) {
		t.Errorf("read back %q\nwant %q", got, want)
	}
}

// TestReadTarRefuses: an archive naming a path out of the tree is
// refused before anything is done with that entry; one cut short is an
// error, not a shorter tree; other types are passed on to be skipped.
func TestReadTarRefuses(t *testing.T) {
	t.Parallel()
	build := func(hs ...*tar.Header) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, h := range hs {
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if h.Size > 0 {
				tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
			}
		}
		tw.Close()
		return b.Bytes()
	}
	for _, name := range []string{"../evil", "/etc/evil", "a/../../evil"} {
		var seen []string
		err := readTar(bytes.NewReader(build(&tar.Header{Name: "ok", Typeflag: tar.TypeReg, Size: 1}, &tar.Header{Name: name, Typeflag: tar.TypeReg, Size: 1})), "/t",
			func(ent treeEntry, _ io.Reader) error { seen = append(seen, ent.rel); return nil })
		if err == nil || !strings.Contains(err.Error(), "not a path inside it") || !slices.Equal(seen, []string{"ok"}) {
			t.Errorf("%q: %v, saw %q", name, err, seen)
		}
	}
	full := build(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: 4096})
	err := readTar(bytes.NewReader(full[:2000]), "/t", func(_ treeEntry, r io.Reader) error { _, err := io.ReadAll(r); return err })
	if err == nil {
		t.Error("a cut archive was read whole")
	}
	var kinds []entryKind
	err = readTar(bytes.NewReader(build(&tar.Header{Name: "fifo", Typeflag: tar.TypeFifo}, &tar.Header{Name: "hard", Typeflag: tar.TypeLink, Linkname: "x"})), "/t",
		func(ent treeEntry, _ io.Reader) error { kinds = append(kinds, ent.kind); return nil })
	if err != nil || !slices.Equal(kinds, []entryKind{kindOther, kindOther}) {
		t.Errorf("other types: %v, %v", kinds, err)
	}
}

// TestTarFileNotThroughALink: a file replaced by a link after it was
// listed is not read through the link.
func TestTarFileNotThroughALink(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "target"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("target", filepath.Join(dir, "f")); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if _, err := tarFile(tw, root, "f", &tar.Header{Name: "t/f"}, newProgress(io.Discard, "", 0)); err == nil || b.Len() != 0 {
		t.Errorf("tarFile through a link: %v, wrote %d bytes", err, b.Len())
	}
}

func TestExitText(t *testing.T) {
	t.Parallel()
	usage := &client.Usage{UserCPU: 120 * time.Millisecond, SystemCPU: 30 * time.Millisecond, MaxRSS: 64<<20 + 100<<10}
	tests := []struct {
		exit client.Exit
		want string
	}{
		{client.Exit{Code: 3, Reason: client.ExitReasonExited, Usage: usage}, "exited with status 3 (user 0.12s, system 0.03s, max RSS 64.1 MiB)"},
		{client.Exit{Code: 0, Reason: client.ExitReasonExited}, "exited with status 0"},
		{client.Exit{Code: -1, Signal: syscall.SIGSEGV, Reason: client.ExitReasonSignaled, Usage: usage}, "signaled: SIGSEGV (user 0.12s, system 0.03s, max RSS 64.1 MiB)"},
		{client.Exit{Code: -1, Signal: syscall.SIGKILL, Reason: client.ExitReasonTimedOut, TimedOut: true}, "timed out: SIGKILL"},
		{client.Exit{Code: -1, Signal: syscall.SIGTERM, Reason: client.ExitReasonClientSignal}, "killed by a client's signal: SIGTERM"},
		{client.Exit{Code: -1, Signal: syscall.SIGKILL, Reason: client.ExitReasonShutdown}, "killed at envd's shutdown: SIGKILL"},
		{client.Exit{Code: -1, Signal: syscall.SIGKILL, Reason: client.ExitReasonOOMKilled, Usage: &client.Usage{MaxRSS: 1 << 20, MemoryPeak: 32 << 20}}, "killed by the OOM killer: SIGKILL (user 0.00s, system 0.00s, max RSS 1.0 MiB, memory peak 32.0 MiB)"},
		{client.Exit{Code: 143, Reason: client.ExitReasonShutdown}, "killed at envd's shutdown"},
		{client.Exit{Code: 2, Status: "exit status 2"}, "exit status 2"},
		{client.Exit{Code: -1, Signal: 77, Reason: client.ExitReasonSignaled}, "signaled: signal 77"},
	}
	for _, tt := range tests {
		if got := exitText(&tt.exit); got != tt.want {
			t.Errorf("exitText(%+v) = %q, want %q", tt.exit, got, tt.want)
		}
	}
}
