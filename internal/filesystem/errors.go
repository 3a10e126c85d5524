package filesystem

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"github.com/envd-dev/envd/internal/errkind"
)

// Kinds of failure. Every error this package returns matches one of them with
// errors.Is (or none, for a failure of envd itself); the adapters map them to
// Connect codes and HTTP statuses.
var (
	ErrNotFound   = errors.New("not found")
	ErrExists     = errors.New("already exists")
	ErrInvalid    = errors.New("invalid argument") // a bad path, a file where a directory is needed, and so on
	ErrPermission = errors.New("permission denied")
	ErrLoop       = errors.New("too many levels of symbolic links")
	ErrNoSpace    = errors.New("not enough disk space")
	ErrLagging    = errors.New("events lost")   // a watcher's queue overflowed
	ErrLimit      = errors.New("limit reached") // one of envd's own limits (Options), not the system's
	ErrClosed     = errors.New("closed")
)

// newErr is an error of one of the kinds above (internal/errkind), with a
// message for the user and the underlying cause.
func newErr(kind, cause error, format string, args ...any) error {
	return errkind.New(kind, cause, format, args...)
}

// notFound is the error of a path that does not exist: the path as asked
// and the system's words, "/a/b: no such file or directory". The kind says
// it was not found, so the message does not say it again.
func notFound(path string, err error) error {
	cause := err
	var pe *fs.PathError
	if errors.As(err, &pe) {
		cause = pe.Err
	}
	return newErr(ErrNotFound, err, "%s: %v", path, cause)
}

// kindOf classifies an error from the operating system.
func kindOf(err error) error {
	var errno syscall.Errno
	switch {
	case errors.As(err, &errno):
		switch errno {
		case syscall.ENOENT:
			return ErrNotFound
		case syscall.EEXIST, syscall.ENOTEMPTY:
			return ErrExists
		case syscall.EACCES, syscall.EPERM, syscall.EROFS:
			return ErrPermission
		case syscall.ELOOP:
			return ErrLoop
		case syscall.ENOSPC, syscall.EDQUOT:
			return ErrNoSpace
		case syscall.ENOTDIR, syscall.EISDIR, syscall.EINVAL, syscall.ENAMETOOLONG, syscall.EXDEV:
			return ErrInvalid
		}
	case errors.Is(err, fs.ErrNotExist):
		return ErrNotFound
	case errors.Is(err, fs.ErrPermission):
		return ErrPermission
	}
	return nil
}

// osErr wraps an error from the operating system with a message that says
// what could not be done to which path, and for whom when permission was the
// problem.
func osErr(userName, what, path string, err error) error {
	if ke := (*errkind.Error)(nil); errors.As(err, &ke) {
		return err // says what it is already (as envd's own /proc does: ownproc.go)
	}
	kind := kindOf(err)
	cause := err
	var pe *fs.PathError
	if errors.As(err, &pe) {
		cause = pe.Err
	}
	switch kind {
	case ErrPermission:
		return newErr(kind, err, "permission denied: user '%s' may not %s %s: %v", userName, what, path, cause)
	case ErrNoSpace:
		return newErr(kind, err, "not enough disk space available to %s %s: %v", what, path, cause)
	case nil:
		return fmt.Errorf("%s %s: %w", what, path, err)
	}
	return newErr(kind, err, "cannot %s %s: %v", what, path, cause)
}
