package filesystem

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/identity"
)

// Open opens the regular file path for reading as u (Files.read: as root in
// default mode, as upstream). The caller reads and closes it; reading needs
// no further permission.
func (f *Files) Open(u *identity.User, path string) (*os.File, error) {
	if err := checkPath(path); err != nil {
		return nil, err
	}
	var file *os.File
	r := f.resolverFor(u)
	err := f.read(u, func() error {
		fl, fi, err := r.openFile(path)
		if err != nil {
			if kindOf(err) == ErrNotFound {
				return newErr(ErrNotFound, err, "path '%s' does not exist", path)
			}
			return osErr(u.Name, "read", path, err)
		}
		if fi.IsDir() {
			return newErr(ErrInvalid, nil, "path '%s' is a directory", path)
		}
		if !fi.Mode().IsRegular() {
			return newErr(ErrInvalid, nil, "path '%s' is not a regular file", path)
		}
		file = fl
		return nil
	})
	return file, err
}

// syntheticFS are the filesystems whose files the kernel makes up as they
// are read, by statfs magic.
var syntheticFS = map[int64]bool{
	unix.PROC_SUPER_MAGIC:    true,
	unix.SYSFS_MAGIC:         true,
	unix.DEBUGFS_MAGIC:       true,
	unix.TRACEFS_MAGIC:       true,
	unix.SECURITYFS_MAGIC:    true,
	unix.CGROUP_SUPER_MAGIC:  true,
	unix.CGROUP2_SUPER_MAGIC: true,
}

// SizeUnknown tells whether the size stat gives for file is not its length:
// so for procfs, sysfs and the like, whose files the kernel makes up as they
// are read (/proc/self/status has size 0, a sysfs attribute 4096), and which
// may not seek to their end. Read such a file to its end to know its length.
func SizeUnknown(file *os.File) bool {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(file.Fd()), &st); err != nil {
		return false
	}
	return syntheticFS[int64(st.Type)]
}

// tempPrefix starts the name of every upload's temporary file. Watchers hide
// files named so: an upload shows as its target being created and written.
const tempPrefix = ".envd-upload-"

// IsTemp tells whether name (a path or a base name) is an upload's
// temporary file.
func IsTemp(name string) bool {
	return strings.HasPrefix(filepath.Base(name), tempPrefix)
}

// Upload is a file being written. The content goes to a temporary file
// beside the target, created as the user; Commit renames it over the target,
// so a reader never sees a partial file, and Abort (or a failed write) leaves
// the target as it was and no temporary file behind.
//
// The temporary file is named, renamed and removed only through the
// descriptor of the directory it was made in (dir), never through a path:
// sandbox code swapping a directory of the path for a symlink mid-upload
// changes nothing of what envd renames or removes. Both are done with the
// credentials that created it: the user's, or, for a new file root made in
// a directory only root can change (default mode, createTemp), root's.
type Upload struct {
	f       *Files
	u       *identity.User
	file    *os.File
	dir     int    // descriptor of the directory holding tmp and the target
	tmp     string // base name of the temporary file in dir
	name    string // base name of the target in dir
	target  string // the target's path, for messages
	byRoot  bool   // root made tmp: it renames it, never over an existing file but user's own (replace)
	replace bool   // byRoot, replacing a regular file user owns
	meta    bool   // metadata was stored
	werr    error
	settled bool
}

// tempName is a fresh name for an upload's temporary file.
func tempName() string {
	var rnd [8]byte
	rand.Read(rnd[:])
	return tempPrefix + hex.EncodeToString(rnd[:])
}

// tempFlags open a new temporary file: made here (O_EXCL), never through a
// symlink.
const tempFlags = unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_NOCTTY | unix.O_CLOEXEC

// Create starts an upload to path as u: missing parents are created, a
// directory at path is refused, a file there must be writable by u (its
// permission bits are kept), and a symlink there is written through. md is
// stored as metadata (validate it first with ValidateMetadata).
//
// In default mode, when u may not create the file or a missing parent, a
// new file (and its missing parents) is created by root for u where only
// root can change the directory (modes.go); an existing file u may not
// write is refused, where upstream would overwrite it as root.
func (f *Files) Create(u *identity.User, path string, md map[string]string) (*Upload, error) {
	if err := checkPath(path); err != nil {
		return nil, err
	}
	up := &Upload{f: f, u: u, target: path, dir: -1}
	err := f.write(u, func() error {
		if err := up.prepare(path); err != nil {
			return err
		}
		return up.setMetadata(md)
	})
	if err != nil && f.rootMayHelp(err) && up.createTemp(path) {
		err = up.as(func() error { return up.setMetadata(md) })
	}
	if err != nil {
		up.discard()
		return nil, err
	}
	return up, nil
}

// setMetadata stores md on the temporary file, through its descriptor.
func (up *Upload) setMetadata(md map[string]string) error {
	if len(md) == 0 {
		return nil
	}
	ok, err := writeMetadata(int(up.file.Fd()), md)
	if err != nil {
		return osErr(up.u.Name, "set metadata of", up.target, err)
	}
	up.meta = ok
	return nil
}

// prepare creates the temporary file as the user (Files.write).
func (up *Upload) prepare(path string) error {
	u := up.u
	fi, err := os.Lstat(path)
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		real, rerr := filepath.EvalSymlinks(path)
		switch {
		case rerr == nil:
			up.target = real
			fi, err = os.Lstat(real)
		case kindOf(rerr) != ErrNotFound:
			// The user may not reach the target (or the links loop):
			// refused, as writing through the link would be; never
			// replace the link itself.
			return osErr(u.Name, "write", path, rerr)
		}
	}
	perm := uint32(0o666)
	keep := false
	switch {
	case err == nil && fi.IsDir():
		return newErr(ErrInvalid, nil, "path is a directory: %s", path)
	case err == nil && fi.Mode().IsRegular():
		// Replacing needs only the directory's write permission; ask
		// for the file's too, as writing it in place would.
		fd, err := unix.Open(up.target, unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
		if err != nil {
			return osErr(u.Name, "write", path, &fs.PathError{Op: "open", Path: path, Err: err})
		}
		unix.Close(fd)
		perm, keep = uint32(fi.Mode().Perm()), true
	case err == nil && fi.Mode()&fs.ModeSymlink == 0:
		return newErr(ErrInvalid, nil, "path %s is not a regular file", path)
	case err != nil && kindOf(err) != ErrNotFound && !errors.Is(err, syscall.ENOTDIR):
		return osErr(u.Name, "write", path, err)
	default:
		if err := mkdirAll(u.Name, filepath.Dir(up.target)); err != nil {
			return err
		}
	}
	dir := filepath.Dir(up.target)
	up.dir, err = unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return osErr(u.Name, "write", path, &fs.PathError{Op: "open", Path: dir, Err: err})
	}
	up.name = filepath.Base(up.target)
	tmp := tempName()
	fd, err := unix.Openat(up.dir, tmp, tempFlags, perm)
	if err != nil {
		return osErr(u.Name, "write", path, &fs.PathError{Op: "open", Path: filepath.Join(dir, tmp), Err: err})
	}
	up.tmp = tmp // ours: only now may discard remove it
	up.file = os.NewFile(uintptr(fd), filepath.Join(dir, tmp))
	if keep {
		// The umask applied at creation; the replaced file's bits win.
		if err := up.file.Chmod(fs.FileMode(perm)); err != nil {
			return osErr(u.Name, "write", path, err)
		}
	}
	return nil
}

// createTemp is default mode's fallback for a new file the user may not
// create (modes.go): as root, it walks to the target's directory creating
// what is missing (createDirs), then, only when no entry is at the target,
// makes the temporary file there, as root in a directory only root can
// change, reached through names only root can change (O_EXCL, O_NOFOLLOW,
// then given to u by fchown before anything is written), else as u through
// the same descriptor. It tells whether the
// temporary file is ready; when not, the caller gives the user's own error.
func (up *Upload) createTemp(path string) bool {
	up.discard()
	up.target = path
	dir, _, pinned, err := up.f.createDirs(up.u, filepath.Dir(path))
	if err != nil {
		return false
	}
	up.dir = dir
	up.name = filepath.Base(path)
	var st unix.Stat_t
	replace := false
	switch err := unix.Fstatat(dir, up.name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case errors.Is(err, unix.ENOENT):
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Uid == up.u.UID && pinned && rootOnly(dir):
		// user's own file, in a directory only root can change: as
		// upstream, it is overwritten for user (who may write it).
		replace = true
	default:
		return false // another entry is there (or cannot be known): root overwrites nothing
	}
	tmp := tempName()
	var fd int
	if pinned && rootOnly(dir) {
		perm := uint32(0o666)
		if replace {
			perm = st.Mode & 0o777
		}
		fd, err = unix.Openat(dir, tmp, tempFlags, perm)
		if err != nil {
			return false
		}
		up.tmp, up.byRoot, up.replace = tmp, true, replace
		if err := unix.Fchown(fd, int(up.u.UID), int(up.u.GID)); err != nil {
			unix.Close(fd)
			return false // the caller's discard removes it
		}
		if replace {
			// The umask applied at creation; the replaced file's bits win.
			if err := unix.Fchmod(fd, perm); err != nil {
				unix.Close(fd)
				return false
			}
		}
	} else {
		err = up.u.Do(func() error {
			var err error
			fd, err = unix.Openat(dir, tmp, tempFlags, 0o666)
			return err
		})
		if err != nil {
			return false
		}
		up.tmp = tmp
	}
	up.file = os.NewFile(uintptr(fd), filepath.Join(filepath.Dir(path), tmp))
	return true
}

// Write appends p to the upload. A failure (a full disk) is also kept for
// Err, so a caller copying with io.Copy can tell it from a read failure.
func (up *Upload) Write(p []byte) (int, error) {
	if up.werr != nil {
		return 0, up.werr
	}
	n, err := up.file.Write(p)
	if err != nil {
		up.werr = osErr(up.u.Name, "write", up.target, err)
		return n, up.werr
	}
	return n, nil
}

// Err is the first write failure, nil if none.
func (up *Upload) Err() error { return up.werr }

// MetadataStored tells whether the metadata given to Create was stored
// (false when there was none or the filesystem cannot store it).
func (up *Upload) MetadataStored() bool { return up.meta }

// Commit makes the upload the target's content. On failure the target is
// unchanged and the temporary file is gone.
func (up *Upload) Commit() error {
	if up.settled {
		return newErr(ErrClosed, nil, "upload to %s already finished", up.target)
	}
	if up.werr != nil {
		up.Abort()
		return up.werr
	}
	up.settled = true
	var st unix.Stat_t
	statErr := unix.Fstat(int(up.file.Fd()), &st)
	if err := up.file.Close(); err != nil {
		up.file = nil
		up.discard()
		return osErr(up.u.Name, "write", up.target, err)
	}
	up.file = nil
	if statErr == nil {
		// Before the rename, so a watcher that sees the target appear
		// already knows it was written.
		up.f.commits.add(fileID{dev: st.Dev, ino: st.Ino}, up.target)
	}
	err := up.as(func() error {
		var err error
		if up.byRoot && !up.replace {
			// Root made a new file: it never replaces one that
			// appeared meanwhile.
			err = unix.Renameat2(up.dir, up.tmp, up.dir, up.name, unix.RENAME_NOREPLACE)
		} else {
			err = unix.Renameat(up.dir, up.tmp, up.dir, up.name)
		}
		if err != nil {
			return osErr(up.u.Name, "write", up.target, &fs.PathError{Op: "rename", Path: up.target, Err: err})
		}
		return nil
	})
	if err != nil {
		up.discard()
		return err
	}
	up.tmp = "" // it is the target now
	up.discard()
	return nil
}

// as runs fn with the credentials that made the temporary file.
func (up *Upload) as(fn func() error) error {
	if up.byRoot {
		return fn()
	}
	return up.f.write(up.u, fn)
}

// Abort drops the upload: the target keeps its content. It is safe to call
// after Commit, and more than once.
func (up *Upload) Abort() {
	if up.settled {
		return
	}
	up.settled = true
	up.discard()
}

// discard closes what the upload holds and removes its temporary file,
// through the directory's descriptor and with the credentials that made it.
func (up *Upload) discard() {
	if up.file != nil {
		up.file.Close()
		up.file = nil
	}
	if up.dir >= 0 && up.tmp != "" {
		err := up.as(func() error { return unix.Unlinkat(up.dir, up.tmp, 0) })
		if err != nil && !errors.Is(err, unix.ENOENT) {
			up.f.log.Warn("cannot remove an upload's temporary file", "dir", filepath.Dir(up.target), "name", up.tmp, "error", err)
		}
	}
	up.tmp = ""
	if up.dir >= 0 {
		unix.Close(up.dir)
		up.dir = -1
	}
	up.byRoot, up.replace = false, false
}

// fileID names an inode.
type fileID struct{ dev, ino uint64 }

// commitNotes remembers, for a while, the files uploads have just put in
// place (by inode, and by path for a file gone by the time a watcher looks),
// so a watcher reports an upload as its target being created and written
// rather than as a temporary file renamed.
type commitNotes struct {
	mu     sync.Mutex
	byID   map[fileID]note      // guarded by mu
	byPath map[string]time.Time // guarded by mu
}

type note struct {
	at   time.Time
	base string // the target's name: a file moved since is not reported written
}

const (
	commitNoteTTL = 30 * time.Second
	maxCommitNote = 4096
)

func newCommitNotes() *commitNotes {
	return &commitNotes{byID: map[fileID]note{}, byPath: map[string]time.Time{}}
}

func (c *commitNotes) add(id fileID, path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if len(c.byID) >= maxCommitNote {
		prune(c.byID, func(n note) time.Time { return n.at }, now)
		prune(c.byPath, func(t time.Time) time.Time { return t }, now)
	}
	c.byID[id] = note{at: now, base: filepath.Base(path)}
	c.byPath[path] = now
}

// prune forgets expired notes, and the oldest ones too if a burst of uploads
// filled the map.
func prune[K comparable, V any](m map[K]V, at func(V) time.Time, now time.Time) {
	for k, v := range m {
		if now.Sub(at(v)) > commitNoteTTL {
			delete(m, k)
		}
	}
	for k := range m {
		if len(m) < maxCommitNote/2 {
			break
		}
		delete(m, k)
	}
}

// has tells whether the file id, now at path, was just put there by an
// upload.
func (c *commitNotes) has(id fileID, path string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.byID[id]
	return ok && n.base == filepath.Base(path) && time.Since(n.at) <= commitNoteTTL
}

func (c *commitNotes) hasPath(path string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.byPath[path]
	return ok && time.Since(t) <= commitNoteTTL
}

func idOf(fi fs.FileInfo) (fileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{dev: st.Dev, ino: st.Ino}, true
}
