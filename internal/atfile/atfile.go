// Package atfile replaces a file in a directory envd holds open, without
// ever following a link: what root writes for sandbox code to read (run
// files, Jupyter's config) goes through it.
package atfile

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// Replace makes name in the directory dfd hold data, atomically: a new
// file name+".tmp" (O_EXCL|O_NOFOLLOW: a link left there is never
// followed; unlinkat removes the link itself), group gid (-1: the caller's)
// and mode set on the open file, renamed over name. The directory must be
// one only envd can write.
func Replace(dfd int, name string, data []byte, mode os.FileMode, gid int) error {
	tmp := name + ".tmp"
	if err := unix.Unlinkat(dfd, tmp, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.Write(data)
	if err == nil && gid >= 0 {
		err = f.Chown(-1, gid) // fchown
	}
	if err == nil {
		err = f.Chmod(mode) // fchmod
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dfd, tmp, dfd, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
	}
	return err
}
