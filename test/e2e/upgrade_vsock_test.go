package e2e_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestUpgradeVsock: the vsock listener is handed over like the others: the
// new envd serves the very socket the old one listened on (same inode), so
// a connection made during the exec waits in its backlog instead of being
// refused.
func TestUpgradeVsock(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("an upgrade wants a root-owned binary: run as root")
	}
	_, oldBin, newBin := upgradeBinaries(t)
	port := freeVsockPort(t)
	e := startOld(t, oldBin, "ENVD_VSOCK_PORT="+strconv.FormatUint(uint64(port), 10))
	before := vsockInodes(t, e.cmd.Process.Pid)
	if len(before) != 1 {
		t.Fatalf("envd holds %d vsock sockets (%v), want its one listener", len(before), before)
	}
	upgradeTo(t, e, newBin, newVersion)
	after := vsockInodes(t, e.cmd.Process.Pid)
	if len(after) != 1 || after[0] != before[0] {
		t.Errorf("vsock sockets after the upgrade: %v, want the same listener %v", after, before)
	}
}

// vsockInodes returns the inodes of the AF_VSOCK sockets pid holds (each
// once, however many descriptors it has of it): it
// takes a copy of each of its socket descriptors (pidfd_getfd) and asks
// its domain.
func vsockInodes(t *testing.T, pid int) []string {
	t.Helper()
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open %d: %v", pid, err)
	}
	defer unix.Close(pidfd)
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ent := range ents {
		link, err := os.Readlink(filepath.Join(dir, ent.Name()))
		if err != nil || !strings.HasPrefix(link, "socket:[") {
			continue
		}
		n, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		fd, err := unix.PidfdGetfd(pidfd, n, 0)
		if err != nil {
			continue // closed meanwhile
		}
		domain, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
		unix.Close(fd)
		if ino := strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]"); err == nil && domain == unix.AF_VSOCK && !slices.Contains(out, ino) {
			out = append(out, ino)
		}
	}
	return out
}
