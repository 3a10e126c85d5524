package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// files are the cgroup files a per-process cgroup keeps open while it is
// ready and while its process runs: opened in the background when the
// cgroup is made ahead or given back, used on a start's and an end's
// critical path. Each is -1 when not open; then its path is used.
type files struct {
	tasks    []int // v1: the tasks file in each hierarchy, as Manager.dirs lists them
	peak     int   // the memory peak file, if peakOpen
	peakOpen bool
}

// openFiles opens g's files, best effort.
func (g *Group) openFiles() {
	if g.m.v2 == nil {
		for _, d := range g.m.dirs(g.rel) {
			g.tasks = append(g.tasks, openFile(filepath.Join(d, "tasks"), unix.O_WRONLY))
		}
	}
	if d, err := g.memDir(); err == nil {
		g.peak = openFile(filepath.Join(d, peakFile(g.m)), unix.O_RDONLY)
		g.peakOpen = g.peak >= 0
	}
}

// closeTasks closes the tasks files: the start is done.
func (f *files) closeTasks() {
	for _, fd := range f.tasks {
		closeFD(fd)
	}
	f.tasks = nil
}

func (f *files) closeFiles() {
	f.closeTasks()
	if f.peakOpen {
		closeFD(f.peak)
	}
	f.peakOpen = false
}

// taskFile is the tasks file open for hierarchy i, or -1.
func (f *files) taskFile(i int) int {
	if i < len(f.tasks) {
		return f.tasks[i]
	}
	return -1
}

func openFile(p string, flags int) int {
	fd, err := unix.Open(p, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}

func closeFD(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}

// writeFD writes b to an open cgroup file in one write; fd -1 writes path
// instead.
func writeFD(fd int, path string, b []byte) error {
	if fd < 0 {
		return writeFile(path, b)
	}
	for {
		_, err := unix.Write(fd, b)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return &fs.PathError{Op: "write", Path: path, Err: err}
		}
		return nil
	}
}

// readUintFD reads the number an open cgroup file holds (from its start:
// the kernel makes the text anew); fd -1 reads path instead.
func readUintFD(fd int, path string) (uint64, error) {
	if fd < 0 {
		return readUint(path)
	}
	var buf [32]byte
	n, err := unix.Pread(fd, buf[:], 0)
	for errors.Is(err, syscall.EINTR) {
		n, err = unix.Pread(fd, buf[:], 0)
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(buf[:n])), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}
