package e2e_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestEnvctlCopyTree: cp -r of a directory into the sandbox and back out:
// files keep their permission bits, empty directories are made, symlinks
// stay symlinks with their text, and nothing is followed out of the tree.
// Out of the sandbox a link that points out of the tree, or nowhere, is
// copied as it is; into it, envd unpacks only links that stay inside the
// directory copied in, so envctl names the others and copies nothing. The
// sandbox is this machine, so both copies are compared with the original
// directly.
func TestEnvctlCopyTree(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{args: []string{"-default-user", "root"}})
	addr := "--addr=" + e.url
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	outside := filepath.Join(dir, "outside")
	mkdir(t, outside, 0o755)
	write(t, filepath.Join(outside, "victim"), "untouched\n", 0o644)

	mkdir(t, src, 0o750) // not what a new directory gets: the copies get it from the tree
	write(t, filepath.Join(src, "run.sh"), "#!/bin/sh\necho hi\n", 0o755)
	write(t, filepath.Join(src, "secret"), "s3cret\n", 0o600)
	mkdir(t, filepath.Join(src, "empty"), 0o700)
	mkdir(t, filepath.Join(src, "sub"), 0o750)
	mkdir(t, filepath.Join(src, "sub", "deep"), 0o755)
	write(t, filepath.Join(src, "sub", "deep", "data.bin"), strings.Repeat("\x00\xff", 50_000), 0o640)
	write(t, filepath.Join(src, "sub", "deep", "-dash"), "a name like a flag\n", 0o644)
	mkdir(t, filepath.Join(src, "ro"), 0o755)
	write(t, filepath.Join(src, "ro", "f"), "in a read-only dir\n", 0o444)
	os.Chmod(filepath.Join(src, "ro"), 0o555)
	symlink(t, "run.sh", filepath.Join(src, "link"))         // inside the tree
	symlink(t, "../secret", filepath.Join(src, "sub", "up")) // inside, up a level
	symlink(t, "nowhere", filepath.Join(src, "dangling"))
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}

	// Links out of the tree: named before anything is sent.
	symlink(t, outside, filepath.Join(src, "out"))                // a directory out of the tree
	symlink(t, "../outside/victim", filepath.Join(src, "escape")) // a file out of the tree
	remote := filepath.Join(dir, "remote")
	r := envctl(t, nil, nil, addr, "cp", "-r", src, "envd:"+remote)
	oneErrorLine(t, r, "cp: 2 symlinks in '"+src+"' point out of it, and envd unpacks only relative links that stay inside the directory copied in: '"+
		filepath.Join(src, "escape")+"' -> '../outside/victim' (climbs out), '"+filepath.Join(src, "out")+"' -> '"+outside+"' (an absolute target); nothing was copied")
	if _, err := os.Lstat(remote); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused copy made %s: %v", remote, err)
	}
	os.Remove(filepath.Join(src, "out"))
	os.Remove(filepath.Join(src, "escape"))
	want := tree(t, src)
	delete(want, "fifo") // skipped, and said so

	// Into the sandbox, as a new directory.
	r = envctl(t, nil, nil, addr, "cp", "-r", src, "envd:"+remote)
	if r.code != 0 || r.stdout != "" ||
		r.stderr != "copied 5 directories, 5 files (97.7 KiB) and 3 symlinks to envd:"+remote+"; skipped a special file (not a file, directory or symlink): "+filepath.Join(src, "fifo")+"\n" {
		t.Fatalf("cp -r in: %+v", r)
	}
	sameTree(t, "the sandbox's copy", tree(t, remote), want)

	// Out of the sandbox, as a new directory: links out of the tree too,
	// made in the sandbox's copy.
	symlink(t, outside, filepath.Join(remote, "out"))
	symlink(t, "../outside/victim", filepath.Join(remote, "escape"))
	wantOut := maps.Clone(want)
	wantOut["out"] = "link -> " + outside
	wantOut["escape"] = "link -> ../outside/victim"
	back := filepath.Join(dir, "back")
	r = envctl(t, nil, nil, addr, "cp", "-r", "envd:"+remote, back)
	if r.code != 0 || r.stdout != "" || r.stderr != "copied 5 directories, 5 files (97.7 KiB) and 5 symlinks to "+back+"\n" {
		t.Fatalf("cp -r out: %+v", r)
	}
	sameTree(t, "the copy back", tree(t, back), wantOut)

	// Into existing directories, each copy goes inside, under its name; -v
	// names each entry as cp -v does.
	existing := filepath.Join(dir, "existing")
	mkdir(t, existing, 0o755)
	r = envctl(t, nil, nil, addr, "cp", "-r", "-v", src, "envd:"+existing)
	if r.code != 0 || !strings.Contains(r.stdout, "'"+filepath.Join(src, "sub", "deep", "data.bin")+"' -> 'envd:"+filepath.Join(existing, "src", "sub", "deep", "data.bin")+"'\n") {
		t.Fatalf("cp -r -v into a directory: %+v", r)
	}
	sameTree(t, "the copy into a directory", tree(t, filepath.Join(existing, "src")), want)
	existingLocal := filepath.Join(dir, "existing-local")
	mkdir(t, existingLocal, 0o755)
	r = envctl(t, nil, nil, addr, "cp", "-r", "envd:"+remote+"/sub", existingLocal)
	if r.code != 0 {
		t.Fatalf("cp -r out into a directory: %+v", r)
	}
	wantSub := map[string]string{}
	for k, v := range want {
		if rest, ok := strings.CutPrefix(k, "sub/"); ok {
			wantSub[rest] = v
		}
	}
	wantSub["."] = want["sub"]
	sameTree(t, "the copy of sub", tree(t, filepath.Join(existingLocal, "sub")), wantSub)

	// A directory named through a link is followed, both ways; the links
	// inside are not.
	viaLink := filepath.Join(dir, "via-link")
	symlink(t, existing, viaLink)
	r = envctl(t, nil, nil, addr, "cp", "-r", src, "envd:"+viaLink+"/")
	if r.code != 0 || !strings.HasSuffix(r.stderr, " to envd:"+filepath.Join(viaLink, "src")+"; skipped a special file (not a file, directory or symlink): "+filepath.Join(src, "fifo")+"\n") {
		t.Fatalf("cp -r into a directory named through a link: %+v", r)
	}
	sameTree(t, "the copy through a link", tree(t, filepath.Join(existing, "src")), want)
	r = envctl(t, nil, nil, addr, "cp", "-r", "envd:"+filepath.Join(viaLink, "src"), filepath.Join(dir, "from-link"))
	if r.code != 0 {
		t.Fatalf("cp -r out of a directory named through a link: %+v", r)
	}
	sameTree(t, "the copy out of a link", tree(t, filepath.Join(dir, "from-link")), want)

	// Copied again over the first copy back (SRC/. merges into DST, as
	// with cp): a file whose place holds a link out of the tree replaces
	// the link, never writes through it; a directory whose place holds
	// one is refused.
	os.Remove(filepath.Join(back, "secret"))
	symlink(t, filepath.Join(outside, "victim"), filepath.Join(back, "secret"))
	r = envctl(t, nil, nil, addr, "cp", "-r", "envd:"+remote+"/.", back)
	if r.code != 0 {
		t.Fatalf("cp -r over a copy: %+v", r)
	}
	sameTree(t, "the copy over a copy", tree(t, back), wantOut)
	os.RemoveAll(filepath.Join(back, "empty"))
	symlink(t, outside, filepath.Join(back, "empty"))
	r = envctl(t, nil, nil, addr, "cp", "-r", "envd:"+remote+"/.", back)
	oneErrorLine(t, r, "cannot overwrite non-directory '"+filepath.Join(back, "empty")+"' with a directory")

	// The same into the sandbox, where envd does the checking: a file
	// replaces a link; a link in a directory's place is refused, the
	// copied tree, named as it is, or a directory in it.
	os.Remove(filepath.Join(remote, "secret"))
	symlink(t, filepath.Join(outside, "victim"), filepath.Join(remote, "secret"))
	r = envctl(t, nil, nil, addr, "cp", "-r", src+"/.", "envd:"+remote)
	if r.code != 0 || !strings.HasPrefix(r.stderr, "copied 5 directories, 5 files (97.7 KiB) and 3 symlinks to envd:"+remote+";") {
		t.Fatalf("cp -r over the sandbox's copy: %+v", r)
	}
	sameTree(t, "the sandbox's copy over a copy", tree(t, remote), wantOut)
	os.RemoveAll(filepath.Join(remote, "empty"))
	symlink(t, outside, filepath.Join(remote, "empty"))
	r = envctl(t, nil, nil, addr, "cp", "-r", src+"/.", "envd:"+remote)
	oneErrorLine(t, r, "cp: copy to envd:"+remote+": invalid argument (HTTP 400): cannot write "+filepath.Join(remote, "empty")+": not a directory")
	os.RemoveAll(filepath.Join(existing, "src"))
	symlink(t, outside, filepath.Join(existing, "src"))
	r = envctl(t, nil, nil, addr, "cp", "-r", src, "envd:"+existing)
	oneErrorLine(t, r, "cp: 'envd:"+filepath.Join(existing, "src")+"' is a symlink: not copying a directory through it")

	if b, _ := os.ReadFile(filepath.Join(outside, "victim")); string(b) != "untouched\n" {
		t.Errorf("a file out of the tree was written: %q", b)
	}
	if des, _ := os.ReadDir(outside); len(des) != 1 {
		t.Errorf("a directory out of the tree was written: %v", des)
	}
}

// tree describes every entry under root without following a link: a
// directory by its mode, a file by its mode and content's hash, a link by
// its text.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "link -> " + target
		case fi.IsDir():
			out[rel] = fmt.Sprintf("dir %04o", fi.Mode().Perm())
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = fmt.Sprintf("file %04o %x", fi.Mode().Perm(), sha256.Sum256(b))
		default:
			out[rel] = "other " + fi.Mode().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			t.Errorf("%s: %s is %q, want %q", what, k, got[k], want[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: %s (%s) should not be there", what, k, got[k])
		}
	}
}

func mkdir(t *testing.T, p string, perm os.FileMode) {
	t.Helper()
	if err := os.Mkdir(p, perm); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, perm) // past the umask
}

func write(t *testing.T, p, content string, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, perm)
}

func symlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}
