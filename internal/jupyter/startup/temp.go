package startup

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/envd-dev/envd/internal/staledir"
)

// tempPrefix starts the name of a temporary install: tempPrefix + pid +
// "-" + random.
const tempPrefix = "envd-kernel-startup-"

// Temp is an install in a temporary directory of its own.
type Temp struct {
	Layout
	lock *os.File // Dir, flocked until Remove
}

// InstallTemp installs the files (see InstallWith) in a new temporary
// directory, which Remove deletes. It first removes the temporary installs
// of envd processes that died without removing theirs (SIGKILL, a crash):
// those whose creator (its pid is in the name) is gone and whose lock is
// free; only directories of envd's account that no one else can write are
// considered, so a user's look-alike is left alone.
func InstallTemp(opts Options) (*Temp, error) {
	reclaimStale(opts.Logger)
	dir, lock, err := staledir.Create(tempPrefix)
	if err != nil {
		return nil, fmt.Errorf("startup: create install dir: %w", err)
	}
	t := &Temp{lock: lock}
	if t.Layout, err = InstallWith(dir, opts); err != nil {
		lock.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("startup: temporary install: %w", err)
	}
	return t, nil
}

// Remove deletes the install. The root of the tree is envd's, in the sticky
// temporary directory, so its path is envd's to resolve; below it,
// os.RemoveAll works from the parent's descriptor with openat(O_NOFOLLOW)
// and unlinkat and never follows a link (read in Go's
// os/removeall_at.go: removeAllFrom, and rootOpenDir in root_unix.go), so
// what the kernels' user did in IPythonDir cannot redirect it.
func (t *Temp) Remove() error {
	defer t.lock.Close()
	if err := os.RemoveAll(t.Dir); err != nil {
		return fmt.Errorf("startup: remove install: %w", err)
	}
	return nil
}

// reclaimStale removes the installs of envd processes that died without
// removing theirs (see staledir), as Remove does.
func reclaimStale(log *slog.Logger) {
	if log == nil {
		log = slog.Default()
	}
	staledir.Reclaim(tempPrefix, func(_ int, name string, _ *os.File) error {
		return os.RemoveAll(filepath.Join(os.TempDir(), name)) // see Remove
	}, func(dir string, err error) {
		if err != nil {
			log.Warn("cannot remove a stale kernel startup dir", "dir", dir, "error", err)
			return
		}
		log.Debug("removed a stale kernel startup dir", "dir", dir)
	})
}

// AdoptTemp takes over a temporary install that the envd before a live
// upgrade made (in this same pid), so that Remove deletes it: dir must be
// one of this pid's, of envd's account, that no one else can write.
func AdoptTemp(dir string) (*Temp, error) {
	lock, err := staledir.Adopt(tempPrefix, dir)
	if err != nil {
		return nil, fmt.Errorf("startup: adopt install: %w", err)
	}
	return &Temp{Layout: Layout{Dir: dir}, lock: lock}, nil
}
