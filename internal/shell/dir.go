package shell

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/staledir"
)

// dirPrefix starts the name of envd's directory for the shells' pipes and
// command files: dirPrefix + pid + "-" + random, in the temporary directory
// (see internal/staledir).
const dirPrefix = "envd-shell-"

// privateDir is where envd makes what a shell opens by name: the two pipes
// of each session (unlinked once its shell has opened them), the file of
// each command and the pipe of each command's input (unlinked when the
// command ends). It is envd's, mode 0711: a user may open a name it knows,
// never list, add, remove or rename. Every name is random (128 bits), and
// each file belongs to its session's user, 0600 (0400 for command files),
// so another user cannot open it even knowing its name (argv shows the
// session's pipe names). Envd opens and removes only through the
// directory's descriptor, never following a link: nothing in it can be
// changed under envd by anyone else.
type privateDir struct {
	path string
	fd   *os.File // the directory, flocked while envd uses it
}

// createDir makes the directory, first removing those of envd processes
// that died without removing theirs.
func createDir(log *slog.Logger) (*privateDir, error) {
	staledir.Reclaim(dirPrefix, func(_ int, name string, _ *os.File) error {
		return os.RemoveAll(filepath.Join(os.TempDir(), name)) // fd-relative, no link followed (os/removeall_at.go)
	}, func(dir string, err error) {
		if err != nil {
			log.Warn("cannot remove a stale shell directory", "dir", dir, "error", err)
		}
	})
	path, lock, err := staledir.Create(dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("create the shells' directory: %w", err)
	}
	d := &privateDir{path: path, fd: lock}
	if err := lock.Chmod(0o711); err != nil {
		d.remove()
		return nil, fmt.Errorf("create the shells' directory: %w", err)
	}
	if err := d.makeFailFile(); err != nil {
		d.remove()
		return nil, err
	}
	return d, nil
}

// failName is the file that a command whose text does not parse reads
// instead of its own (see commandLine): envd's, readable by all.
const failName = "return2"

// makeFailFile makes failName, unless it is there.
func (d *privateDir) makeFailFile() error {
	fd, err := unix.Openat(int(d.fd.Fd()), failName, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o444)
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create %s in the shells' directory: %w", failName, err)
	}
	f := os.NewFile(uintptr(fd), d.pathOf(failName))
	defer f.Close()
	if _, err := f.WriteString("return 2\n"); err != nil {
		return fmt.Errorf("write %s in the shells' directory: %w", failName, err)
	}
	return f.Chmod(0o444)
}

// adoptDir takes over the directory the envd before a live upgrade made,
// in this same pid.
func adoptDir(path string) (*privateDir, error) {
	lock, err := staledir.Adopt(dirPrefix, path)
	if err != nil {
		return nil, fmt.Errorf("adopt the shells' directory: %w", err)
	}
	d := &privateDir{path: path, fd: lock}
	if err := d.makeFailFile(); err != nil {
		lock.Close()
		return nil, err
	}
	return d, nil
}

// remove deletes the directory and what is left in it.
func (d *privateDir) remove() {
	if d == nil {
		return
	}
	os.RemoveAll(d.path) // fd-relative below the root, no link followed
	d.fd.Close()
}

// pathOf is name's path, as the shell opens it.
func (d *privateDir) pathOf(name string) string { return filepath.Join(d.path, name) }

// owner sets f's owner to u and its mode to mode. Envd as root gives it
// away; envd as u itself has it already.
func owner(f *os.File, u *identity.User, mode os.FileMode) error {
	if os.Geteuid() == 0 || uint32(os.Geteuid()) != u.UID {
		if err := f.Chown(int(u.UID), int(u.GID)); err != nil {
			return err
		}
	}
	return f.Chmod(mode)
}

// fifo makes a pipe for u and opens it read-write for envd, nonblocking in
// Go's poller: with envd holding both ends, the shell's open of either end
// never waits, envd's reads wait for data rather than read an end of file
// before the shell opens it, and its writes never fail for want of a
// reader.
func (d *privateDir) fifo(kind string, u *identity.User) (name string, f *os.File, err error) {
	name = kind + "-" + newNonce()
	dfd := int(d.fd.Fd())
	if err := unix.Mkfifoat(dfd, name, 0o600); err != nil {
		return "", nil, fmt.Errorf("make a pipe in %s: %w", d.path, err)
	}
	fd, err := unix.Openat(dfd, name, unix.O_RDWR|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Unlinkat(dfd, name, 0)
		return "", nil, fmt.Errorf("open a pipe in %s: %w", d.path, err)
	}
	f = os.NewFile(uintptr(fd), d.pathOf(name))
	if err := owner(f, u, 0o600); err != nil {
		f.Close()
		unix.Unlinkat(dfd, name, 0)
		return "", nil, fmt.Errorf("give a pipe to user '%s': %w", u.Name, err)
	}
	return name, f, nil
}

// file makes a file holding content, readable by u alone.
func (d *privateDir) file(u *identity.User, content []byte) (name string, err error) {
	name = "c-" + newNonce()
	dfd := int(d.fd.Fd())
	fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return "", fmt.Errorf("write a command file in %s: %w", d.path, err)
	}
	f := os.NewFile(uintptr(fd), d.pathOf(name))
	defer f.Close()
	if _, err := f.Write(content); err != nil {
		unix.Unlinkat(dfd, name, 0)
		return "", fmt.Errorf("write a command file in %s: %w", d.path, err)
	}
	if err := owner(f, u, 0o400); err != nil {
		unix.Unlinkat(dfd, name, 0)
		return "", fmt.Errorf("give a command file to user '%s': %w", u.Name, err)
	}
	return name, nil
}

// unlink removes name; "" and a name already gone are fine.
func (d *privateDir) unlink(name string) {
	if name != "" {
		unix.Unlinkat(int(d.fd.Fd()), name, 0)
	}
}
