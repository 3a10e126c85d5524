// Package filesystem is what envd does to files on behalf of a user:
// describe, list, create, move, remove, read and atomically write them, and
// watch directories for changes.
//
// Every operation takes the run-as user explicitly. What that user may do
// depends on the mode (Options.StrictUsers, modes.go): in strict mode,
// exactly what a shell as that user may do; by default, upstream's
// behaviour: reads of any file, writes as the user, and the missing parents
// and new files upstream would create as root created by root for the user,
// without ever following a path sandbox code can change. What a user
// creates belongs to them. Paths are absolute and already resolved
// (identity.User.Resolve); errors match one of the Err kinds of this
// package.
//
// This package knows nothing of Connect, HTTP or the handover's records:
// internal/filesystem/fsconnect adapts it to the filesystem.Filesystem
// procedures, internal/httpapi to /files, and internal/daemon converts its
// WatcherState to and from a live upgrade's record.
package filesystem

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/coder/quartz"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/identity"
)

// Options configures New. Every field may be left zero.
type Options struct {
	Logger *slog.Logger // zero: slog.Default()
	// WatchQueue is how many events a watcher holds for its reader before it
	// fails with ErrLagging. Zero: 16384.
	WatchQueue int
	// WatcherIdle is how long a polling watcher (CreateWatcher) lives without
	// being polled. Zero: 10 minutes.
	WatcherIdle time.Duration
	// MaxListEntries bounds one ListDir. Zero: 1,000,000.
	MaxListEntries int
	// MaxWatches bounds the watches envd holds at once: WatchDir streams
	// and polling watchers together. One more fails with ErrLimit. Each
	// can queue WatchQueue events for its reader. Zero: DefaultMaxWatches.
	MaxWatches int
	// MaxWatchedDirs bounds the directories all watches together watch: a
	// watch holds one, a recursive watch one per directory below its root.
	// A watch that would go over fails with ErrLimit, at its start or, for
	// a recursive watch whose tree grows, later. Zero: DefaultMaxWatchedDirs.
	MaxWatchedDirs int
	// Clock is the clock of polling watchers' idle time and of WatchDir
	// streams' keepalives. Zero: the real one.
	Clock quartz.Clock
	// StrictUsers gives every operation exactly the rights its user has in
	// a shell (identity.User.DoStrict). Zero: upstream's behaviour, reads
	// as root and writes as the user, with root creating missing parents
	// and new files for the user where only root can, and replacing,
	// renaming and removing the user's own entries there (modes.go).
	StrictUsers bool
}

// Default limits of watches: a few hundred watches cover any client's
// needs, and their memory stays bounded (envd holds about 200 bytes per
// watched directory, the kernel about 1 KiB per inotify watch).
const (
	DefaultMaxWatches     = 256
	DefaultMaxWatchedDirs = 65536
)

// Files performs filesystem operations as users. Close it to stop its
// watchers.
type Files struct {
	opts     Options
	log      *slog.Logger
	commits  *commitNotes
	hub      *hub
	watchers *registry
	limits   *watchLimits
}

// New returns a Files with no watcher yet.
func New(o Options) *Files {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.WatchQueue <= 0 {
		o.WatchQueue = 16384
	}
	if o.WatcherIdle <= 0 {
		o.WatcherIdle = 10 * time.Minute
	}
	if o.MaxListEntries <= 0 {
		o.MaxListEntries = 1_000_000
	}
	if o.MaxWatches <= 0 {
		o.MaxWatches = DefaultMaxWatches
	}
	if o.MaxWatchedDirs <= 0 {
		o.MaxWatchedDirs = DefaultMaxWatchedDirs
	}
	if o.Clock == nil {
		o.Clock = quartz.NewReal()
	}
	f := &Files{opts: o, log: o.Logger, commits: newCommitNotes()}
	f.hub = newHub(f.log)
	f.watchers = newRegistry(f, o.WatcherIdle, o.Clock)
	f.limits = &watchLimits{maxWatches: o.MaxWatches, maxDirs: o.MaxWatchedDirs}
	return f
}

// Clock is the clock of Options.Clock (the real one when it was left
// zero): the adapters pace WatchDir's keepalives with it.
func (f *Files) Clock() quartz.Clock { return f.opts.Clock }

// Close stops every watcher. Operations other than watching keep working.
func (f *Files) Close() error {
	f.watchers.close()
	return f.hub.close()
}

// checkPath refuses what no syscall can take.
func checkPath(p string) error {
	if strings.IndexByte(p, 0) >= 0 {
		return newErr(ErrInvalid, nil, "invalid path %q: it contains a NUL byte", p)
	}
	if !filepath.IsAbs(p) {
		return newErr(ErrInvalid, nil, "invalid path %q: not absolute", p)
	}
	return nil
}

// Stat describes path without following a final symlink.
func (f *Files) Stat(u *identity.User, path string) (Entry, error) {
	if err := checkPath(path); err != nil {
		return Entry{}, err
	}
	var e Entry
	r := f.resolverFor(u)
	err := f.read(u, func() error {
		var err error
		e, _, err = r.lstatEntry(path, newNameCache())
		if err != nil {
			if kindOf(err) == ErrNotFound {
				return notFound(path, err)
			}
			return osErr(u.Name, "access", path, err)
		}
		return nil
	})
	return e, err
}

// MakeDir creates path and its missing parents (mode 0755 less the umask),
// owned by u. It fails with ErrExists when path is a directory already.
func (f *Files) MakeDir(u *identity.User, path string) (Entry, error) {
	if err := checkPath(path); err != nil {
		return Entry{}, err
	}
	err := f.write(u, func() error {
		fi, err := os.Stat(path)
		switch {
		case err == nil && fi.IsDir():
			return newErr(ErrExists, nil, "directory already exists: %s", path)
		case err == nil:
			return newErr(ErrInvalid, nil, "path already exists but it is not a directory: %s", path)
		}
		return mkdirAll(u.Name, path)
	})
	if err != nil && f.rootMayHelp(err) {
		fd, created, _, ferr := f.createDirs(u, path)
		if ferr == nil {
			unix.Close(fd)
			err = nil
			if !created {
				err = newErr(ErrExists, nil, "directory already exists: %s", path)
			}
		}
	}
	if err != nil {
		return Entry{}, err
	}
	var e Entry
	r := f.resolverFor(u)
	err = f.read(u, func() error {
		var err error
		e, _, err = r.lstatEntry(path, newNameCache())
		if err != nil {
			return osErr(u.Name, "access", path, err)
		}
		return nil
	})
	return e, err
}

// mkdirAll creates dir and its missing parents. It runs as the user
// (Files.write).
func mkdirAll(userName, dir string) error {
	var missing []string
	for p := dir; ; {
		fi, err := os.Stat(p)
		if err == nil {
			if !fi.IsDir() {
				return newErr(ErrInvalid, nil, "cannot create directory %s: %s is a file, not a directory", dir, p)
			}
			break
		}
		if k := kindOf(err); k != ErrNotFound && !errors.Is(err, syscall.ENOTDIR) {
			return osErr(userName, "create directory", p, err)
		}
		missing = append(missing, p)
		parent := filepath.Dir(p)
		if parent == p {
			break
		}
		p = parent
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return osErr(userName, "create directory", missing[i], err)
		}
	}
	return nil
}

// Move renames src to dst, creating dst's missing parents; an existing file
// at dst is replaced. It returns the Entry of dst. In default mode, root
// renames u's own entry where u may not write a directory only root can
// change (moveForUser).
func (f *Files) Move(u *identity.User, src, dst string) (Entry, error) {
	if err := checkPath(src); err != nil {
		return Entry{}, err
	}
	if err := checkPath(dst); err != nil {
		return Entry{}, err
	}
	var parentErr bool // the failure was making dst's parents
	err := f.write(u, func() error {
		if _, err := os.Lstat(src); err != nil {
			if kindOf(err) == ErrNotFound {
				return notFound(src, err)
			}
			return osErr(u.Name, "access", src, err)
		}
		err := mkdirAll(u.Name, filepath.Dir(dst))
		parentErr = err != nil
		return err
	})
	if err != nil && parentErr && f.rootMayHelp(err) {
		// Only the parents: the move itself is the user's to make
		// (or, where the user may not, moveForUser's).
		if fd, _, _, ferr := f.createDirs(u, filepath.Dir(dst)); ferr == nil {
			unix.Close(fd)
			err = nil
		}
	}
	if err != nil {
		return Entry{}, err
	}
	err = f.write(u, func() error {
		if err := os.Rename(src, dst); err != nil {
			return moveErr(u, src, dst, err)
		}
		return nil
	})
	if err != nil && f.rootMayHelp(err) {
		// u may not write src's or dst's directory: root renames u's own
		// entry where only root can change that directory (modes.go).
		err = f.moveForUser(u, src, dst, err)
	}
	if err != nil {
		return Entry{}, err
	}
	var e Entry
	r := f.resolverFor(u)
	err = f.write(u, func() error {
		var err error
		e, _, err = r.lstatEntry(dst, newNameCache())
		if err != nil {
			return osErr(u.Name, "access", dst, err)
		}
		return nil
	})
	return e, err
}

// moveErr is the error of a failed rename of src to dst for u.
func moveErr(u *identity.User, src, dst string, err error) error {
	var le *os.LinkError
	cause := err
	if errors.As(err, &le) {
		cause = le.Err
	}
	switch kindOf(err) {
	case ErrNotFound:
		return newErr(ErrNotFound, err, "%v", err)
	case ErrPermission:
		return newErr(ErrPermission, err, "permission denied: user '%s' may not move %s to %s: %v", u.Name, src, dst, cause)
	case nil:
		return err
	default:
		if errors.Is(err, syscall.EXDEV) {
			return newErr(ErrInvalid, err, "cannot move %s to %s: they are on different filesystems", src, dst)
		}
		return newErr(kindOf(err), err, "cannot move %s to %s: %v", src, dst, cause)
	}
}

// ListDir lists the entries below dir, depth levels deep (0 counts as 1), in
// pre-order: each directory is followed by its children, siblings sorted by
// name. A symlink given as dir is followed; symlinks below it are not, so a
// link loop cannot make the walk go round. Entries that vanish during the
// walk are skipped, and so are the children of subdirectories u may not read.
func (f *Files) ListDir(u *identity.User, dir string, depth uint32) ([]Entry, error) {
	if err := checkPath(dir); err != nil {
		return nil, err
	}
	if depth == 0 {
		depth = 1
	}
	var out []Entry
	r := f.resolverFor(u)
	err := f.read(u, func() error {
		fi, err := r.stat(dir)
		if err != nil {
			switch kindOf(err) {
			case ErrNotFound:
				return notFound(dir, err)
			case ErrLoop:
				return newErr(ErrLoop, err, "path %s is a symlink loop: %v", dir, err)
			}
			return osErr(u.Name, "access", dir, err)
		}
		if !fi.IsDir() {
			return newErr(ErrInvalid, nil, "path is not a directory: %s", dir)
		}
		names := newNameCache()
		var walk func(d string, level uint32, root bool) error
		walk = func(d string, level uint32, root bool) error {
			des, err := r.readDir(d)
			if err != nil {
				if root {
					return osErr(u.Name, "list", d, err)
				}
				return nil // vanished or unreadable: listed, without children
			}
			for _, de := range des {
				p := filepath.Join(d, de.Name())
				e, fi, err := r.lstatEntry(p, names)
				if err != nil {
					continue // vanished, or envd's own /proc (ownproc.go)
				}
				if len(out) >= f.opts.MaxListEntries {
					return newErr(ErrInvalid, nil, "more than %d entries below %s: ask for a smaller depth", f.opts.MaxListEntries, dir)
				}
				out = append(out, e)
				if level < depth && fi.IsDir() {
					if err := walk(p, level+1, false); err != nil {
						return err
					}
				}
			}
			return nil
		}
		return walk(dir, 1, true)
	})
	return out, err
}

// Remove deletes path and, for a directory, everything below it. A missing
// path is not an error. In default mode, root removes u's own entry where
// u may not write a directory only root can change (removeForUser).
func (f *Files) Remove(u *identity.User, path string) error {
	if err := checkPath(path); err != nil {
		return err
	}
	if filepath.Clean(path) == "/" {
		return newErr(ErrInvalid, nil, "refusing to remove /")
	}
	// As the user in both modes; in default mode, where u may not write
	// the directory holding path, root removes u's own entry if only root
	// can change that directory (modes.go).
	err := f.write(u, func() error {
		if err := os.RemoveAll(path); err != nil {
			return osErr(u.Name, "remove", path, err)
		}
		return nil
	})
	if err != nil && f.rootMayHelp(err) {
		err = f.removeForUser(u, path, err)
	}
	return err
}
