package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/envd-dev/envd/client"
)

// cp -r: a directory tree into or out of the sandbox. File contents go
// through envd's file API (/files, streamed); directories through MakeDir
// and ListDir. What that API cannot do (read a link's text, make a link, set
// permission bits) is done by one /bin/sh in the sandbox per batch of paths,
// with the paths as its arguments (never pasted into the script), as
// `kubectl cp` relies on tar in the container.
//
// Symlinks are copied as links with their text unchanged, never followed:
// a tree that links out of itself copies the link, not what it points to.
// On the local side every operation goes through an os.Root, so nothing
// is written through a link out of the destination either. Links are made
// last, once every file is written, and directories get their permission
// bits after their contents, deepest first (a 0555 directory stays
// writable until it is full).

// entryKind is what a tree entry is.
type entryKind int

const (
	kindDir entryKind = iota
	kindFile
	kindLink
)

// treeEntry is one thing in a copied tree.
type treeEntry struct {
	rel  string // slash-separated, relative to the tree's root; "." is the root
	kind entryKind
	mode fs.FileMode // permission bits of a file or directory
	size int64       // of a file
	// target is a link's text, as readlink gives it.
	target string
}

// copyStats is what a tree copy did.
type copyStats struct {
	dirs, files, links int
	bytes              int64
	skipped            []string // special files (fifos, sockets, devices)
}

// String says what was copied: "2 directories, 3 files (1.2 KiB) and 1
// symlink".
func (s copyStats) String() string {
	plural := func(n int, one, many string) string {
		if n == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %s", n, many)
	}
	parts := []string{plural(s.dirs, "directory", "directories"), plural(s.files, "file", "files") + " (" + bytesText(uint64(s.bytes)) + ")"}
	if s.links > 0 {
		parts = append(parts, plural(s.links, "symlink", "symlinks"))
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

// count adds ent to the stats.
func (s *copyStats) count(ent treeEntry) {
	switch ent.kind {
	case kindDir:
		s.dirs++
	case kindFile:
		s.files++
		s.bytes += ent.size
	case kindLink:
		s.links++
	}
}

// treeDone reports a finished tree copy on stderr, as docker cp does.
func treeDone(e *env, stats copyStats, dst string) {
	skipped := ""
	if n := len(stats.skipped); n == 1 {
		skipped = "; skipped a special file (not a file, directory or symlink): " + stats.skipped[0]
	} else if n > 1 {
		skipped = fmt.Sprintf("; skipped %d special files (not files, directories or symlinks): %s", n, strings.Join(stats.skipped, ", "))
	}
	fmt.Fprintf(e.stderr, "copied %s to %s%s\n", stats, dst, skipped)
}

// uploadTree copies the local directory src into the sandbox: into dst
// when it is a directory there (as dst/NAME), else as dst.
func uploadTree(ctx context.Context, e *env, o *cpOpts, src, dst string) error {
	root, err := os.OpenRoot(src)
	if err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	defer root.Close()
	entries, stats, err := localTree(root, src)
	if err != nil {
		return err
	}
	top, err := remoteTop(ctx, e, src, dst)
	if err != nil {
		return err
	}
	var total int64
	for _, ent := range entries {
		total += ent.size
	}
	bar := newProgress(e.stderr, "upload "+filepath.Base(src), total)
	var meta []string // for sandboxMetaScript: op, arg, path
	for _, ent := range entries {
		remote := path.Join(top, ent.rel)
		switch ent.kind {
		case kindDir:
			if ent.rel != "." {
				if err := remoteMkdir(ctx, e, remote); err != nil {
					bar.done()
					return err
				}
			}
		case kindFile:
			if err := uploadEntry(ctx, e, root, ent, remote, bar); err != nil {
				bar.done()
				return err
			}
			meta = append(meta, "m", fmt.Sprintf("%04o", uint32(ent.mode)), remote)
		case kindLink:
			// Made below, after every file: nothing is uploaded through it.
			meta = append(meta, "l", ent.target, remote)
		}
		stats.count(ent)
		if o.verbose {
			fmt.Fprintf(e.stdout, "'%s' -> 'envd:%s'\n", filepath.Join(src, filepath.FromSlash(ent.rel)), remote)
		}
	}
	bar.done()
	// Directories last, deepest first.
	for _, ent := range slices.Backward(entries) {
		if ent.kind == kindDir {
			meta = append(meta, "m", fmt.Sprintf("%04o", uint32(ent.mode)), path.Join(top, ent.rel))
		}
	}
	if _, err := sandboxBatches(ctx, e, sandboxMetaScript, meta, 3); err != nil {
		return fmt.Errorf("cp: set modes and make symlinks in the sandbox: %w", err)
	}
	treeDone(e, stats, "envd:"+top)
	return nil
}

// localTree lists the tree under root, parents before their children. A
// link is read, never followed.
func localTree(root *os.Root, src string) ([]treeEntry, copyStats, error) {
	var out []treeEntry
	var stats copyStats
	fsys := root.FS()
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch t := d.Type(); {
		case t&fs.ModeSymlink != 0:
			target, err := fs.ReadLink(fsys, p)
			if err != nil {
				return err
			}
			out = append(out, treeEntry{rel: p, kind: kindLink, target: target})
		case d.IsDir():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			out = append(out, treeEntry{rel: p, kind: kindDir, mode: fi.Mode().Perm()})
		case t.IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			out = append(out, treeEntry{rel: p, kind: kindFile, mode: fi.Mode().Perm(), size: fi.Size()})
		default:
			stats.skipped = append(stats.skipped, filepath.Join(src, filepath.FromSlash(p)))
		}
		return nil
	})
	if err != nil {
		return nil, stats, rootErr(root, err)
	}
	return out, stats, nil
}

// remoteTop makes the directory a tree from src goes to and returns its
// absolute path: dst/NAME when dst is a directory, else dst.
func remoteTop(ctx context.Context, e *env, src, dst string) (string, error) {
	top := dst
	fi, err := e.c.Stat(ctx, dst)
	switch {
	case err == nil && fi.Type == client.TypeDir:
		top = path.Join(fi.Path, filepath.Base(src))
	case err == nil:
		return "", fmt.Errorf("cp: cannot overwrite non-directory 'envd:%s' with directory '%s'", dst, src)
	case !errors.Is(err, client.ErrNotFound):
		return "", err
	}
	made, err := e.c.MakeDir(ctx, top)
	if err == nil {
		return made.Path, nil
	}
	if !errors.Is(err, client.ErrAlreadyExists) {
		return "", err
	}
	fi, err = e.c.Stat(ctx, top)
	if err != nil {
		return "", err
	}
	if fi.Type != client.TypeDir {
		return "", fmt.Errorf("cp: cannot overwrite non-directory 'envd:%s' with directory '%s'", top, src)
	}
	return fi.Path, nil
}

// remoteMkdir makes a directory inside the copied tree. One that exists
// is kept, unless it is a link: nothing is copied through a link.
func remoteMkdir(ctx context.Context, e *env, p string) error {
	_, err := e.c.MakeDir(ctx, p)
	if err == nil || !errors.Is(err, client.ErrAlreadyExists) {
		return err
	}
	fi, err := e.c.Stat(ctx, p)
	if err != nil {
		return err
	}
	switch {
	case strings.HasPrefix(fi.Permissions, "L"):
		return fmt.Errorf("cp: 'envd:%s' is a symlink: not copying a directory through it", p)
	case fi.Type != client.TypeDir:
		return fmt.Errorf("cp: cannot overwrite non-directory 'envd:%s' with a directory", p)
	}
	return nil
}

func uploadEntry(ctx context.Context, e *env, root *os.Root, ent treeEntry, remote string, bar *progress) error {
	f, err := root.Open(filepath.FromSlash(ent.rel))
	if err != nil {
		return rootErr(root, err)
	}
	defer f.Close()
	_, err = e.c.Upload(ctx, remote, bar.reader(f))
	return err
}

// downloadTree copies the sandbox directory src (described by fi) to the
// local dst: into dst when it is a directory (as dst/NAME), else as dst,
// whose parent must exist.
func downloadTree(ctx context.Context, e *env, o *cpOpts, src string, fi *client.FileInfo, dst string) error {
	if dst == "-" {
		return usageError{fmt.Sprintf("cp: 'envd:%s' is a directory: it cannot go to stdout", src)}
	}
	if st, err := os.Stat(dst); err == nil {
		if !st.IsDir() {
			return fmt.Errorf("cp: cannot overwrite non-directory '%s' with directory 'envd:%s'", dst, src)
		}
		// As cp: SRC/. puts SRC's contents right into dst.
		name := path.Base(src)
		if src == "" {
			name = path.Base(fi.Path)
		}
		dst = filepath.Join(dst, name)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cp: %w", err)
	}
	entries, stats, err := remoteTree(ctx, e, fi.Path, fi.Mode)
	if err != nil {
		return err
	}
	if err := os.Mkdir(dst, 0o700); errors.Is(err, fs.ErrExist) {
		// Merged into, as cp does; but not through a link.
		if st, err := os.Lstat(dst); err != nil || !st.IsDir() {
			return fmt.Errorf("cp: cannot copy directory 'envd:%s' to '%s': it exists and is not a directory", src, dst)
		}
	} else if err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	root, err := os.OpenRoot(dst)
	if err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	defer root.Close()
	var total int64
	var links []treeEntry
	for _, ent := range entries {
		total += ent.size
	}
	bar := newProgress(e.stderr, "download "+path.Base(fi.Path), total)
	for _, ent := range entries {
		remote := path.Join(fi.Path, ent.rel)
		local := filepath.FromSlash(ent.rel)
		switch ent.kind {
		case kindDir:
			if err := localMkdir(root, local); err != nil {
				bar.done()
				return err
			}
		case kindFile:
			if err := downloadEntry(ctx, e, root, ent, remote, bar); err != nil {
				bar.done()
				return err
			}
		case kindLink:
			links = append(links, ent)
			continue // told once made
		}
		stats.count(ent)
		if o.verbose {
			fmt.Fprintf(e.stdout, "'envd:%s' -> '%s'\n", remote, filepath.Join(dst, local))
		}
	}
	bar.done()
	if err := makeLocalLinks(ctx, e, o, root, fi.Path, dst, links, &stats); err != nil {
		return err
	}
	for _, ent := range slices.Backward(entries) {
		if ent.kind == kindDir {
			if err := root.Chmod(filepath.FromSlash(ent.rel), ent.mode); err != nil {
				return rootErr(root, err)
			}
		}
	}
	treeDone(e, stats, dst)
	return nil
}

// remoteTree lists the sandbox tree under top (a directory with mode),
// parents before their children, one ListDir a directory: a directory
// that cannot be listed is an error, not a silent gap.
func remoteTree(ctx context.Context, e *env, top string, mode fs.FileMode) ([]treeEntry, copyStats, error) {
	out := []treeEntry{{rel: ".", kind: kindDir, mode: mode}}
	var stats copyStats
	var walk func(rel string) error
	walk = func(rel string) error {
		dir := path.Join(top, rel)
		list, err := e.c.ListDir(ctx, dir, 1)
		if err != nil {
			return err
		}
		for _, f := range list {
			if f.Name == "" || f.Name == "." || f.Name == ".." || strings.ContainsAny(f.Name, "/\x00") {
				return fmt.Errorf("cp: envd listed %q in %s: not a file name", f.Name, dir)
			}
			r := path.Join(rel, f.Name)
			switch {
			case strings.HasPrefix(f.Permissions, "L"):
				out = append(out, treeEntry{rel: r, kind: kindLink})
			case f.Type == client.TypeDir:
				out = append(out, treeEntry{rel: r, kind: kindDir, mode: f.Mode})
				if err := walk(r); err != nil {
					return err
				}
			case f.Type == client.TypeFile:
				out = append(out, treeEntry{rel: r, kind: kindFile, mode: f.Mode, size: f.Size})
			default:
				stats.skipped = append(stats.skipped, "envd:"+path.Join(top, r))
			}
		}
		return nil
	}
	if err := walk("."); err != nil {
		return nil, stats, err
	}
	return out, stats, nil
}

// localMkdir makes a directory of the tree (0700 until its mode is set at
// the end). One that exists is kept if it is a directory.
func localMkdir(root *os.Root, name string) error {
	if name == "." {
		return nil
	}
	err := root.Mkdir(name, 0o700)
	if err == nil || !errors.Is(err, fs.ErrExist) {
		return rootErr(root, err)
	}
	if st, err := root.Lstat(name); err != nil || !st.IsDir() {
		return fmt.Errorf("cp: cannot overwrite non-directory '%s' with a directory", filepath.Join(root.Name(), name))
	}
	return nil
}

// downloadEntry writes one file of the tree beside its place, then
// renames it there: a failed copy leaves no half-written file, and a link
// at the place is replaced, not written through.
func downloadEntry(ctx context.Context, e *env, root *os.Root, ent treeEntry, remote string, bar *progress) error {
	r, err := e.c.Download(ctx, remote)
	if err != nil {
		return err
	}
	defer r.Close()
	name := filepath.FromSlash(ent.rel)
	var rnd [6]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(filepath.Dir(name), "."+filepath.Base(name)+".envctl-"+hex.EncodeToString(rnd[:]))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return rootErr(root, err)
	}
	_, err = io.Copy(f, bar.reader(r))
	if err == nil {
		err = f.Chmod(ent.mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		root.Remove(tmp)
		return fmt.Errorf("cp: %s: %w", filepath.Join(root.Name(), name), err)
	}
	return nil
}

// makeLocalLinks reads the text of the tree's links in the sandbox and
// makes them under root, replacing a file or link at their place.
func makeLocalLinks(ctx context.Context, e *env, o *cpOpts, root *os.Root, top, dst string, links []treeEntry, stats *copyStats) error {
	if len(links) == 0 {
		return nil
	}
	paths := make([]string, len(links))
	for i, l := range links {
		paths[i] = path.Join(top, l.rel)
	}
	out, err := sandboxBatches(ctx, e, sandboxReadlinkScript, paths, 1)
	if err != nil {
		return fmt.Errorf("cp: read symlinks in the sandbox: %w", err)
	}
	// Each link's text, then a newline (readlink's) and a NUL (ours).
	targets := strings.Split(string(out), "\x00")
	if len(targets) != len(links)+1 || targets[len(links)] != "" {
		return fmt.Errorf("cp: read symlinks in the sandbox: %d answers for %d links", len(targets)-1, len(links))
	}
	for i, l := range links {
		name := filepath.FromSlash(l.rel)
		if st, err := root.Lstat(name); err == nil {
			if st.IsDir() {
				return fmt.Errorf("cp: cannot overwrite directory '%s' with a symlink", filepath.Join(dst, name))
			}
			if err := root.Remove(name); err != nil {
				return rootErr(root, err)
			}
		}
		if err := root.Symlink(strings.TrimSuffix(targets[i], "\n"), name); err != nil {
			return rootErr(root, err)
		}
		stats.count(l)
		if o.verbose {
			fmt.Fprintf(e.stdout, "'envd:%s' -> '%s'\n", paths[i], filepath.Join(dst, name))
		}
	}
	return nil
}

// rootErr is err from an operation of root, its paths made whole (they
// are relative to root), prefixed with "cp: "; nil if err is.
func rootErr(root *os.Root, err error) error {
	if err == nil {
		return nil
	}
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		pe.Path = filepath.Join(root.Name(), pe.Path)
	} else if le, ok := errors.AsType[*os.LinkError](err); ok {
		if !strings.HasPrefix(le.Op, "symlink") { // whose Old is the link's text
			le.Old = filepath.Join(root.Name(), le.Old)
		}
		le.New = filepath.Join(root.Name(), le.New)
	}
	return fmt.Errorf("cp: %w", err)
}

// The scripts run in the sandbox. Paths are absolute (none starts with
// "-"), and come as arguments.
const (
	// sandboxReadlinkScript prints each argument's link text, each
	// followed by a newline and a NUL.
	sandboxReadlinkScript = `for f; do readlink -- "$f" || exit 1; printf '\0'; done`
	// sandboxMetaScript takes triples: "l TARGET PATH" makes a link (one
	// there is replaced, a directory is not), "m MODE PATH" sets a mode.
	sandboxMetaScript = `while [ $# -ge 3 ]; do
	case $1 in
	l) if [ -d "$3" ] && [ ! -L "$3" ]; then echo "cannot overwrite directory $3 with a symlink" >&2; exit 1; fi
	   ln -sfn -- "$2" "$3" || exit 1 ;;
	m) chmod "$2" "$3" || exit 1 ;;
	esac
	shift 3
done`
)

// maxScriptArgs bounds the bytes of arguments given to one script run.
const maxScriptArgs = 64 << 10

// sandboxBatches runs script with args, in as many runs as it takes to
// keep each run's arguments under maxScriptArgs (groups of stride stay
// together), and returns their stdout, concatenated.
func sandboxBatches(ctx context.Context, e *env, script string, args []string, stride int) ([]byte, error) {
	var out bytes.Buffer
	for len(args) > 0 {
		n, size := 0, 0
		for n < len(args) && (n == 0 || size < maxScriptArgs) {
			for _, a := range args[n : n+stride] {
				size += len(a) + 1
			}
			n += stride
		}
		res, err := e.c.Run(ctx, client.Command{Name: "/bin/sh", Args: append([]string{"-c", script, "sh"}, args[:n]...)})
		if err != nil {
			return nil, err
		}
		if !res.Exit.Success() {
			msg := oneLine(string(res.Stderr))
			if msg == "" {
				msg = "/bin/sh " + res.Exit.String()
			}
			return nil, errors.New(msg)
		}
		out.Write(res.Stdout)
		args = args[n:]
	}
	return out.Bytes(), nil
}
