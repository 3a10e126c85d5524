package jupyter

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/atfile"
	"github.com/envd-dev/envd/internal/staledir"
)

// The runtime directory, and who may change what in it:
//
//	<dir>/           0755 (0700 without RunAs), envd's account; locked (flock) while in use
//	<dir>/config/    0755, envd's account: JUPYTER_CONFIG_DIR
//	    jupyter_server_config.py    0644
//	    jupyter_server_config.json  the token: 0640 group RunAs's primary group (0600 without RunAs)
//	    migrated                    empty; tells Jupyter it has nothing to migrate (it would write it)
//	<dir>/runtime/   0700, RunAs: JUPYTER_RUNTIME_DIR (connection files, cookie secret)
//
// The server and its kernels run as RunAs and may run anything: they can
// change runtime/ and nothing else here. envd, root, never follows a path
// they could change: it writes config/ only (files created O_EXCL|O_NOFOLLOW
// relative to the directory's descriptor, owner and mode set on the open
// file, then renamed into place), never writes into runtime/, and removes
// runtime/ with removeAt, which neither follows a link nor resolves a path.
//
// The token file is readable by RunAs's primary group, so by every account
// of that group. The default user's group is its own private group; a RunAs
// whose primary group has other members shares the token with them.

// tempPrefix starts the name of a runtime directory of ours in the
// temporary directory: tempPrefix + pid + "-" + random.
const tempPrefix = "envd-jupyter-"

// runtimeDirs are the runtime directory's open descriptors.
type runtimeDirs struct {
	top    *os.File // the directory itself, flocked if it is a temp dir of ours
	config *os.File
}

func (d *runtimeDirs) close() {
	if d.config != nil {
		_ = d.config.Close()
	}
	if d.top != nil {
		_ = d.top.Close()
	}
}

// prepareDir creates the runtime directory tree laid out above. A
// RuntimeDir given in Options must be a directory (not a link to one) of
// envd's account that no one else can write; it is made 0755 so that RunAs
// can reach the server's files, and whatever config/ and runtime/ held is
// replaced.
func (s *Supervisor) prepareDir() error {
	dir := s.opts.RuntimeDir
	var top *os.File
	if dir == "" {
		reclaimStale(s.log)
		// The descriptor Create returns holds the directory's lock until
		// Stop: a later envd removes the directory only once the lock is
		// free (this process is gone); see reclaimStale.
		d, lock, err := staledir.Create(tempPrefix)
		if err != nil {
			return fmt.Errorf("jupyter: create runtime dir: %w", err)
		}
		dir, top, s.ownsDir = d, lock, true
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("jupyter: create runtime dir: %w", err)
	}
	s.runtimeDir = dir
	if top == nil {
		var err error
		if top, err = openDir(unix.AT_FDCWD, dir); err != nil {
			return fmt.Errorf("jupyter: open runtime dir: %w", err)
		}
	}
	if err := checkPrivate(top); err != nil {
		_ = top.Close() // and Stop leaves it alone
		return fmt.Errorf("jupyter: runtime dir %s: %w", dir, err)
	}
	s.dirs.top = top
	topMode, uid, gid := uint32(0o700), os.Geteuid(), os.Getegid()
	if u := s.opts.RunAs; u != nil {
		topMode, uid, gid = 0o755, int(u.UID), int(u.GID)
	}
	if err := unix.Fchmod(int(top.Fd()), topMode); err != nil {
		return fmt.Errorf("jupyter: runtime dir: %w", err)
	}
	cfg, err := makeDirAt(top, "config", 0o755, -1, -1)
	if err != nil {
		return err
	}
	s.dirs.config = cfg
	rt, err := makeDirAt(top, "runtime", 0o700, uid, gid)
	if err != nil {
		return err
	}
	_ = rt.Close()
	// Jupyter migrates IPython 3 config unless this file exists, and then
	// writes it: it cannot, in a directory of ours.
	return writeFileAt(cfg, "migrated", nil, 0o644, -1)
}

// removeDir removes what prepareDir made: all of a temp dir of ours; of a
// caller's, runtime/ (the kernels' connection keys) and the token.
func (s *Supervisor) removeDir() error {
	defer s.dirs.close()
	if s.dirs.top == nil {
		return nil
	}
	if !s.ownsDir {
		if s.dirs.config != nil {
			err := unix.Unlinkat(int(s.dirs.config.Fd()), "jupyter_server_config.json", 0)
			if err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("jupyter: remove token: %w", err)
			}
		}
		if err := removeAt(int(s.dirs.top.Fd()), "runtime"); err != nil {
			return fmt.Errorf("jupyter: remove runtime dir: %w", err)
		}
		return nil
	}
	for _, name := range []string{"config", "runtime"} {
		if err := removeAt(int(s.dirs.top.Fd()), name); err != nil {
			return fmt.Errorf("jupyter: remove runtime dir: %w", err)
		}
	}
	// Our root-owned, now empty directory in the sticky temp dir: only
	// envd's account can have replaced it.
	if err := os.Remove(s.runtimeDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("jupyter: remove runtime dir: %w", err)
	}
	return nil
}

// openDir and checkPrivate: see staledir.
var (
	openDir      = staledir.Open
	checkPrivate = staledir.CheckPrivate
)

// makeDirAt replaces whatever parent holds under name with a new empty
// directory of the given mode, owned by uid:gid (-1: envd's), and opens it.
// parent must be checkPrivate: no one but envd can get in between.
func makeDirAt(parent *os.File, name string, mode uint32, uid, gid int) (*os.File, error) {
	pfd := int(parent.Fd())
	if err := removeAt(pfd, name); err != nil {
		return nil, fmt.Errorf("jupyter: replace runtime dir %s: %w", name, err)
	}
	if err := unix.Mkdirat(pfd, name, 0o700); err != nil {
		return nil, fmt.Errorf("jupyter: create runtime dir %s: %w", name, err)
	}
	f, err := openDir(pfd, name)
	if err != nil {
		return nil, fmt.Errorf("jupyter: create runtime dir %s: %w", name, err)
	}
	if uid >= 0 {
		if err := unix.Fchown(int(f.Fd()), uid, gid); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("jupyter: chown runtime dir %s: %w", name, err)
		}
	}
	if err := unix.Fchmod(int(f.Fd()), mode); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("jupyter: chmod runtime dir %s: %w", name, err)
	}
	return f, nil
}

// writeFileAt makes dir/name hold data, atomically, never through a link
// (atfile.Replace), with group gid (-1: envd's) and mode. dir must be one
// only envd can write.
func writeFileAt(dir *os.File, name string, data []byte, mode uint32, gid int) error {
	if err := atfile.Replace(int(dir.Fd()), name, data, os.FileMode(mode), gid); err != nil {
		return fmt.Errorf("jupyter: write config %s: %w", name, err)
	}
	return nil
}

// removeAt removes name in the directory dirfd and, if it is a directory,
// everything under it. It works on descriptors only (openat with
// O_NOFOLLOW|O_DIRECTORY, unlinkat), so it never follows a link nor
// resolves a path that someone could change under it: it removes only
// entries of the tree it opened, which a user owning part of the tree can
// rename but not redirect.
func removeAt(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return &os.PathError{Op: "unlinkat", Path: name, Err: err}
	}
	d, err := openDir(dirfd, name)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	names, err := d.Readdirnames(-1)
	if err == nil {
		for _, n := range names {
			if err = removeAt(int(d.Fd()), n); err != nil {
				break
			}
		}
	}
	_ = d.Close()
	if err != nil {
		return fmt.Errorf("%s/%w", name, err)
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "rmdir", Path: name, Err: err}
	}
	return nil
}

// reclaimStale removes the runtime directories that envd processes killed
// before their Stop (SIGKILL, a crash) left behind (see staledir): emptied
// through the locked descriptor, then removed by name.
func reclaimStale(log *slog.Logger) {
	staledir.Reclaim(tempPrefix, func(tmpfd int, name string, d *os.File) error {
		for _, sub := range []string{"config", "runtime"} {
			if err := removeAt(int(d.Fd()), sub); err != nil {
				return err
			}
		}
		return unix.Unlinkat(tmpfd, name, unix.AT_REMOVEDIR)
	}, func(dir string, err error) {
		if err != nil {
			log.Warn("cannot remove a stale jupyter runtime dir", "dir", dir, "error", err)
			return
		}
		log.Debug("removed a stale jupyter runtime dir", "dir", dir)
	})
}
