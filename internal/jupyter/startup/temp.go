package startup

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
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
	reclaimStale()
	dir, err := os.MkdirTemp("", tempPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, fmt.Errorf("startup: create install dir: %w", err)
	}
	t := &Temp{}
	t.lock, err = os.Open(dir)
	if err == nil {
		err = unix.Flock(int(t.lock.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	}
	if err == nil {
		t.Layout, err = InstallWith(dir, opts)
	}
	if err != nil {
		if t.lock != nil {
			t.lock.Close()
		}
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

func reclaimStale() {
	tmpDir := os.TempDir()
	tmp, err := os.Open(tmpDir)
	if err != nil {
		return
	}
	defer tmp.Close()
	names, _ := tmp.Readdirnames(-1)
	for _, name := range names {
		rest, ok := strings.CutPrefix(name, tempPrefix)
		if !ok {
			continue
		}
		pidStr, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
			continue // alive
		}
		fd, err := unix.Openat(int(tmp.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		d := os.NewFile(uintptr(fd), name)
		var st syscall.Stat_t
		if syscall.Fstat(fd, &st) != nil || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 ||
			unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
			d.Close()
			continue
		}
		err = os.RemoveAll(filepath.Join(tmpDir, name)) // see Remove
		d.Close()
		slog.Info("removed a stale kernel startup dir", "dir", filepath.Join(tmpDir, name), "error", err)
	}
}
