package process

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/identity"
)

// checkDir checks that u may make dir its working directory, with exactly
// u's rights (identity.DoStrict: u's effective and filesystem ids and
// groups, no capability), in both modes. Its answer is what a shell as u would learn by cd'ing
// there, no more: a directory u may not search hides what it holds, so every
// path under it gets the same permission denied, whether it names a
// directory, a file or nothing. Where u can see, the answer is precise:
// missing, not a directory, not enterable.
//
// The check is the answer to give, not the guard: the child changes to dir
// after it switched to u's credentials, so the kernel decides again there.
func checkDir(u *identity.User, dir string) error {
	var derr error
	if err := u.DoStrict(func() error {
		derr = dirError(u, dir)
		return nil
	}); err != nil {
		return fmt.Errorf("check cwd '%s' as user '%s': %w", dir, u.Name, err)
	}
	return derr
}

// dirError runs with u's rights only: see checkDir.
func dirError(u *identity.User, dir string) error {
	var st unix.Stat_t
	err := unix.Stat(dir, &st)
	switch {
	case err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return errorf(ErrInvalid, "cwd '%s' is not a directory", dir)
	case err == nil:
		if err := unix.Faccessat(unix.AT_FDCWD, dir, unix.X_OK, unix.AT_EACCESS); err != nil {
			return deniedError(u, dir, err)
		}
		return nil
	case errors.Is(err, unix.ENOENT):
		return errorf(ErrInvalid, "cwd '%s' does not exist", dir)
	case errors.Is(err, unix.ENOTDIR):
		return errorf(ErrInvalid, "cwd '%s' does not exist: part of its path is not a directory", dir)
	case errors.Is(err, unix.EACCES):
		return deniedError(u, dir, err)
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENAMETOOLONG):
		return errorf(ErrInvalid, "cwd '%s': %v", dir, err)
	default:
		return fmt.Errorf("check cwd '%s' as user '%s': %w", dir, u.Name, err)
	}
}

// deniedError names the first directory on the way to dir (dir included)
// that u may not search. Each step is judged with u's rights, so the name is
// one u can find on its own, and the same for every path under it.
func deniedError(u *identity.User, dir string, cause error) error {
	blocked := dir
	for _, p := range prefixes(dir) {
		if err := unix.Faccessat(unix.AT_FDCWD, p, unix.X_OK, unix.AT_EACCESS); errors.Is(err, unix.EACCES) {
			blocked = p
			break
		}
	}
	return &Error{Kind: ErrPermission, Msg: fmt.Sprintf("cwd '%s': user '%s' may not enter '%s': permission denied", dir, u.Name, blocked), Cause: cause}
}

// prefixes are the paths from the first component of dir down to dir:
// "/a/b" gives "/", "/a", "/a/b".
func prefixes(dir string) []string {
	dir = filepath.Clean(dir)
	var out []string
	p := ""
	if filepath.IsAbs(dir) {
		p = "/"
		out = append(out, p)
	}
	for part := range strings.SplitSeq(strings.Trim(dir, "/"), "/") {
		if part == "" {
			continue
		}
		p = filepath.Join(p, part)
		out = append(out, p)
	}
	return out
}
