package filesystem

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/identity"
)

// Bounds on archives, sent or received: a tree deeper or larger than this
// is refused rather than walked without end.
const (
	maxTreeDepth   = 128
	maxTreeEntries = 1_000_000
)

// TreeEntry is one entry of a directory tree walked by WalkTree.
type TreeEntry struct {
	Rel  string      // path relative to the walked directory, "/"-separated
	Stat unix.Stat_t // lstat of the entry
	File *os.File    // a regular file, open for reading (closed after fn)
	Link string      // a symlink's target
}

// WalkTree walks the directory dir as u (Files.read), calling fn for every
// entry below it, parents before children, in directory order. Links are
// never followed: a symlink is reported as one, and every directory and
// file is opened relative to its parent's descriptor without following a
// link, so a tree changed meanwhile by sandbox code leads nowhere else.
// Entries other than directories, regular files and symlinks (sockets,
// FIFOs, devices) are left out. An error from fn, or an entry that cannot
// be read, stops the walk.
func (f *Files) WalkTree(u *identity.User, dir string, fn func(TreeEntry) error) error {
	if err := checkPath(dir); err != nil {
		return err
	}
	r := f.resolverFor(u)
	return f.read(u, func() error {
		fd, err := r.open(dir, unix.O_RDONLY|unix.O_DIRECTORY, false)
		if err != nil {
			if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
				return newErr(ErrInvalid, nil, "path '%s' is not a directory", dir)
			}
			return osErr(u.Name, "read", dir, pathErr("open", dir, err))
		}
		count := 0
		return walkDir(r, u.Name, dir, fd, "", 0, &count, fn)
	})
}

// walkDir walks the directory open as fd (closing it), whose path relative
// to the root is rel.
func walkDir(r *resolver, user, root string, fd int, rel string, depth int, count *int, fn func(TreeEntry) error) error {
	d := os.NewFile(uintptr(fd), path.Join(root, rel))
	defer d.Close()
	if depth > maxTreeDepth {
		return newErr(ErrInvalid, nil, "%s is more than %d directories deep", d.Name(), maxTreeDepth)
	}
	// In a procfs, an entry may be envd's own /proc (ownproc.go): it is
	// left out, as if it were not there.
	inProc := false
	if r.guard {
		var err error
		if inProc, err = isProc(fd); err != nil {
			return osErr(user, "read", d.Name(), err)
		}
	}
	for {
		names, err := d.Readdirnames(1024)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return osErr(user, "read", d.Name(), err)
		}
		for _, name := range names {
			if *count++; *count > maxTreeEntries {
				return newErr(ErrInvalid, nil, "%s has more than %d entries", root, maxTreeEntries)
			}
			e := TreeEntry{Rel: path.Join(rel, name)}
			full := path.Join(root, e.Rel)
			if inProc && r.ownEntry(fd, name) {
				continue
			}
			if err := unix.Fstatat(fd, name, &e.Stat, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue // gone meanwhile
				}
				return osErr(user, "read", full, err)
			}
			switch e.Stat.Mode & unix.S_IFMT {
			case unix.S_IFDIR:
				cfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err != nil {
					return osErr(user, "read", full, &os.PathError{Op: "open", Path: full, Err: err})
				}
				if err := fn(e); err != nil {
					unix.Close(cfd)
					return err
				}
				if err := walkDir(r, user, root, cfd, e.Rel, depth+1, count, fn); err != nil {
					return err
				}
			case unix.S_IFREG:
				ffd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
				if err != nil {
					return osErr(user, "read", full, &os.PathError{Op: "open", Path: full, Err: err})
				}
				// Describe what was opened: the name may lead to another
				// file since the lstat (a fifo, read from forever).
				if err := unix.Fstat(ffd, &e.Stat); err != nil {
					unix.Close(ffd)
					return osErr(user, "read", full, err)
				}
				if e.Stat.Mode&unix.S_IFMT != unix.S_IFREG {
					unix.Close(ffd)
					continue // swapped for what an archive leaves out
				}
				e.File = os.NewFile(uintptr(ffd), full)
				err = fn(e)
				e.File.Close()
				if err != nil {
					return err
				}
			case unix.S_IFLNK:
				buf := make([]byte, unix.PathMax)
				n, err := unix.Readlinkat(fd, name, buf)
				if err != nil {
					return osErr(user, "read", full, err)
				}
				e.Link = string(buf[:n])
				if err := fn(e); err != nil {
					return err
				}
			}
		}
	}
}

// TarHeader is e's tar header: its path relative to the tree, permission
// bits, owner and times; directories end in "/".
func TarHeader(e TreeEntry, names *NameCache) *tar.Header {
	h := &tar.Header{
		Name:    e.Rel,
		Mode:    int64(e.Stat.Mode & 0o7777),
		Uid:     int(e.Stat.Uid),
		Gid:     int(e.Stat.Gid),
		Uname:   names.c.user(e.Stat.Uid),
		Gname:   names.c.group(e.Stat.Gid),
		ModTime: time.Unix(e.Stat.Mtim.Unix()),
		Format:  tar.FormatPAX,
	}
	switch {
	case e.File != nil:
		h.Typeflag, h.Size = tar.TypeReg, e.Stat.Size
	case e.Link != "":
		h.Typeflag, h.Linkname = tar.TypeSymlink, e.Link
	default:
		h.Typeflag, h.Name = tar.TypeDir, e.Rel+"/"
	}
	return h
}

// NameCache resolves uids and gids to names, for one archive.
type NameCache struct{ c *nameCache }

// NewNameCache returns an empty cache.
func NewNameCache() *NameCache { return &NameCache{c: newNameCache()} }

// ErrArchive marks an archive refused for its content (an entry escaping
// its directory, a type envd does not unpack, a cut archive).
var ErrArchive = errors.New("bad archive")

// ExtractTar unpacks the tar stream r under the directory dir as u, with
// the user's write rights (Files.write) in both modes. dir is created if
// missing (and its missing parents, as for an upload). Entries are
// directories, regular files and symlinks; a name that is absolute or
// climbs out of dir, a link whose target could lead out of it as the
// kernel resolves it (linkInside), a hard link or device, or a cut archive
// is refused (ErrArchive). Nothing in dir changes until the
// whole archive has been written to a staging directory inside it: then
// each entry is moved into place (files replace files; directories merge).
// It returns how many entries were unpacked.
func (f *Files) ExtractTar(u *identity.User, dir string, r io.Reader) (int, error) {
	if err := checkPath(dir); err != nil {
		return 0, err
	}
	if _, err := f.MakeDir(u, dir); err != nil && !errors.Is(err, ErrExists) {
		return 0, err
	}
	n := 0
	err := f.write(u, func() error {
		dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return osErr(u.Name, "write", dir, &os.PathError{Op: "open", Path: dir, Err: err})
		}
		defer unix.Close(dfd)
		stage := ".envd-untar-" + tempName()
		if err := unix.Mkdirat(dfd, stage, 0o700); err != nil {
			return osErr(u.Name, "write", dir, &os.PathError{Op: "mkdir", Path: path.Join(dir, stage), Err: err})
		}
		defer removeAllAt(dfd, stage)
		sfd, err := unix.Openat(dfd, stage, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return osErr(u.Name, "write", dir, err)
		}
		defer unix.Close(sfd)
		var dirModes map[string]uint32
		if n, dirModes, err = untar(u.Name, dir, sfd, r); err != nil {
			return err
		}
		// Every conflict first, so that one leaves dir as it was.
		if err := mergeInto(u.Name, dir, sfd, dfd, "", true); err != nil {
			return err
		}
		if err := mergeInto(u.Name, dir, sfd, dfd, "", false); err != nil {
			return err
		}
		return setDirModes(u.Name, dir, dfd, dirModes)
	})
	return n, err
}

// untar writes the archive's entries below the directory sfd. Directories
// are made 0700 (so their entries can be written, and they can be moved
// into place: renaming a directory writes its ".."); their own modes,
// which it returns by name, are set once they are in place.
func untar(user, dir string, sfd int, r io.Reader) (int, map[string]uint32, error) {
	cr := &countingReader{r: r}
	tr := tar.NewReader(cr)
	dirModes := map[string]uint32{}
	n := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			// The reader takes a stream that stops at an entry's end for
			// a whole archive; one shorter than the end-of-archive marker
			// is no archive at all ("hello").
			if cr.n < 2*512 {
				return n, nil, fmt.Errorf("%w: %d bytes are not a tar archive", ErrArchive, cr.n)
			}
			break
		}
		if err != nil {
			return n, nil, fmt.Errorf("%w: %v", ErrArchive, err)
		}
		if n++; n > maxTreeEntries {
			return n, nil, fmt.Errorf("%w: more than %d entries", ErrArchive, maxTreeEntries)
		}
		name, err := entryName(h.Name)
		if err != nil {
			return n, nil, err
		}
		if name == "" {
			continue // "./" itself
		}
		if strings.Count(name, "/") >= maxTreeDepth {
			return n, nil, fmt.Errorf("%w: %s is more than %d directories deep", ErrArchive, name, maxTreeDepth)
		}
		parent, base := path.Split(name)
		pfd, err := openParent(sfd, strings.TrimSuffix(parent, "/"))
		if err != nil {
			if errors.Is(err, ErrArchive) {
				return n, nil, err
			}
			return n, nil, osErr(user, "write", path.Join(dir, name), err)
		}
		err = unpackEntry(tr, h, pfd, base, name, dirModes)
		if parent != "" {
			unix.Close(pfd)
		}
		if err != nil {
			if errors.Is(err, ErrArchive) || errors.Is(err, ErrNoSpace) {
				return n, nil, err
			}
			return n, nil, osErr(user, "write", path.Join(dir, name), err)
		}
	}
	return n, dirModes, nil
}

// setDirModes gives the directories an archive unpacked in the directory
// dfd their modes, deepest first: a directory made read-only after its
// children.
func setDirModes(user, dir string, dfd int, dirModes map[string]uint32) error {
	names := make([]string, 0, len(dirModes))
	for d := range dirModes {
		names = append(names, d)
	}
	slices.SortFunc(names, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, d := range names {
		parent, base := path.Split(d)
		pfd, err := openParent(dfd, strings.TrimSuffix(parent, "/"))
		if err == nil {
			err = unix.Fchmodat(pfd, base, dirModes[d], unix.AT_SYMLINK_NOFOLLOW)
			if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOTSUP) {
				// Older kernels: the entry is a directory the archive
				// made (checked when made), or what the user's own code
				// put in its place since: following it changes only
				// what the user may change, as whom this runs.
				err = unix.Fchmodat(pfd, base, dirModes[d], 0)
			}
			if parent != "" {
				unix.Close(pfd)
			}
		}
		if err != nil {
			return osErr(user, "write", path.Join(dir, d), err)
		}
	}
	return nil
}

// countingReader counts what was read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// unpackEntry writes one archive entry as base in the directory pfd.
func unpackEntry(tr *tar.Reader, h *tar.Header, pfd int, base, name string, dirModes map[string]uint32) error {
	mode := uint32(h.Mode & 0o777)
	switch h.Typeflag {
	case tar.TypeDir:
		err := unix.Mkdirat(pfd, base, 0o700)
		if errors.Is(err, unix.EEXIST) {
			var st unix.Stat_t
			if unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
				return fmt.Errorf("%w: %s appears twice", ErrArchive, name)
			}
			err = nil
		}
		if err == nil {
			dirModes[name] = mode
		}
		return err
	case tar.TypeReg:
		ffd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%w: %s appears twice", ErrArchive, name)
		}
		if err != nil {
			return err
		}
		fl := os.NewFile(uintptr(ffd), name)
		defer fl.Close()
		if _, err := io.Copy(fl, tr); err != nil {
			if errors.Is(err, unix.ENOSPC) {
				return newErr(ErrNoSpace, err, "not enough disk space available to write %s", name)
			}
			var pe *os.PathError
			if errors.As(err, &pe) {
				return err // writing failed
			}
			return fmt.Errorf("%w: %s: %v", ErrArchive, name, err) // the archive is cut
		}
		if err := fl.Chmod(os.FileMode(mode)); err != nil {
			return err
		}
		return fl.Close()
	case tar.TypeSymlink:
		if err := linkInside(name, h.Linkname); err != nil {
			return err
		}
		err := unix.Symlinkat(h.Linkname, pfd, base)
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%w: %s appears twice", ErrArchive, name)
		}
		return err
	}
	return fmt.Errorf("%w: %s: entries of type %q are not unpacked (only directories, files and symbolic links)", ErrArchive, name, h.Typeflag)
}

// entryName cleans an archive entry's name: relative, "/"-separated, and
// never out of its directory ("" for the directory itself).
func entryName(name string) (string, error) {
	if strings.IndexByte(name, 0) >= 0 || path.IsAbs(name) {
		return "", fmt.Errorf("%w: entry %q: absolute names are refused", ErrArchive, name)
	}
	c := path.Clean(name)
	if c == "." {
		return "", nil
	}
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%w: entry %q climbs out of the directory", ErrArchive, name)
	}
	return c, nil
}

// linkInside refuses a symlink at name whose target may lead out of the
// tree, as the kernel resolves it. Lexical cleaning is not enough: the
// kernel takes "L/.." as the parent of what L points to, not as ".", so
// "L/../.." leads out when L is a link to the top, whatever path.Clean
// says. The target is therefore read as written: its ".." must all come
// first, and be no more than the directories above the link (the link's
// directory is one the archive made, never a link: openParent), so they
// go up real directories that stay inside; the names after them only go
// down, each through a directory or through a link that obeys this rule
// too. So every link an archive makes resolves inside the tree, in any
// order of entries, and whatever later uploads replace (a link placed
// by sandbox code itself is that code's own business).
func linkInside(name, target string) error {
	if target == "" || path.IsAbs(target) {
		return fmt.Errorf("%w: link %s -> %q: absolute targets are refused", ErrArchive, name, target)
	}
	if len(target) >= unix.PathMax || strings.IndexByte(target, 0) >= 0 {
		return fmt.Errorf("%w: link %s: a target must be shorter than %d bytes and hold no NUL byte", ErrArchive, name, unix.PathMax)
	}
	up, named := 0, false
	for c := range strings.SplitSeq(target, "/") {
		switch {
		case c == "" || c == ".":
		case c != "..":
			named = true
		case named:
			return fmt.Errorf(`%w: link %s -> %q: ".." after a name is refused: the kernel goes up from wherever that name leads, which through a link can be outside the directory; write the target with its ".." first, such as "../x"`, ErrArchive, name, target)
		default:
			up++
		}
	}
	if up > strings.Count(name, "/") {
		return fmt.Errorf("%w: link %s -> %q points out of the directory", ErrArchive, name, target)
	}
	return nil
}

// openParent opens the directory rel below sfd without following links
// (each component must be a directory the archive made, or sfd itself for
// ""). The caller closes it unless rel is "".
func openParent(sfd int, rel string) (int, error) {
	if rel == "" {
		return sfd, nil
	}
	fd := sfd
	for _, c := range strings.Split(rel, "/") {
		nfd, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if fd != sfd {
			unix.Close(fd)
		}
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
				return -1, fmt.Errorf("%w: %s/ is not a directory of the archive (list a directory before its entries)", ErrArchive, rel)
			}
			return -1, err
		}
		fd = nfd
	}
	return fd, nil
}

// mergeInto moves every entry of the staging directory sfd into the
// directory dfd: a file or link replaces what is there (not a directory); a
// directory is renamed in if nothing is there, else merged into the one
// there. With check it moves nothing and only finds what it would refuse
// (a file or link over a directory, a directory over anything else), with
// the same errors: run so first, a refusal leaves dir as it was.
func mergeInto(user, dir string, sfd, dfd int, rel string, check bool) error {
	names, err := readNames(sfd)
	if err != nil {
		return osErr(user, "write", dir, err)
	}
	for _, name := range names {
		full := path.Join(dir, rel, name)
		var st unix.Stat_t
		if err := unix.Fstatat(sfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return osErr(user, "write", full, err)
		}
		var there unix.Stat_t
		exists := unix.Fstatat(dfd, name, &there, unix.AT_SYMLINK_NOFOLLOW) == nil
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		thereDir := exists && there.Mode&unix.S_IFMT == unix.S_IFDIR
		switch {
		case isDir && thereDir:
			csfd, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return osErr(user, "write", full, err)
			}
			cdfd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				unix.Close(csfd)
				return osErr(user, "write", full, err)
			}
			err = mergeInto(user, dir, csfd, cdfd, path.Join(rel, name), check)
			if err == nil && !check {
				// Through the descriptor: the name may be a link by now.
				if err = unix.Fchmod(cdfd, st.Mode&0o7777); err != nil {
					err = osErr(user, "write", full, err)
				}
			}
			unix.Close(csfd)
			unix.Close(cdfd)
			if err != nil {
				return err
			}
		case thereDir:
			return newErr(ErrExists, nil, "cannot replace the directory %s with a file", full)
		case isDir && exists:
			// As the rename would fail.
			return osErr(user, "write", full, &os.PathError{Op: "rename", Path: full, Err: unix.ENOTDIR})
		case !check:
			if err := unix.Renameat(sfd, name, dfd, name); err != nil {
				return osErr(user, "write", full, &os.PathError{Op: "rename", Path: full, Err: err})
			}
		}
	}
	return nil
}

// readNames lists the directory open as fd, leaving fd open (the caller
// owns it: an os.File made from it would close it when collected).
func readNames(fd int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	// The dup shares fd's offset: list from the start, however often.
	if _, err := unix.Seek(dup, 0, io.SeekStart); err != nil {
		unix.Close(dup)
		return nil, err
	}
	d := os.NewFile(uintptr(dup), "dir")
	defer d.Close()
	return d.Readdirnames(-1)
}

// removeAllAt removes name below dfd and everything in it, without
// following links.
func removeAllAt(dfd int, name string) {
	if err := unix.Unlinkat(dfd, name, 0); err == nil || errors.Is(err, unix.ENOENT) {
		return
	}
	cfd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	d := os.NewFile(uintptr(cfd), name)
	names, _ := d.Readdirnames(-1)
	for _, n := range names {
		removeAllAt(cfd, n)
	}
	d.Close()
	_ = unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR)
}
