package filesystem

import (
	"errors"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/identity"
)

// The two modes (Options.StrictUsers).
//
// Strict: every operation runs in identity.User.DoStrict, with exactly the
// rights the user has in a shell: no capability is effective, so a user
// cannot read another user's /proc/PID/maps, nor anything else a shell as
// that user could not. The one place the kernel lets the thread further,
// envd's own /proc, every read of a user but root reaches through a
// resolver that refuses it (ownproc.go).
//
// Default, upstream's visible behaviour:
//   - reads (Stat, ListDir, Open, Watch) run as envd, root: upstream reads
//     any file. What is read goes to the API caller, who holds the access
//     token and may name any user, root included, anyway; code running in
//     the sandbox never sees it.
//   - writes (MakeDir, Create and Commit, Move, Remove) run as the user
//     (identity.User.Do: the filesystem capabilities go with the
//     filesystem uid). Where that fails only because the user may not
//     create a missing parent directory, or a new file, that upstream
//     would create as root and give to the user, envd creates exactly that
//     as root (createDirs, createTemp), and nothing else: root never
//     overwrites, moves, removes or chmods an existing entry for a user,
//     and never follows a symlink. A deliberate difference from upstream,
//     which would also overwrite a root-owned file and give it to the user.
//     Root creates only in a directory only root can change, reached from /
//     through names only root can change (createDirs): elsewhere the user
//     could have swapped in the directory root writes to. So a user's write
//     below a directory someone else may write (another user's, or a
//     world-writable one without the sticky bit) gets the user's own error,
//     where upstream would write as root.

// read runs fn for a read as u: DoStrict in strict mode, else as envd.
func (f *Files) read(u *identity.User, fn func() error) error {
	if f.opts.StrictUsers {
		return u.DoStrict(fn)
	}
	// Default mode: as root, as upstream (see above). The data goes to
	// the API caller, who holds the token.
	return fn()
}

// write runs fn for a write as u: DoStrict in strict mode, else Do.
func (f *Files) write(u *identity.User, fn func() error) error {
	if f.opts.StrictUsers {
		return u.DoStrict(fn)
	}
	return u.Do(fn)
}

// rootMayCreate tells whether a write that failed with err may be helped by
// root creating what is missing: default mode, and permission was the only
// problem.
func (f *Files) rootMayCreate(err error) bool {
	return !f.opts.StrictUsers && errors.Is(err, ErrPermission)
}

// rootOnly tells whether only root can change the directory fd: it belongs
// to root and neither its group nor others may write it (an ACL granting
// anyone write shows in the group bits). Only there does root create
// entries for a user: anywhere else sandbox code could swap what root just
// made, between its creation and its chown, for something of its choice.
func rootOnly(fd int) bool {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false
	}
	return st.Uid == 0 && st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Mode&0o022 == 0
}

// rootBound tells whether only root can change which directory the name
// of child in parent leads to: parent is rootOnly, or it is root's sticky
// directory (as /tmp) and child is root's too (there only the owners of the
// entry or of the directory may rename or remove it).
func rootBound(parent, child int) bool {
	if rootOnly(parent) {
		return true
	}
	var ps, cs unix.Stat_t
	if unix.Fstat(parent, &ps) != nil || unix.Fstat(child, &cs) != nil {
		return false
	}
	return ps.Uid == 0 && ps.Mode&unix.S_ISVTX != 0 && cs.Uid == 0
}

// openDirNoFollow opens name in the directory dirfd with O_PATH, only if it
// is a directory and not a symlink.
func openDirNoFollow(dirfd int, name string) (int, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		unix.Close(fd)
		return -1, unix.ENOTDIR
	}
	return fd, nil
}

// components splits the absolute, clean path p into its names.
func components(p string) []string {
	p = strings.Trim(filepath.Clean(p), "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// createDirs is default mode's fallback for directories: it walks from /
// to dir as root, one component at a time, never following a symlink (a
// symlink, or a file, on the way fails with ENOTDIR or ELOOP: the caller
// then gives the user's own error), and creates each missing directory
// (mkdirDir). It returns an O_PATH descriptor of dir; whether dir itself was
// created; and pinned: whether every name on the way is bound by root only
// (rootBound), so that no sandbox code can have chosen, by renaming
// directories, which directory dir is. Root creates only in a pinned,
// rootOnly directory. Run as envd, outside User.Do.
func (f *Files) createDirs(u *identity.User, dir string) (fd int, created, pinned bool, err error) {
	fd, err = unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, false, false, err
	}
	pinned = rootOnly(fd)
	for _, name := range components(dir) {
		next, err := openDirNoFollow(fd, name)
		created = false
		if errors.Is(err, unix.ENOENT) {
			next, err = f.mkdirDir(u, fd, name, pinned)
			created = err == nil
		}
		if err == nil {
			pinned = pinned && rootBound(fd, next)
		}
		unix.Close(fd)
		if err != nil {
			return -1, false, false, err
		}
		fd = next
	}
	return fd, created, pinned, nil
}

// mkdirDir creates the directory name in dirfd for u and opens it. In a
// directory only root can change (pinned: reached through names only root
// can change, and rootOnly), root makes it, opens it without following
// anything, and gives the open directory to u (fchown on the descriptor:
// nothing can be swapped in between there). Elsewhere u makes it, with u's
// own permissions (on the same descriptor), or it is not made.
func (f *Files) mkdirDir(u *identity.User, dirfd int, name string, pinned bool) (int, error) {
	if !pinned || !rootOnly(dirfd) {
		err := u.Do(func() error { return unix.Mkdirat(dirfd, name, 0o755) })
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, err
		}
		return openDirNoFollow(dirfd, name)
	}
	if err := unix.Mkdirat(dirfd, name, 0o755); err != nil {
		if errors.Is(err, unix.EEXIST) {
			// Made meanwhile, by root (only root can): leave it as it is.
			return openDirNoFollow(dirfd, name)
		}
		return -1, err
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Fchown(fd, int(u.UID), int(u.GID)); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
