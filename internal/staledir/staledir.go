// Package staledir makes temporary directories that belong to one envd
// process, and removes those of envd processes that died without removing
// theirs (SIGKILL, a crash).
//
// A directory is named prefix + pid + "-" + random in the temporary
// directory, and its creator holds an flock on it while it lives. Another
// envd removes it once that pid is not running and the lock is free, and
// only if it belongs to envd's account and no one else can write it: a
// user's look-alike is left alone. The temporary directory is sticky, so
// only envd can rename what it made there.
package staledir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Create makes a new 0700 directory for prefix and returns its path and a
// descriptor of it that holds the lock: keep it open while the directory
// is in use, close it after removing the directory.
func Create(prefix string) (dir string, lock *os.File, err error) {
	dir, err = os.MkdirTemp("", prefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", nil, err
	}
	lock, err = Open(unix.AT_FDCWD, dir)
	if err == nil {
		if err = unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			lock.Close()
			err = fmt.Errorf("lock %s: %w", dir, err)
		}
	}
	if err != nil {
		os.Remove(dir)
		return "", nil, err
	}
	return dir, lock, nil
}

// Adopt takes over dir, a directory of prefix that this pid made before
// exec'ing itself (a live upgrade): it must be in the temporary directory,
// named for this pid, envd's and writable by no one else. It returns the
// descriptor that holds the lock again, as Create does.
func Adopt(prefix, dir string) (*os.File, error) {
	name := filepath.Base(dir)
	if filepath.Dir(dir) != filepath.Clean(os.TempDir()) || !strings.HasPrefix(name, prefix+strconv.Itoa(os.Getpid())+"-") {
		return nil, fmt.Errorf("%s is not a directory of this envd's", dir)
	}
	lock, err := Open(unix.AT_FDCWD, dir)
	if err != nil {
		return nil, err
	}
	if err := CheckPrivate(lock); err != nil {
		lock.Close()
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return lock, nil
}

// Open opens the directory name (relative to dirfd) without following a
// link in its last component.
func Open(dirfd int, name string) (*os.File, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// CheckPrivate fails unless f belongs to envd's account and no one else
// can write it.
func CheckPrivate(f *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("owned by uid %d, not by envd's uid %d", st.Uid, os.Geteuid())
	}
	if st.Mode&0o022 != 0 {
		return fmt.Errorf("writable by others (mode %#o)", st.Mode&0o7777)
	}
	return nil
}

// Reclaim removes the stale directories of prefix: for each, remove is
// called with the temporary directory's descriptor, the directory's name
// and its locked descriptor, and must delete the directory without
// following links. done, if not nil, hears of each one and how it went.
func Reclaim(prefix string, remove func(tmpfd int, name string, d *os.File) error, done func(dir string, err error)) {
	tmpDir := os.TempDir()
	tmp, err := os.Open(tmpDir)
	if err != nil {
		return
	}
	defer tmp.Close()
	names, _ := tmp.Readdirnames(-1)
	for _, name := range names {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		pidStr, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
			continue // alive (or not ours to signal: alive)
		}
		d, err := Open(int(tmp.Fd()), name)
		if err != nil {
			continue
		}
		if CheckPrivate(d) != nil || unix.Flock(int(d.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			d.Close()
			continue
		}
		err = remove(int(tmp.Fd()), name, d)
		d.Close()
		if done != nil {
			done(filepath.Join(tmpDir, name), err)
		}
	}
}
