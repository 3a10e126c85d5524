package daemon

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/atfile"
)

// The files upstream keeps in its run directory (/run/e2b) for code in the
// sandbox to read: whether this is a sandbox, and its ids once the MMDS
// names them.
const (
	runFileSandbox    = ".E2B_SANDBOX"
	runFileSandboxID  = ".E2B_SANDBOX_ID"
	runFileTemplateID = ".E2B_TEMPLATE_ID"
)

// runDir is the directory of those files; nil writes none.
type runDir struct{ path string }

// newRunDir returns nil for "" (off).
func newRunDir(path string) *runDir {
	if path == "" {
		return nil
	}
	return &runDir{path: filepath.Clean(path)}
}

// write replaces the file name in the directory with value, readable by
// everyone and writable by no one but root. The directory is made (0755)
// if missing, and must be a real directory that only root can change: root
// never writes through a link or into a directory sandbox code controls.
// The file is written under a temporary name and renamed over, both
// relative to the directory's descriptor, never following a link.
func (d *runDir) write(name, value string) error {
	if d == nil {
		return nil
	}
	if err := os.MkdirAll(d.path, 0o755); err != nil {
		return fmt.Errorf("make the run directory: %w", err)
	}
	dfd, err := unix.Open(d.path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the run directory %s (it must be a directory, not a link): %w", d.path, err)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return fmt.Errorf("stat the run directory %s: %w", d.path, err)
	}
	if st.Uid != 0 || st.Mode&0o022 != 0 {
		return fmt.Errorf("the run directory %s is not root's alone (owner %d, mode %o): not writing %s", d.path, st.Uid, st.Mode&0o7777, name)
	}
	if err := atfile.Replace(dfd, name, []byte(value), 0o444, -1); err != nil {
		return fmt.Errorf("write %s in %s: %w", name, d.path, err)
	}
	return nil
}
