package process

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/envd-dev/envd/internal/identity"
)

// lookPath finds the program a command names as execvp(3) in the child
// would: a name with a slash is taken as it is; any other is looked up in
// the child's own PATH (the last PATH= of env), not envd's, and the first
// regular file there that u may execute wins. envd's PATH is not the
// command's: a virtual environment or a PATH the request sets must decide
// which python runs, and a file u cannot run (another user's shim) must not
// shadow one it can.
func lookPath(file string, env []string, u *identity.User) (string, error) {
	if file == "" {
		return "", errors.New("no program named")
	}
	if strings.Contains(file, "/") {
		return file, nil
	}
	path := identity.StandardPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	denied := ""
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue // never the current directory
		}
		p := filepath.Join(dir, file)
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if mayExecute(fi, u) {
			return p, nil
		}
		if denied == "" {
			denied = p
		}
	}
	if denied != "" {
		return "", fmt.Errorf("%s is not executable by %s, and no other %s is in PATH %s", denied, u.Name, file, path)
	}
	return "", fmt.Errorf("executable not found in PATH %s", path)
}

// mayExecute tells whether u may execute the file fi describes, by its
// mode bits as the kernel checks them (root: any execute bit).
func mayExecute(fi os.FileInfo, u *identity.User) bool {
	mode := fi.Mode().Perm()
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return mode&0o111 != 0
	}
	switch {
	case u.UID == 0:
		return mode&0o111 != 0
	case st.Uid == u.UID:
		return mode&0o100 != 0
	case st.Gid == u.GID || slices.Contains(u.Groups, st.Gid):
		return mode&0o010 != 0
	}
	return mode&0o001 != 0
}
