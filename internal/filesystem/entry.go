package filesystem

import (
	"errors"
	"io/fs"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// FileType is what a path is, as EntryInfo reports it.
type FileType int

const (
	// TypeOther is a special file (fifo, socket, device) or a dangling
	// symlink.
	TypeOther FileType = iota
	TypeFile
	TypeDir
)

// Entry describes one path. It is built from lstat: a symlink is described
// as a link, except for Type and Perm, which are those of its target.
type Entry struct {
	Name string
	Type FileType
	// Path is absolute, as the request named it: symlinks are not resolved.
	Path string
	Size int64
	// Perm holds the permission bits (of the target, for a symlink; 0 when
	// it dangles).
	Perm fs.FileMode
	// Mode is the lstat mode, type bits included: Mode.String() is the
	// ls-style string ("-rw-r--r--", "Lrwxrwxrwx").
	Mode    fs.FileMode
	Owner   string
	Group   string
	ModTime time.Time
	// SymlinkTarget is set for symlinks only: the absolute path the link
	// resolves to, or the link's own path when it does not resolve.
	SymlinkTarget *string
	// Metadata is the user's metadata (extended attributes user.e2b.*);
	// nil when there is none. Only keys and values that are valid UTF-8
	// are read, so it goes on the wire as it is.
	Metadata map[string]string
}

// describe builds the Entry of path from its lstat info. It runs inside
// Files.read or Files.write: following the link and reading attributes are
// done with the rights of the operation, through r (ownproc.go).
func (r *resolver) describe(path string, fi fs.FileInfo, names *nameCache) Entry {
	e := Entry{
		Name:    fi.Name(),
		Path:    path,
		Size:    fi.Size(),
		Mode:    fi.Mode(),
		ModTime: fi.ModTime(),
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner = names.user(st.Uid)
		e.Group = names.group(st.Gid)
	}
	switch m := fi.Mode(); {
	case m.IsRegular():
		e.Type, e.Perm = TypeFile, m.Perm()
	case m.IsDir():
		e.Type, e.Perm = TypeDir, m.Perm()
	case m&fs.ModeSymlink != 0:
		target, ti, ok := r.target(path)
		if !ok {
			target = path
		}
		e.SymlinkTarget = &target
		if ok {
			e.Perm = ti.Mode().Perm()
			switch {
			case ti.Mode().IsRegular():
				e.Type = TypeFile
			case ti.IsDir():
				e.Type = TypeDir
			}
		}
	}
	e.Metadata = r.metadataOf(path)
	return e
}

// lstatEntry describes path, or fails with the lstat error.
func (r *resolver) lstatEntry(path string, names *nameCache) (Entry, fs.FileInfo, error) {
	fi, err := r.lstat(path)
	if err != nil {
		return Entry{}, nil, err
	}
	return r.describe(path, fi, names), fi, nil
}

// nameCache turns uids and gids into names, reading /etc/passwd and
// /etc/group at most once per id for the life of one request.
type nameCache struct {
	users, groups map[uint32]string
}

func newNameCache() *nameCache {
	return &nameCache{users: map[uint32]string{}, groups: map[uint32]string{}}
}

func (c *nameCache) user(id uint32) string {
	if n, ok := c.users[id]; ok {
		return n
	}
	n := strconv.FormatUint(uint64(id), 10)
	if u, err := user.LookupId(n); err == nil {
		n = u.Username
	}
	c.users[id] = n
	return n
}

func (c *nameCache) group(id uint32) string {
	if n, ok := c.groups[id]; ok {
		return n
	}
	n := strconv.FormatUint(uint64(id), 10)
	if g, err := user.LookupGroupId(n); err == nil {
		n = g.Name
	}
	c.groups[id] = n
	return n
}

// Metadata is stored as extended attributes in the user namespace, under
// this prefix, one attribute per key.
const metadataPrefix = "user.e2b."

// Limits of metadata, as upstream: each key is at most this long, and the
// attributes' names and values together at most MaxMetadataSize bytes.
const (
	MaxMetadataKey  = 255 - len(metadataPrefix)
	MaxMetadataSize = 4096
)

// ValidateMetadata checks metadata before anything is written.
func ValidateMetadata(md map[string]string) error {
	total := 0
	for k, v := range md {
		switch {
		case k == "":
			return newErr(ErrInvalid, nil, "invalid metadata: a key is empty")
		case len(k) > MaxMetadataKey:
			return newErr(ErrInvalid, nil, "invalid metadata: key %q is longer than %d bytes", k[:16]+"...", MaxMetadataKey)
		case !printable(k):
			return newErr(ErrInvalid, nil, "invalid metadata: key %q has characters other than printable ASCII", k)
		case !printable(v):
			return newErr(ErrInvalid, nil, "invalid metadata: the value of %q has characters other than printable ASCII", k)
		}
		total += len(metadataPrefix) + len(k) + len(v)
	}
	if total > MaxMetadataSize {
		return newErr(ErrInvalid, nil, "invalid metadata: %d bytes in all, more than the %d allowed", total, MaxMetadataSize)
	}
	return nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// writeMetadata stores md on the open file fd. ok is false when the
// filesystem has no user extended attributes, which is not an error.
func writeMetadata(fd int, md map[string]string) (ok bool, err error) {
	for k, v := range md {
		if err := unix.Fsetxattr(fd, metadataPrefix+k, []byte(v), 0); err != nil {
			if errors.Is(err, unix.ENOTSUP) {
				return false, nil
			}
			return false, err
		}
	}
	return len(md) > 0, nil
}

// readMetadata reads the metadata of path (not following a final symlink);
// nil when there is none or it cannot be read.
func readMetadata(path string) map[string]string { return metadata(path, false) }

// readMetadataFollow is readMetadata following a final symlink.
func readMetadataFollow(path string) map[string]string { return metadata(path, true) }

func metadata(path string, follow bool) map[string]string {
	names := xattrNames(path, follow)
	var md map[string]string
	for _, n := range names {
		key, ok := strings.CutPrefix(n, metadataPrefix)
		if !ok || !utf8.ValidString(key) {
			continue
		}
		v, err := getxattr(path, n, follow)
		if err != nil || !utf8.Valid(v) {
			continue
		}
		if md == nil {
			md = map[string]string{}
		}
		md[key] = string(v)
	}
	return md
}

func xattrNames(path string, follow bool) []string {
	list := unix.Llistxattr
	if follow {
		list = unix.Listxattr
	}
	buf := make([]byte, 1024)
	for range 3 {
		n, err := list(path, buf)
		if errors.Is(err, unix.ERANGE) {
			size, err := list(path, nil)
			if err != nil {
				return nil
			}
			buf = make([]byte, size+64)
			continue
		}
		if err != nil || n == 0 {
			return nil
		}
		var out []string
		start := 0
		for i := 0; i < n; i++ {
			if buf[i] == 0 {
				if i > start {
					out = append(out, string(buf[start:i]))
				}
				start = i + 1
			}
		}
		return out
	}
	return nil
}

func getxattr(path, name string, follow bool) ([]byte, error) {
	get := unix.Lgetxattr
	if follow {
		get = unix.Getxattr
	}
	buf := make([]byte, 256)
	for range 3 {
		n, err := get(path, name, buf)
		if errors.Is(err, unix.ERANGE) {
			size, err := get(path, name, nil)
			if err != nil {
				return nil, err
			}
			buf = make([]byte, size+16)
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
	return nil, unix.ERANGE
}
