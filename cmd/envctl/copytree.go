package main

import (
	"archive/tar"
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
	"syscall"
	"time"

	"github.com/envd-dev/envd/client"
)

// cp -r: a directory tree into or out of the sandbox, as one tar stream
// through envd's archive API (client.UploadDir and client.DownloadDir).
//
// Symlinks are copied as links with their text unchanged, never followed.
// Out of the sandbox, a link that points out of the tree (or nowhere) is
// copied as it is; every local operation goes through an os.Root, links
// are made last, once every file is written, and a file is written beside
// its place then renamed there, so nothing is written through a link. Into
// the sandbox, envd unpacks only links that stay inside the directory they
// are unpacked in: envctl checks the tree's links before it sends
// anything, and names those envd would refuse. Directories get their
// permission bits after their contents, deepest first (a 0555 directory
// stays writable until it is full): envd does so for an upload, envctl for
// a download.

// entryKind is what a tree entry is.
type entryKind int

const (
	kindDir entryKind = iota
	kindFile
	kindLink
)

// treeEntry is one thing in a copied tree.
type treeEntry struct {
	rel   string // slash-separated, relative to the tree's root; "." is the root
	kind  entryKind
	mode  fs.FileMode // permission bits of a file or directory
	size  int64       // of a file
	mtime time.Time
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
	// Before anything changes in the sandbox.
	if err := checkLinks(src, entries); err != nil {
		return err
	}
	dest, err := remoteTop(ctx, e, src, dst)
	if err != nil {
		return err
	}
	var total int64
	for _, ent := range entries {
		total += ent.size
	}
	bar := newProgress(e.stderr, "upload "+filepath.Base(src), total)
	pr, pw := io.Pipe()
	written := make(chan error, 1)
	go func() {
		err := writeTar(uploadSink{pw}, e, o, root, src, dest, entries, &stats, bar)
		pw.CloseWithError(err) // nil: the archive ends
		written <- err
	}()
	err = e.c.UploadDir(ctx, dest.dir, pr)
	// envd answered: it read the whole archive, or stopped reading it.
	pr.CloseWithError(errUploadEnded)
	werr := <-written
	bar.done()
	switch {
	case werr != nil && !errors.Is(werr, errUploadEnded):
		// A local failure cut the archive, so envd changed nothing: it
		// is the one to tell.
		return werr
	case err != nil:
		if ce, ok := errors.AsType[*client.Error](err); ok {
			// Named by the tree, not by the directory it is unpacked in.
			named := *ce
			named.Op = "cp: copy to envd:" + dest.top
			return &named
		}
		return err
	case werr != nil:
		return errors.New("cp: envd answered before the archive was sent whole")
	}
	treeDone(e, stats, "envd:"+dest.top)
	return nil
}

// errUploadEnded is what writing an archive envd no longer reads fails
// with.
var errUploadEnded = errors.New("the upload ended")

// uploadSink is the archive's way to UploadDir: any failure to write is
// errUploadEnded, told apart from a local failure (a file that cannot be
// read) that cuts the archive.
type uploadSink struct{ w *io.PipeWriter }

func (u uploadSink) Write(b []byte) (int, error) {
	n, err := u.w.Write(b)
	if err != nil {
		err = errUploadEnded
	}
	return n, err
}

// remoteDest is where a tree goes in the sandbox.
type remoteDest struct {
	top string // the tree's absolute path, as named (for messages)
	// dir is the directory the archive is unpacked in (links resolved),
	// and prefix the name of the tree's root in it: the root is an entry
	// of the archive, so that it gets the source's mode. prefix is ""
	// when the tree is unpacked right into dir (when top is "/").
	dir, prefix string
}

// writeTar writes the tree's entries to w as a tar archive, reading every
// file through root, counting them in stats and naming them on stdout with
// -v. It does not close w.
func writeTar(w io.Writer, e *env, o *cpOpts, root *os.Root, src string, dest remoteDest, entries []treeEntry, stats *copyStats, bar *progress) error {
	tw := tar.NewWriter(w)
	for _, ent := range entries {
		name := path.Join(dest.prefix, ent.rel)
		if name != "." {
			h := &tar.Header{Name: name, Mode: int64(ent.mode), ModTime: ent.mtime}
			switch ent.kind {
			case kindDir:
				h.Typeflag, h.Name = tar.TypeDir, name+"/"
			case kindLink:
				h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, ent.target, 0o777
			}
			if ent.kind == kindFile {
				size, err := tarFile(tw, root, ent.rel, h, bar)
				if err != nil {
					return err
				}
				ent.size = size
			} else if err := tw.WriteHeader(h); err != nil {
				return err
			}
		}
		stats.count(ent)
		if o.verbose {
			fmt.Fprintf(e.stdout, "'%s' -> 'envd:%s'\n", filepath.Join(src, filepath.FromSlash(ent.rel)), path.Join(dest.top, ent.rel))
		}
	}
	return tw.Close()
}

// tarFile writes the file rel (relative to root) to tw with the header
// h, which gets the file's size and mode as they are when it is opened.
// It returns the size.
func tarFile(tw *tar.Writer, root *os.Root, rel string, h *tar.Header, bar *progress) (int64, error) {
	name := filepath.FromSlash(rel)
	// Not through a link put in the file's place (os.Root follows one
	// that stays inside it), nor stuck on a fifo: the file opened must be
	// the one lstat saw.
	lfi, err := root.Lstat(name)
	if err != nil {
		return 0, rootErr(root, err)
	}
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, rootErr(root, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, rootErr(root, err)
	}
	if !lfi.Mode().IsRegular() || !fi.Mode().IsRegular() || !os.SameFile(lfi, fi) {
		return 0, fmt.Errorf("cp: %s is no longer a file: it changed while it was copied", filepath.Join(root.Name(), name))
	}
	h.Typeflag, h.Size, h.Mode, h.ModTime = tar.TypeReg, fi.Size(), int64(fi.Mode().Perm()), fi.ModTime()
	if err := tw.WriteHeader(h); err != nil {
		return 0, err
	}
	// A file that grew meanwhile is sent up to its size when opened.
	_, err = io.CopyN(tw, bar.reader(f), fi.Size())
	switch {
	case errors.Is(err, io.EOF):
		return 0, fmt.Errorf("cp: %s shrank while it was copied", filepath.Join(root.Name(), name))
	case err != nil:
		if _, ok := errors.AsType[*fs.PathError](err); ok {
			return 0, rootErr(root, err)
		}
		return 0, err
	}
	return fi.Size(), nil
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
		if d.Type()&^(fs.ModeSymlink|fs.ModeDir) != 0 {
			stats.skipped = append(stats.skipped, filepath.Join(src, filepath.FromSlash(p)))
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		ent := treeEntry{rel: p, mode: fi.Mode().Perm(), mtime: fi.ModTime()}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			if ent.target, err = fs.ReadLink(fsys, p); err != nil {
				return err
			}
			ent.kind, ent.mode = kindLink, 0
		case d.IsDir():
			ent.kind = kindDir
		default:
			ent.kind, ent.size = kindFile, fi.Size()
		}
		out = append(out, ent)
		return nil
	})
	if err != nil {
		return nil, stats, rootErr(root, err)
	}
	return out, stats, nil
}

// linkOut says why envd would refuse to unpack a link at rel (relative to
// the tree) with target: it refuses absolute targets and those that climb
// out of the directory the link is unpacked in (path.Clean's reading, as
// envd's). "" when the link stays in the tree. The tree, not the directory
// envctl unpacks it in: whether a link is copied does not depend on where
// to.
func linkOut(rel, target string) string {
	if target == "" || path.IsAbs(target) {
		return "an absolute target"
	}
	if c := path.Clean(path.Join(path.Dir(rel), target)); c == ".." || strings.HasPrefix(c, "../") {
		return "climbs out"
	}
	return ""
}

// maxNamedLinks bounds the links named in checkLinks' error.
const maxNamedLinks = 10

// checkLinks refuses a tree with links envd would not unpack, naming
// them.
func checkLinks(src string, entries []treeEntry) error {
	var bad []string
	n := 0
	for _, ent := range entries {
		if ent.kind != kindLink {
			continue
		}
		why := linkOut(ent.rel, ent.target)
		if why == "" {
			continue
		}
		if n++; n <= maxNamedLinks {
			bad = append(bad, fmt.Sprintf("'%s' -> '%s' (%s)", filepath.Join(src, filepath.FromSlash(ent.rel)), ent.target, why))
		}
	}
	if n == 0 {
		return nil
	}
	what := "a symlink in '" + src + "' points"
	if n > 1 {
		what = fmt.Sprintf("%d symlinks in '%s' point", n, src)
	}
	list := strings.Join(bad, ", ")
	if n > len(bad) {
		list += fmt.Sprintf(" and %d more", n-len(bad))
	}
	return fmt.Errorf("cp: %s out of it, and envd unpacks only relative links that stay inside the directory copied in: %s; nothing was copied", what, list)
}

// isLink tells whether fi describes a symlink (whose Type is its
// target's).
func isLink(fi *client.FileInfo) bool { return strings.HasPrefix(fi.Permissions, "L") }

// remoteTop finds where a tree from src goes: dst/NAME when dst is a
// directory (or a link to one, followed, as cp does), else dst, whose
// missing parents are made. What is there must be a directory, which the
// tree merges into, or nothing; not a link.
func remoteTop(ctx context.Context, e *env, src, dst string) (remoteDest, error) {
	var d remoteDest
	fi, err := e.c.Stat(ctx, dst)
	switch {
	case err == nil && fi.Type == client.TypeDir:
		// As cp: SRC/. goes right into dst.
		name := filepath.Base(src)
		base := fi.Path
		if isLink(fi) {
			base = fi.SymlinkTarget
		}
		d.top = path.Join(fi.Path, name)
		real := path.Join(base, name) // without a final link
		switch {
		case real == "/":
			d.dir = "/"
			return d, nil
		case path.Dir(real) == base:
			d.dir = base
		default: // SRC/. or the like: the tree is dst itself
			if _, d.dir, err = remoteDir(ctx, e, path.Dir(real)); err != nil {
				return d, err
			}
		}
		d.prefix = path.Base(real)
	case err == nil:
		return d, fmt.Errorf("cp: cannot overwrite non-directory 'envd:%s' with directory '%s'", dst, src)
	case errors.Is(err, client.ErrNotFound):
		top := path.Clean(dst)
		named, real, err := remoteDir(ctx, e, path.Dir(top))
		if err != nil {
			return d, err
		}
		d.top, d.dir, d.prefix = path.Join(named, path.Base(top)), real, path.Base(top)
	default:
		return d, err
	}
	fi, err = e.c.Stat(ctx, path.Join(d.dir, d.prefix))
	switch {
	case errors.Is(err, client.ErrNotFound):
		return d, nil
	case err != nil:
		return d, err
	case isLink(fi):
		return d, fmt.Errorf("cp: 'envd:%s' is a symlink: not copying a directory through it", d.top)
	case fi.Type != client.TypeDir:
		return d, fmt.Errorf("cp: cannot overwrite non-directory 'envd:%s' with directory '%s'", d.top, src)
	}
	return d, nil
}

// remoteDir is the sandbox directory p, made with its missing parents if
// it is not there: its absolute path as named, and the one it resolves to
// when it is a link (envd unpacks an archive only in a directory named
// without a final link).
func remoteDir(ctx context.Context, e *env, p string) (named, real string, err error) {
	fi, err := e.c.Stat(ctx, p)
	if errors.Is(err, client.ErrNotFound) {
		fi, err = e.c.MakeDir(ctx, p)
	}
	if err != nil {
		return "", "", err
	}
	if fi.Type != client.TypeDir {
		return "", "", fmt.Errorf("cp: 'envd:%s' is not a directory", fi.Path)
	}
	if isLink(fi) {
		return fi.Path, fi.SymlinkTarget, nil
	}
	return fi.Path, fi.Path, nil
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
	// The directory named is followed if it is a link (envd sends a
	// directory named without a final link); links inside it are not.
	from := fi.Path
	if isLink(fi) {
		from = fi.SymlinkTarget
	}
	r, err := e.c.DownloadDir(ctx, from)
	if err != nil {
		return err
	}
	defer r.Close()
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
	bar := newProgress(e.stderr, "download "+path.Base(fi.Path), -1)
	var stats copyStats
	dirs := []treeEntry{{rel: ".", kind: kindDir, mode: fi.Mode}}
	stats.count(dirs[0])
	var links []treeEntry
	err = readTar(r, fi.Path, func(ent treeEntry, content io.Reader) error {
		local := filepath.FromSlash(ent.rel)
		switch ent.kind {
		case kindDir:
			if err := localMkdir(root, local); err != nil {
				return err
			}
			dirs = append(dirs, ent)
		case kindFile:
			if err := downloadEntry(root, ent, bar.reader(content)); err != nil {
				return err
			}
		case kindLink:
			links = append(links, ent)
			return nil // told once made
		default:
			stats.skipped = append(stats.skipped, "envd:"+path.Join(fi.Path, ent.rel))
			return nil
		}
		stats.count(ent)
		if o.verbose {
			fmt.Fprintf(e.stdout, "'envd:%s' -> '%s'\n", path.Join(fi.Path, ent.rel), filepath.Join(dst, local))
		}
		return nil
	})
	bar.done()
	if err != nil {
		return err
	}
	if err := makeLocalLinks(e, o, root, fi.Path, dst, links, &stats); err != nil {
		return err
	}
	// Deepest first: entries come parents before their children.
	for _, ent := range slices.Backward(dirs) {
		if err := root.Chmod(filepath.FromSlash(ent.rel), ent.mode); err != nil {
			return rootErr(root, err)
		}
	}
	treeDone(e, stats, dst)
	return nil
}

// kindOther is an archive entry cp -r does not copy (a device, a fifo, a
// hard link): skipped and named.
const kindOther entryKind = -1

// readTar reads the tar archive of the sandbox directory top from r,
// calling fn for each entry (content is a file's), parents before
// children as envd sends them. A name that is absolute or climbs out of
// the tree is an error, as is an archive cut short.
func readTar(r io.Reader, top string, fn func(ent treeEntry, content io.Reader) error) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("cp: the archive of envd:%s: %w", top, err)
		}
		rel, ok := archiveName(h.Name)
		if !ok {
			return fmt.Errorf("cp: the archive of envd:%s has an entry %q: not a path inside it", top, h.Name)
		}
		ent := treeEntry{rel: rel, mode: fs.FileMode(h.Mode).Perm(), mtime: h.ModTime}
		switch h.Typeflag {
		case tar.TypeDir:
			if rel == "." {
				continue // the root, described by Stat
			}
			ent.kind = kindDir
		case tar.TypeReg:
			ent.kind, ent.size = kindFile, h.Size
		case tar.TypeSymlink:
			ent.kind, ent.target = kindLink, h.Linkname
		default:
			ent.kind = kindOther
		}
		if rel == "." {
			return fmt.Errorf("cp: the archive of envd:%s has an entry %q that is not a directory", top, h.Name)
		}
		if err := fn(ent, tr); err != nil {
			return err
		}
	}
}

// archiveName is an archive entry's name cleaned, relative to the tree
// ("." for its root); false if it is absolute or climbs out.
func archiveName(name string) (string, bool) {
	if name == "" || strings.IndexByte(name, 0) >= 0 || path.IsAbs(name) {
		return "", false
	}
	c := path.Clean(name)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", false
	}
	return c, true
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

// downloadEntry writes one file of the tree, read from content, beside
// its place, then renames it there: a failed copy leaves no half-written
// file, and a link at the place is replaced, not written through.
func downloadEntry(root *os.Root, ent treeEntry, content io.Reader) error {
	name := filepath.FromSlash(ent.rel)
	var rnd [6]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(filepath.Dir(name), "."+filepath.Base(name)+".envctl-"+hex.EncodeToString(rnd[:]))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return rootErr(root, err)
	}
	_, err = io.Copy(f, content)
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

// makeLocalLinks makes the tree's links under root, replacing a file or
// link at their place.
func makeLocalLinks(e *env, o *cpOpts, root *os.Root, top, dst string, links []treeEntry, stats *copyStats) error {
	for _, l := range links {
		name := filepath.FromSlash(l.rel)
		if st, err := root.Lstat(name); err == nil {
			if st.IsDir() {
				return fmt.Errorf("cp: cannot overwrite directory '%s' with a symlink", filepath.Join(dst, name))
			}
			if err := root.Remove(name); err != nil {
				return rootErr(root, err)
			}
		}
		if err := root.Symlink(l.target, name); err != nil {
			return rootErr(root, err)
		}
		stats.count(l)
		if o.verbose {
			fmt.Fprintf(e.stdout, "'envd:%s' -> '%s'\n", path.Join(top, l.rel), filepath.Join(dst, name))
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
