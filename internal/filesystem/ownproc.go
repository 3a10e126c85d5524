package filesystem

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/identity"
)

// envd's own /proc, in strict mode.
//
// A thread of envd acting as a user (identity.User.DoStrict) has the
// user's rights everywhere but in one place: the kernel exempts a thread's
// own thread group from the access checks of /proc/PID, so that thread may
// read envd's memory map, list and follow envd's descriptors
// (/proc/PID/fd), or walk through envd's cwd and root links, whatever its
// ids. A shell of the user may do none of that. So, for every user but
// root in strict mode, every path an operation reads (Stat, ListDir, Open,
// WalkTree, Watch and the events it reports, Compose's sources) is reached
// through a resolver, which:
//
//   - opens the path with openat2 and RESOLVE_NO_MAGICLINKS: no /proc magic
//     link (fd/N, cwd, root, exe, map_files, ns) is followed on the way, a
//     user's own processes' included: a path through one is refused
//     (through envd's, it would reach files by envd's descriptors and
//     directories, past the permissions of the path that leads there);
//   - then judges what was opened, not the path: an object of a procfs
//     (fstatfs) that is, or is below, a /proc/PID or /proc/TID of a thread
//     of envd, or that is the /proc/self or /proc/thread-self link itself,
//     is refused. The object's directory is climbed with ".." to the
//     procfs's root; the entry of the root on the way is envd's when its
//     status says the Tgid the root's "self" link names. A file, not being
//     a directory, is judged by its directory (its path from
//     /proc/self/fd/N, checked to hold that very file);
//   - and does what the operation does (stat, list, read, follow a link,
//     read metadata) on that descriptor, never on the path again.
//
// Refused entries are left out of listings, archives and watches, as
// entries the user may not read are; an operation on one fails with
// ErrPermission. Root, and the default mode, where reads are root's
// (modes.go), do as before: the plain system calls on paths.

// procRootIno is the inode number of every procfs's root directory.
const procRootIno = 1

// resolver reaches the paths of one operation as its user: see above. The
// zero value, and any resolver whose guard is off, makes the plain system
// calls. Its methods run inside Files.read or Files.write, on the thread
// acting as the user. A resolver is not safe for concurrent use.
type resolver struct {
	user  string
	guard bool
	// What was learnt during the operation: the Tgid of envd in each
	// procfs (by st_dev; "" when envd is not in its pid namespace), and
	// where each procfs directory met (by dev and inode) is.
	selves map[uint64]string
	dirs   map[[2]uint64]procDir
}

// procDir is where a directory of a procfs is.
type procDir int

const (
	procRoot  procDir = iota // the procfs's root
	procEnvds                // envd's /proc/PID or /proc/TID, or below
	procOther                // elsewhere
)

// resolverFor is the resolver of an operation of u's.
func (f *Files) resolverFor(u *identity.User) *resolver {
	return &resolver{user: u.Name, guard: f.opts.StrictUsers && u.UID != 0}
}

// ownProcErr is the refusal of path, a name of envd's own /proc; cause is
// why envd could not tell, if it could not.
func (r *resolver) ownProcErr(path string, cause error) error {
	if cause != nil {
		return newErr(ErrPermission, cause, "permission denied: user '%s' may not read %s: envd cannot tell whether it is its own /proc (%v), which envd does not read for a user in strict mode", r.user, path, cause)
	}
	return newErr(ErrPermission, nil, "permission denied: user '%s' may not read %s: it is envd's own process (/proc/self, /proc/thread-self, /proc/%d), which envd does not read for a user in strict mode; read /proc/<pid> of a process of your own instead", r.user, path, os.Getpid())
}

// magicLinkErr is the refusal of a path that goes through a /proc magic
// link.
func (r *resolver) magicLinkErr(path string) error {
	return newErr(ErrPermission, nil, "permission denied: user '%s' may not read %s: it goes through a /proc link to a process's files (fd, cwd, root, exe, map_files, ns), which envd does not follow for a user in strict mode; name the file by its own path", r.user, path)
}

// open opens path for the operation with flags (O_PATH, or what to read it
// with), following a final symlink when follow says so: see the top of the
// file. The error is the raw errno, or one of this package's ErrPermission.
func (r *resolver) open(path string, flags int, follow bool) (int, error) {
	flags |= unix.O_CLOEXEC
	if !follow {
		flags |= unix.O_NOFOLLOW
	}
	if !r.guard {
		return unix.Open(path, flags, 0)
	}
	how := unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &how)
	switch {
	case errors.Is(err, unix.ENOSYS):
		// A kernel older than 5.6: magic links cannot be told apart.
		return -1, newErr(ErrPermission, err, "permission denied: user '%s' may not read %s: this kernel cannot open a path without following /proc links (openat2 is missing)", r.user, path)
	case errors.Is(err, unix.ELOOP):
		// A final symlink not to be followed (but for O_PATH), a loop,
		// or a magic link on the way: tell them apart with O_PATH,
		// which opens nothing for reading.
		nofollow := flags & unix.O_NOFOLLOW
		if pfd, perr := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: uint64(unix.O_PATH | unix.O_CLOEXEC | nofollow), Resolve: unix.RESOLVE_NO_MAGICLINKS}); perr == nil {
			unix.Close(pfd)
			return -1, err // the final symlink
		}
		if pfd, perr := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: uint64(unix.O_PATH | unix.O_CLOEXEC | nofollow)}); !errors.Is(perr, unix.ELOOP) {
			if perr == nil {
				unix.Close(pfd)
			}
			return -1, r.magicLinkErr(path)
		}
		return -1, err
	case err != nil:
		return -1, err
	}
	own, err := r.envds(fd)
	if err != nil || own {
		unix.Close(fd)
		return -1, r.ownProcErr(path, err)
	}
	return fd, nil
}

// envds tells whether fd is, or is below, envd's own /proc/PID or /proc/TID,
// or is the /proc/self or /proc/thread-self link. An error means it could
// not be told: the caller refuses.
func (r *resolver) envds(fd int) (bool, error) {
	if proc, err := isProc(fd); err != nil || !proc {
		return false, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, err
	}
	dir, name := fd, ""
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		d, n, err := parentOf(fd, &st)
		if err != nil {
			return false, err
		}
		defer unix.Close(d)
		dir, name = d, n
	}
	where, err := r.whereIs(dir)
	if err != nil {
		return false, err
	}
	if where == procRoot {
		// fd is the procfs's root itself, or an entry of the root that
		// is not a directory.
		return name == "self" || name == "thread-self", nil
	}
	return where == procEnvds, nil
}

// whereIs tells where dir, a directory of a procfs, is.
func (r *resolver) whereIs(dir int) (procDir, error) {
	var st unix.Stat_t
	if err := unix.Fstat(dir, &st); err != nil {
		return 0, err
	}
	key := [2]uint64{st.Dev, st.Ino}
	if where, ok := r.dirs[key]; ok {
		return where, nil
	}
	top, root, err := climb(dir)
	if err != nil {
		return 0, err
	}
	defer unix.Close(root)
	where := procRoot
	if top >= 0 {
		own, err := r.envdsTop(top, root)
		unix.Close(top)
		if err != nil {
			return 0, err
		}
		where = procOther
		if own {
			where = procEnvds
		}
	}
	if r.dirs == nil {
		r.dirs = map[[2]uint64]procDir{}
	}
	r.dirs[key] = where
	return where, nil
}

// envdsTop tells whether top, a directory of the procfs root, is the
// /proc/PID or /proc/TID of a thread of envd in that procfs.
func (r *resolver) envdsTop(top, root int) (bool, error) {
	var rst unix.Stat_t
	if err := unix.Fstat(root, &rst); err != nil {
		return false, err
	}
	self, ok := r.selves[rst.Dev]
	if !ok {
		buf := make([]byte, 32)
		n, err := unix.Readlinkat(root, "self", buf)
		switch {
		case errors.Is(err, unix.ENOENT):
			// envd is not in this procfs's pid namespace.
		case err != nil:
			return false, err
		default:
			self = string(buf[:n])
		}
		if r.selves == nil {
			r.selves = map[uint64]string{}
		}
		r.selves[rst.Dev] = self
	}
	if self == "" {
		return false, nil
	}
	tgid, err := tgidOf(top)
	return tgid == self, err
}

// tgidOf reads the Tgid of the process directory dir, as its procfs shows
// it; "" for a directory of the procfs root that is not a process's, or
// the process of which is gone.
func tgidOf(dir int) (string, error) {
	fd, err := unix.Openat(dir, "status", unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	buf := make([]byte, 512) // Name (16 bytes at most), Umask, State, then Tgid
	n, err := unix.Read(fd, buf)
	if errors.Is(err, unix.ESRCH) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return parseTgid(buf[:n]), nil
}

// parseTgid reads the Tgid of the start of a /proc/PID/status file; ""
// if it says none.
func parseTgid(status []byte) string {
	_, rest, ok := bytes.Cut(status, []byte("\nTgid:"))
	if !ok {
		return ""
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	return string(bytes.TrimSpace(line))
}

// isProc tells whether fd is on a procfs.
func isProc(fd int) (bool, error) {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return false, err
	}
	return sfs.Type == unix.PROC_SUPER_MAGIC, nil
}

// fdPath is the path the kernel has for fd (/proc/self/fd/N).
func fdPath(fd int) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlink("/proc/self/fd/"+strconv.Itoa(fd), buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// parentOf opens the directory holding fd, a procfs object, and tells
// its name there: from the path the kernel has for fd, checked to lead to
// that very object, so that no rename or link can make it another's.
func parentOf(fd int, st *unix.Stat_t) (int, string, error) {
	p, err := fdPath(fd)
	if err != nil {
		return -1, "", err
	}
	if !path.IsAbs(p) {
		return -1, "", errors.New("no path for the descriptor")
	}
	dir, name := path.Split(p)
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", err
	}
	var cst unix.Stat_t
	if err := unix.Fstatat(dfd, name, &cst, unix.AT_SYMLINK_NOFOLLOW); err != nil || cst.Dev != st.Dev || cst.Ino != st.Ino {
		unix.Close(dfd)
		return -1, "", errors.New("the descriptor's directory holds another file")
	}
	return dfd, name, nil
}

// up opens the directory holding cur, a procfs directory: cur/.., or,
// when the user may not search cur (a /proc/PID/fd of another user's), the
// directory the kernel's path for cur names, checked to hold cur.
func up(cur int, st *unix.Stat_t) (int, error) {
	fd, err := unix.Openat(cur, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if !errors.Is(err, unix.EACCES) {
		return fd, err
	}
	fd, _, err = parentOf(cur, st)
	return fd, err
}

// climb goes up from the procfs directory dir to its procfs's root and
// returns the root and the root's entry on the way (top; -1 when dir is
// the root). Leaving the procfs on the way (a part of a procfs mounted
// alone) is an error.
func climb(dir int) (top, root int, err error) {
	cur, err := unix.FcntlInt(uintptr(dir), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, -1, err
	}
	prev := -1
	closeAll := func() {
		unix.Close(cur)
		if prev >= 0 {
			unix.Close(prev)
		}
	}
	for range 64 {
		var st unix.Stat_t
		if err := unix.Fstat(cur, &st); err != nil {
			closeAll()
			return -1, -1, err
		}
		proc, err := isProc(cur)
		if err != nil || !proc {
			closeAll()
			return -1, -1, errors.New("left the procfs before its root")
		}
		if st.Ino == procRootIno {
			return prev, cur, nil
		}
		next, err := up(cur, &st)
		if err != nil {
			closeAll()
			return -1, -1, err
		}
		if prev >= 0 {
			unix.Close(prev)
		}
		prev, cur = cur, next
	}
	closeAll()
	return -1, -1, errors.New("too deep in the procfs")
}

// ownEntry tells whether the entry name of the procfs directory dirfd is
// envd's own /proc, or cannot be told apart from it.
func (r *resolver) ownEntry(dirfd int, name string) bool {
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return !errors.Is(err, unix.ENOENT) // gone: the walk finds that out itself
	}
	defer unix.Close(fd)
	own, err := r.envds(fd)
	return own || err != nil
}

// statFD describes the open fd as os.Stat would describe path.
func statFD(fd int, path string) (fs.FileInfo, error) {
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	return f.Stat()
}

// lstat is os.Lstat.
func (r *resolver) lstat(p string) (fs.FileInfo, error) {
	if !r.guard {
		return os.Lstat(p)
	}
	fd, err := r.open(p, unix.O_PATH, false)
	if err != nil {
		return nil, pathErr("lstat", p, err)
	}
	return statFD(fd, p)
}

// stat is os.Stat.
func (r *resolver) stat(p string) (fs.FileInfo, error) {
	if !r.guard {
		return os.Stat(p)
	}
	fd, err := r.open(p, unix.O_PATH, true)
	if err != nil {
		return nil, pathErr("stat", p, err)
	}
	return statFD(fd, p)
}

// statfs is unix.Statfs.
func (r *resolver) statfs(p string, st *unix.Statfs_t) error {
	if !r.guard {
		return unix.Statfs(p, st)
	}
	fd, err := r.open(p, unix.O_PATH, true)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fstatfs(fd, st)
}

// readDir is os.ReadDir (sorted by name). With the guard on, the caller
// gets only names: each entry must be reached through the resolver again.
func (r *resolver) readDir(p string) ([]fs.DirEntry, error) {
	if !r.guard {
		return os.ReadDir(p)
	}
	fd, err := r.open(p, unix.O_RDONLY|unix.O_DIRECTORY, true)
	if err != nil {
		return nil, pathErr("open", p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	des, err := f.ReadDir(-1)
	slices.SortFunc(des, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return des, err
}

// check refuses p when it leads to envd's own /proc (following a final
// symlink or not); it opens nothing for reading. Where the caller must
// then use the path itself (an inotify watch), what the path leads to may
// change meanwhile: use it only for what cannot read anything (a watch on
// a procfs reports no change).
func (r *resolver) check(p string, follow bool) error {
	if !r.guard {
		return nil
	}
	fd, err := r.open(p, unix.O_PATH, follow)
	if err != nil {
		return pathErr("open", p, err)
	}
	return unix.Close(fd)
}

// openFile opens the regular file p for reading, as os.OpenFile with
// O_RDONLY|O_NOCTTY|O_NONBLOCK would, and describes it (os.Stat). A
// directory or another kind of file is described, not opened: file is
// nil.
func (r *resolver) openFile(p string) (file *os.File, fi fs.FileInfo, err error) {
	if !r.guard {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, nil, err
		}
		if !fi.Mode().IsRegular() {
			return nil, fi, nil
		}
		// O_NONBLOCK: should p become a fifo meanwhile, open must not hang.
		file, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
		if err != nil {
			return nil, fi, err
		}
		// What was opened is what is described: p may have been swapped
		// (for a fifo, which would be read from forever) since the stat.
		if fi, err = file.Stat(); err != nil || !fi.Mode().IsRegular() {
			file.Close()
			return nil, fi, err
		}
		return file, fi, nil
	}
	fd, err := r.open(p, unix.O_PATH, true)
	if err != nil {
		return nil, nil, pathErr("stat", p, err)
	}
	defer unix.Close(fd)
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, nil, err
	}
	if fi, err = statFD(dup, p); err != nil || !fi.Mode().IsRegular() {
		return nil, fi, err
	}
	// Reopened through the descriptor: what is read is what was checked.
	// The kernel checks the user's read permission on the file again.
	rfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fi, pathErr("open", p, err)
	}
	return os.NewFile(uintptr(rfd), p), fi, nil
}

// target is where the symlink p leads, as an absolute path, and what is
// there: filepath.EvalSymlinks and os.Stat. ok is false when it leads
// nowhere the user may see.
func (r *resolver) target(p string) (target string, fi fs.FileInfo, ok bool) {
	if !r.guard {
		target, err := filepath.EvalSymlinks(p)
		if err != nil {
			return "", nil, false
		}
		fi, err = os.Stat(p)
		return target, fi, err == nil
	}
	fd, err := r.open(p, unix.O_PATH, true)
	if err != nil {
		return "", nil, false
	}
	target, err = fdPath(fd)
	if err != nil {
		unix.Close(fd)
		return "", nil, false
	}
	fi, err = statFD(fd, p)
	return target, fi, err == nil
}

// metadataOf is readMetadata: with the guard on, through a descriptor of
// p (not following a final symlink: a symlink has no user attributes, nor
// has anything of a procfs).
func (r *resolver) metadataOf(p string) map[string]string {
	if !r.guard {
		return readMetadata(p)
	}
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &how)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return nil
	}
	if proc, err := isProc(fd); err != nil || proc {
		return nil
	}
	// Following /proc/self/fd/N reaches the very file fd is.
	return readMetadataFollow("/proc/self/fd/" + strconv.Itoa(fd))
}

// pathErr gives err the shape os functions give theirs, unless it is one of
// this package's already.
func pathErr(op, p string, err error) error {
	var errno unix.Errno
	if errors.As(err, &errno) && !errors.Is(err, ErrPermission) {
		return &fs.PathError{Op: op, Path: p, Err: errno}
	}
	return err
}
