package filesystem

import (
	"errors"
	"os"
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
//     as root (createDirs, createTemp). Where it fails only because the
//     user may not write the directory holding the user's own entry, root
//     replaces (createTemp), removes (removeForUser) or renames
//     (moveForUser) that entry, through the directory's descriptor. That is
//     all: root never acts on an entry that is not the user's, never
//     chmods one, and never follows a symlink. A deliberate difference from
//     upstream, which would also overwrite a root-owned file and give it to
//     the user. Root acts only in a directory only root can change, reached
//     from / through names only root can change (createDirs, pinnedDir):
//     elsewhere the user could have swapped in the directory, or the entry,
//     root acts on. So a user's write below a directory someone else may
//     write (another user's, or a world-writable one without the sticky
//     bit) gets the user's own error, where upstream would write as root.

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

// rootMayHelp tells whether a write that failed with err may be helped by
// root (createDirs, createTemp, removeForUser, moveForUser): default mode,
// and permission was the problem. Each helper checks what else the user
// needs.
func (f *Files) rootMayHelp(err error) bool {
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
	return f.walkDirs(u, dir, true)
}

// pinnedDir walks from / to dir as root, as createDirs does, creating
// nothing. It returns an O_PATH descriptor of dir and whether only root can
// change dir and the names that lead to it: dir is rootOnly and was reached
// through names only root can change. Run as envd, outside User.Do.
func (f *Files) pinnedDir(dir string) (fd int, rootDir bool, err error) {
	fd, _, pinned, err := f.walkDirs(nil, dir, false)
	if err != nil {
		return -1, false, err
	}
	return fd, pinned && rootOnly(fd), nil
}

// walkDirs is createDirs, and pinnedDir when create is false.
func (f *Files) walkDirs(u *identity.User, dir string, create bool) (fd int, created, pinned bool, err error) {
	fd, err = unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, false, false, err
	}
	pinned = rootOnly(fd)
	for _, name := range components(dir) {
		next, err := openDirNoFollow(fd, name)
		created = false
		if create && errors.Is(err, unix.ENOENT) {
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

// isEntryName tells whether name, the last name of a clean absolute path,
// names an entry in its directory (not so for "/").
func isEntryName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.Contains(name, "/")
}

// usersEntry stats name in dirfd without following it, and tells whether it
// is a regular file, a symlink or a directory that u owns: the only entries
// root removes or renames for u.
func usersEntry(u *identity.User, dirfd int, name string) (unix.Stat_t, bool) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return st, false
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG, unix.S_IFLNK, unix.S_IFDIR:
		return st, st.Uid == u.UID
	}
	return st, false
}

// userMay tells whether u, with its own rights, may access name in dirfd
// (the directory itself when name is "") for mode (unix.W_OK and so on),
// without following a final symlink. Only the kernel's faccessat2 answers:
// x/sys's emulation, were it missing, would check envd's effective uid, so
// any failure counts as no.
func userMay(u *identity.User, dirfd int, name string, mode uint32) bool {
	flags := unix.AT_EACCESS | unix.AT_SYMLINK_NOFOLLOW
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	return u.Do(func() error { return unix.Faccessat2(dirfd, name, mode, flags) }) == nil
}

// userReaches tells whether u, with its own rights, may reach the directory
// dir by its path and search it: so a failure was not that, and root does
// not help a user to a directory it may not enter.
func userReaches(u *identity.User, dir string) bool {
	return userMay(u, unix.AT_FDCWD, dir, unix.X_OK)
}

// sameFile tells whether the descriptors a and b are the same inode.
func sameFile(a, b int) bool {
	var sa, sb unix.Stat_t
	if unix.Fstat(a, &sa) != nil || unix.Fstat(b, &sb) != nil {
		return false
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// removeForUser is default mode's fallback for a removal of path that failed
// as u with userErr, a permission error. When the directory holding path is
// one only root can change, reached through names only root can change
// (pinnedDir: nothing there can be swapped but by root), and u may reach it
// with its own rights, root removes the entry itself, if it is u's (a
// regular file, a symlink or a directory: usersEntry), with unlinkat through
// the directory's descriptor, which follows nothing. A directory's contents
// were removed, or not, by u's own attempt: root removes only an empty
// directory. In every other case u gets userErr.
func (f *Files) removeForUser(u *identity.User, path string, userErr error) error {
	path = filepath.Clean(path)
	name := filepath.Base(path)
	if !isEntryName(name) {
		return userErr
	}
	dir, rootDir, err := f.pinnedDir(filepath.Dir(path))
	if err != nil {
		return userErr
	}
	defer unix.Close(dir)
	if !rootDir || !userReaches(u, filepath.Dir(path)) {
		return userErr
	}
	st, ok := usersEntry(u, dir, name)
	if !ok {
		return userErr
	}
	flags := 0
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(dir, name, flags); err != nil && !errors.Is(err, unix.ENOENT) {
		return userErr // a directory still holding what u could not remove
	}
	return nil
}

// moveForUser is default mode's fallback for a rename of src to dst that
// failed as u with userErr, a permission error. Root renames, through the
// directories' descriptors, an entry of u's (usersEntry) that sits in a
// directory only root can change, reached through names only root can
// change (pinnedDir), when u, with its own rights, may do the rest: reach
// both directories, write dst's if it is not root's, and, moving a
// directory to another parent, write that directory (its ".." changes).
// It never replaces an existing entry (RENAME_NOREPLACE) but a regular
// file u owns in a directory only root can change, as an upload replaces
// it (createTemp). In every other case u gets userErr: notably a move
// into such a directory from one u may write, where sandbox code could
// swap the entry root checked for another (not u's) before the rename.
func (f *Files) moveForUser(u *identity.User, src, dst string, userErr error) error {
	src, dst = filepath.Clean(src), filepath.Clean(dst)
	sname, dname := filepath.Base(src), filepath.Base(dst)
	if !isEntryName(sname) || !isEntryName(dname) {
		return userErr
	}
	sdir, srcRoot, err := f.pinnedDir(filepath.Dir(src))
	if err != nil {
		return userErr
	}
	defer unix.Close(sdir)
	ddir, dstRoot, err := f.pinnedDir(filepath.Dir(dst))
	if err != nil {
		return userErr
	}
	defer unix.Close(ddir)
	const writable = unix.W_OK | unix.X_OK
	switch {
	case !srcRoot,
		!userReaches(u, filepath.Dir(src)) || !userReaches(u, filepath.Dir(dst)),
		!dstRoot && !userMay(u, ddir, "", writable):
		return userErr
	}
	st, ok := usersEntry(u, sdir, sname)
	if !ok {
		return userErr
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR && !sameFile(sdir, ddir) && !userMay(u, sdir, sname, unix.W_OK) {
		return userErr
	}
	flags := uint(unix.RENAME_NOREPLACE)
	var dt unix.Stat_t
	switch err := unix.Fstatat(ddir, dname, &dt, unix.AT_SYMLINK_NOFOLLOW); {
	case errors.Is(err, unix.ENOENT):
	case err == nil && dstRoot && dt.Mode&unix.S_IFMT == unix.S_IFREG && dt.Uid == u.UID:
		flags = 0 // u's own file, where only root could have put it
	default:
		return userErr // another entry is there: root replaces nothing
	}
	if err := unix.Renameat2(sdir, sname, ddir, dname, flags); err != nil {
		return moveErr(u, src, dst, &os.LinkError{Op: "rename", Old: src, New: dst, Err: err})
	}
	return nil
}
