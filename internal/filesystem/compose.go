package filesystem

import (
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/identity"
)

// MaxComposeSources bounds the parts one Compose joins.
const MaxComposeSources = 10000

// Compose concatenates the regular files sources, in order, into dst, and
// removes the sources once dst holds all of them: the assembly of a large
// upload sent in parallel parts. Everything is done as u with write rights
// (Files.write, in both modes: the sources are read with the user's own
// rights, so a part swapped for a link to a file the user may not read is
// refused, never copied into a file the user can read). dst is written as
// an upload is (a temporary file beside it, renamed over it, owner and
// mode as for an upload): on any failure dst is unchanged and the sources
// are all kept. The bytes move inside the kernel (copy_file_range, through
// os.File.ReadFrom). A source may be named once, dst may not be one, and a
// source must be a regular file (not a link to one).
func (f *Files) Compose(u *identity.User, sources []string, dst string) (Entry, error) {
	if len(sources) == 0 {
		return Entry{}, newErr(ErrInvalid, nil, "no source paths to compose")
	}
	if len(sources) > MaxComposeSources {
		return Entry{}, newErr(ErrInvalid, nil, "%d source paths: at most %d", len(sources), MaxComposeSources)
	}
	if err := checkPath(dst); err != nil {
		return Entry{}, err
	}
	seen := map[string]bool{filepath.Clean(dst): true}
	for _, s := range sources {
		if err := checkPath(s); err != nil {
			return Entry{}, err
		}
		c := filepath.Clean(s)
		if seen[c] {
			if c == filepath.Clean(dst) {
				return Entry{}, newErr(ErrInvalid, nil, "the destination %s is also a source", dst)
			}
			return Entry{}, newErr(ErrInvalid, nil, "source %s is named twice", s)
		}
		seen[c] = true
	}

	files := make([]*os.File, 0, len(sources))
	defer func() {
		for _, fl := range files {
			fl.Close()
		}
	}()
	var dstStat unix.Stat_t
	dstExists := unix.Stat(dst, &dstStat) == nil
	r := f.resolverFor(u)
	for _, s := range sources {
		var fl *os.File
		err := f.write(u, func() error {
			// Through r: never envd's own /proc (ownproc.go).
			fd, err := r.open(s, unix.O_RDONLY|unix.O_NONBLOCK, false)
			if err != nil {
				if errors.Is(err, unix.ELOOP) {
					return newErr(ErrInvalid, nil, "source %s is a symbolic link, not a file", s)
				}
				return osErr(u.Name, "read", s, pathErr("open", s, err))
			}
			fl = os.NewFile(uintptr(fd), s)
			return nil
		})
		if err != nil {
			return Entry{}, err
		}
		files = append(files, fl)
		var st unix.Stat_t
		if err := unix.Fstat(int(fl.Fd()), &st); err != nil {
			return Entry{}, osErr(u.Name, "read", s, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return Entry{}, newErr(ErrInvalid, nil, "source %s is not a regular file", s)
		}
		if dstExists && st.Dev == dstStat.Dev && st.Ino == dstStat.Ino {
			return Entry{}, newErr(ErrInvalid, nil, "the destination %s is also a source (%s)", dst, s)
		}
		// O_NONBLOCK kept a FIFO from blocking the open; reads of a
		// regular file ignore it, but clear it all the same.
		if err := unix.SetNonblock(fd(fl), false); err != nil {
			return Entry{}, osErr(u.Name, "read", s, err)
		}
	}

	up, err := f.Create(u, dst, nil)
	if err != nil {
		return Entry{}, err
	}
	for i, fl := range files {
		if err := up.readFrom(fl); err != nil {
			up.Abort()
			if errors.Is(err, errSourceRead) {
				return Entry{}, osErr(u.Name, "read", sources[i], errors.Unwrap(err))
			}
			return Entry{}, err
		}
	}
	if err := up.Commit(); err != nil {
		return Entry{}, err
	}
	for _, s := range sources {
		err := f.write(u, func() error { return unix.Unlink(s) })
		if err != nil && !errors.Is(err, unix.ENOENT) {
			f.log.Warn("composed, but cannot remove a source", "source", s, "destination", dst, "user", u.Name, "error", err)
		}
	}
	return f.Stat(u, dst)
}

func fd(f *os.File) int { return int(f.Fd()) }

// errSourceRead marks a failure to read a compose source (wrapping it).
var errSourceRead = errors.New("read source")

// readFrom appends all of src to the upload, inside the kernel when it can
// (os.File.ReadFrom: copy_file_range). A write failure (a full disk) is
// kept for Err, as Write's; a read failure is wrapped in errSourceRead.
func (up *Upload) readFrom(src *os.File) error {
	if up.werr != nil {
		return up.werr
	}
	_, err := up.file.ReadFrom(src)
	if err == nil {
		return nil
	}
	// Tell which side failed: a write failure leaves the source readable.
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Path == src.Name() {
		return errors.Join(errSourceRead, err)
	}
	up.werr = osErr(up.u.Name, "write", up.target, err)
	return up.werr
}
