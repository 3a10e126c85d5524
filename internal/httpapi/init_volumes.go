package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/mountinfo"
	"github.com/envd-dev/envd/internal/reaper"
)

// volumeMount is one of /init's volumeMounts: an NFS export and where to
// mount it.
type volumeMount struct {
	NFSTarget string `json:"nfs_target"`
	Path      string `json:"path"`
}

// Bounds of /init's volumeMounts.
const (
	maxVolumes     = 64
	maxLifecycleID = 256
	// mountTimeout bounds each NFS mount: a server that does not answer
	// fails the mount instead of holding /init.
	mountTimeout = 10 * time.Second
)

// Mounter makes the NFS mounts of /init's volumeMounts.
type Mounter interface {
	// Check tells why no NFS mount can be made at all (the helper that
	// mounts NFS is not installed); nil when they can.
	Check() error
	// Mount mounts the export target ("host:/export") at path, an empty
	// directory only root can change (not the volume's mount point: envd
	// then moves the mount from there onto the directory it checked,
	// through a descriptor, so that no path is resolved again).
	Mount(ctx context.Context, target, path string) error
}

// mountRecord is a mount /init made: its export and the lifecycle it was
// made for.
type mountRecord struct {
	target, lifecycle string
}

// nfsOptions are the options of every NFS mount: NFSv3 over TCP on port
// 2049 alone (the host's NFS proxy speaks nothing else), synchronous writes
// (a sandbox may be stopped at any moment), no attribute or lookup caching
// (a paused and resumed sandbox must see the export as it is now), hard
// mounts (a slow server stalls a read instead of failing it).
var nfsOptions = strings.Join([]string{
	"fg", "hard", "sync",
	"nfsvers=3", "proto=tcp", "port=2049", "mountproto=tcp", "mountport=2049",
	"rsize=1048576", "wsize=1048576",
	"noacl", "noac", "lookupcache=none",
}, ",")

// NFSMounter mounts with mount(8), which hands NFS to mount.nfs (Debian's
// nfs-common).
type NFSMounter struct{}

// mountNFSHelpers are where mount(8) looks for mount.nfs.
var mountNFSHelpers = []string{"/sbin/mount.nfs", "/usr/sbin/mount.nfs"}

// Check tells whether mount.nfs is installed.
func (NFSMounter) Check() error {
	for _, p := range mountNFSHelpers {
		if _, err := os.Stat(p); err == nil {
			return nil
		}
	}
	return errors.New("NFS volume mounts need mount.nfs (Debian's nfs-common) in the sandbox, and it is not installed: install nfs-common in the template")
}

// Mount runs mount -t nfs; the end of its output is the error's message.
func (NFSMounter) Mount(ctx context.Context, target, path string) error {
	return runMount(ctx, "/bin/mount", "-t", "nfs", "-o", nfsOptions, target, path)
}

// runMount runs a mount command through the reaper (envd reaps every
// child), killing it when ctx ends.
func runMount(ctx context.Context, argv ...string) error {
	out, err := os.CreateTemp("", "envd-mount-")
	if err != nil {
		return err
	}
	os.Remove(out.Name())
	defer out.Close()
	cmd := &exec.Cmd{Path: argv[0], Args: argv, Stdout: out, Stderr: out, Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}}
	exitc, err := reaper.Start(cmd)
	if err != nil {
		return fmt.Errorf("start %s: %w", argv[0], err)
	}
	var exit reaper.Exit
	killed := false
	select {
	case exit = <-exitc:
	case <-ctx.Done():
		cmd.Process.Signal(syscall.SIGKILL)
		killed = true
		exit = <-exitc
	}
	cmd.Process.Release()
	if exit.Code() == 0 {
		return nil
	}
	msg, _ := io.ReadAll(io.NewSectionReader(out, 0, 4<<10))
	text := strings.TrimSpace(string(msg))
	if killed {
		return fmt.Errorf("%s: no answer within %v", filepath.Base(argv[0]), mountTimeout)
	}
	if text == "" {
		text = exit.String()
	}
	return fmt.Errorf("%s: %s", filepath.Base(argv[0]), text)
}

// systemDirs are paths a volume may not be mounted on (the system would
// lose them), though in a directory of its own under them it may;
// systemTrees are the system's whole: nothing may be mounted on them or
// anywhere in them (a volume would replace the system's programs,
// libraries, configuration, package or scheduler state: a volume over
// /etc/cron.d or /usr/local/bin is code that root runs). Under sysTrees
// (the kernel's) nothing may be mounted either.
var (
	systemDirs  = []string{"/home", "/media", "/mnt", "/opt", "/root", "/srv", "/tmp", "/var"}
	systemTrees = []string{"/bin", "/boot", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/run", "/sbin", "/usr",
		"/var/backups", "/var/cache", "/var/lib", "/var/lock", "/var/log", "/var/mail", "/var/run", "/var/spool"}
	sysTrees = []string{"/proc", "/sys", "/dev"}
)

// checkVolumes checks /init's volumeMounts and lifecycleID.
func checkVolumes(vols []volumeMount, lifecycle string) error {
	if len(vols) > maxVolumes {
		return fmt.Errorf("volumeMounts: %d mounts, at most %d", len(vols), maxVolumes)
	}
	if len(lifecycle) > maxLifecycleID || strings.ContainsFunc(lifecycle, unicode.IsControl) {
		return fmt.Errorf("lifecycleID: at most %d bytes, no control characters", maxLifecycleID)
	}
	seen := map[string]bool{}
	for i, v := range vols {
		if err := checkNFSTarget(v.NFSTarget); err != nil {
			return fmt.Errorf("volumeMounts[%d]: nfs_target %q: %v", i, v.NFSTarget, err)
		}
		if err := checkMountPath(v.Path); err != nil {
			return fmt.Errorf("volumeMounts[%d]: path %q: %v", i, v.Path, err)
		}
		if seen[v.Path] {
			return fmt.Errorf("volumeMounts[%d]: path %q is in the list twice", i, v.Path)
		}
		seen[v.Path] = true
	}
	return nil
}

// checkNFSTarget checks an export: HOST:/PATH, HOST a name, an IPv4
// address or a bracketed IPv6 one.
func checkNFSTarget(t string) error {
	host, export, ok := strings.Cut(t, ":/")
	if !ok || host == "" {
		return errors.New("want HOST:/EXPORT (for example 10.0.0.1:/data)")
	}
	export = "/" + export
	if len(t) > 1024 || strings.ContainsFunc(t, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) || r == ',' }) {
		return errors.New("at most 1024 bytes, no spaces, commas or control characters")
	}
	if strings.HasPrefix(host, "[") {
		ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
		if err != nil || !strings.HasSuffix(host, "]") || !ip.Is6() {
			return errors.New("a bracketed host must be an IPv6 address")
		}
	} else if !validHostname(host) {
		return fmt.Errorf("host %q is not a host name or an IPv4 address", host)
	}
	if filepath.Clean(export) != export && export != "/" {
		return fmt.Errorf("export %q is not a clean absolute path", export)
	}
	return nil
}

func validHostname(h string) bool {
	if len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

// checkMountPath checks a mount point: absolute, clean, and not one the
// system needs.
func checkMountPath(p string) error {
	switch {
	case p == "":
		return errors.New("empty: want an absolute path such as /mnt/data")
	case !filepath.IsAbs(p) || filepath.Clean(p) != p:
		return errors.New("want a clean absolute path (no .., no double or trailing slash), such as /mnt/data")
	case len(p) > 4096 || strings.ContainsFunc(p, func(r rune) bool { return unicode.IsControl(r) || r == ',' }):
		return errors.New("at most 4096 bytes, no commas or control characters")
	case p == "/":
		return errors.New("the root directory cannot be a volume's mount point")
	}
	for _, d := range systemDirs {
		if p == d {
			return fmt.Errorf("%s is the system's: mount the volume in a directory of its own under it, such as %s/data", d, d)
		}
	}
	for _, d := range systemTrees {
		if p == d {
			return fmt.Errorf("%s is the system's, and so is everything in it: mount the volume elsewhere, such as /mnt/data", d)
		}
		if strings.HasPrefix(p, d+"/") {
			return fmt.Errorf("it is inside %s, which the system needs: mount the volume in a directory of its own elsewhere, such as /mnt/data", d)
		}
	}
	for _, d := range sysTrees {
		if p == d || strings.HasPrefix(p, d+"/") {
			return fmt.Errorf("nothing may be mounted in %s", d)
		}
	}
	return nil
}

// mountEntry is a line of /proc/self/mountinfo.
type mountEntry struct {
	point, fstype, source string
}

// mountAt returns the topmost mount at path, if any.
func mountAt(path string) (mountEntry, bool, error) {
	all, err := mountinfo.Read()
	if err != nil {
		return mountEntry{}, false, err
	}
	var found mountEntry
	ok := false
	for _, m := range all {
		if m.Point == path {
			found = mountEntry{point: path, fstype: m.FSType, source: m.Source}
			ok = true // later lines are mounted on top of earlier ones
		}
	}
	return found, ok, nil
}

// isNFS tells whether a mount is NFS's.
func isNFS(m mountEntry) bool { return m.fstype == "nfs" || m.fstype == "nfs4" }

// volumePlan is what /init does for one volume.
type volumePlan struct {
	vol     volumeMount
	unmount bool // something of an earlier lifecycle is mounted there
}

// planVolumes decides, before anything changes, which volumes to mount
// and which mounts to replace; a path where something envd did not mount
// (and that is not NFS) is mounted is a conflict.
func planVolumes(vols []volumeMount, lifecycle string, made map[string]mountRecord) ([]volumePlan, error) {
	var plans []volumePlan
	for i, v := range vols {
		m, mounted, err := mountAt(v.Path)
		if err != nil {
			return nil, fmt.Errorf("read the mounts: %w", err)
		}
		rec, ours := made[v.Path]
		if mounted && ours && rec.lifecycle == lifecycle && rec.target == v.NFSTarget {
			continue // mounted for this lifecycle already
		}
		if mounted && !ours && !isNFS(m) {
			return nil, errConflict(fmt.Errorf("volumeMounts[%d]: %s is already the mount point of a %s filesystem (%s) that envd did not mount: choose another path", i, v.Path, m.fstype, m.source))
		}
		plans = append(plans, volumePlan{vol: v, unmount: mounted})
	}
	return plans, nil
}

// errConflict marks an /init that conflicts with the machine's state.
type conflictError struct{ error }

func errConflict(err error) error { return conflictError{err} }

// mountVolumes carries out plans in parallel, each within mountTimeout, and
// returns the mounts made (path to record) and every failure.
func mountVolumes(ctx context.Context, m Mounter, plans []volumePlan, lifecycle string) (map[string]mountRecord, error) {
	var mu sync.Mutex
	made := map[string]mountRecord{}
	errs := make([]error, len(plans)) // in the plans' order
	var wg sync.WaitGroup
	for i, p := range plans {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, mountTimeout)
			defer cancel()
			err := mountVolume(ctx, m, p)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[i] = fmt.Errorf("mount %s at %s: %w", p.vol.NFSTarget, p.vol.Path, err)
				return
			}
			made[p.vol.Path] = mountRecord{target: p.vol.NFSTarget, lifecycle: lifecycle}
		})
	}
	wg.Wait()
	return made, errors.Join(errs...)
}

// mountVolume mounts one volume. Sandbox code may own directories on the
// way to the mount point and swap any of their names for a link while
// envd works (renameat2 RENAME_EXCHANGE), so no path string is resolved
// twice: the mount point is reached from "/" one name at a time without
// following a link, and held as a descriptor; mount(8) (and mount.nfs,
// which resolves its mount point again, even /proc/self/fd/N) mounts on a
// staging directory only root can change; that mount is then cloned
// (open_tree) and attached on the descriptor (move_mount), and the
// staging one detached.
func mountVolume(ctx context.Context, m Mounter, p volumePlan) error {
	path := p.vol.Path
	parent, name, err := openMountParent(path)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	if p.unmount {
		if err := unmountAt(parent, name); err != nil {
			return fmt.Errorf("unmount the mount of an earlier lifecycle: %w", err)
		}
	}
	dir, err := openDirAt(parent, name, path)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	return mountOn(ctx, m, p.vol.NFSTarget, dir, path)
}

// openMountParent opens the directory above path (an O_PATH descriptor),
// from "/" one name at a time without following a link, creating the
// missing directories (root's, 0755) on the way; it returns it and path's
// last name.
func openMountParent(path string) (int, string, error) {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", fmt.Errorf("the mount point: open /: %w", err)
	}
	names := strings.Split(strings.TrimPrefix(path, "/"), "/")
	walked := ""
	for _, n := range names[:len(names)-1] {
		walked += "/" + n
		next, err := openDirAt(fd, n, walked)
		unix.Close(fd)
		if err != nil {
			return -1, "", err
		}
		fd = next
	}
	return fd, names[len(names)-1], nil
}

// openDirAt opens the directory name in the directory parent (an O_PATH
// descriptor), creating it (root's, 0755) when missing; a link or
// anything else than a directory there is refused. full is its path, for
// messages.
func openDirAt(parent int, name, full string) (int, error) {
	for range 3 { // made, then swapped for nothing by sandbox code: again
		fd, err := unix.Openat(parent, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			if err := unix.Mkdirat(parent, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				return -1, fmt.Errorf("create the mount point: mkdir %s: %w", full, err)
			}
			continue
		}
		if err != nil {
			return -1, fmt.Errorf("the mount point: open %s: %w", full, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("the mount point: stat %s: %w", full, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			return fd, nil
		case unix.S_IFLNK:
			unix.Close(fd)
			return -1, fmt.Errorf("the mount point must have no symbolic link on its way (%s is one)", full)
		}
		unix.Close(fd)
		return -1, fmt.Errorf("the mount point must be a directory (%s is not one)", full)
	}
	return -1, fmt.Errorf("create the mount point: %s keeps disappearing", full)
}

// fdPath names the entry name of the directory open as fd, for the calls
// that take a path only (umount2): /proc resolves the descriptor itself,
// not a path that could have changed.
func fdPath(fd int, name string) string {
	return "/proc/self/fd/" + strconv.Itoa(fd) + "/" + name
}

// unmountAt detaches the topmost mount at name in the directory parent:
// forced (an NFS server of an earlier lifecycle is gone, its requests fail
// at once), else lazily (a process still holds a file in it).
func unmountAt(parent int, name string) error {
	p := fdPath(parent, name)
	err := unix.Unmount(p, unix.MNT_FORCE|unix.UMOUNT_NOFOLLOW)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	}
	if errors.Is(err, unix.EINVAL) { // not a mount point any more
		return nil
	}
	return err
}

// mountOn has m mount target on a staging directory, then attaches that
// mount on the directory open as dir (path is its name, for messages).
func mountOn(ctx context.Context, m Mounter, target string, dir int, path string) error {
	stage, err := makeStage()
	if err != nil {
		return fmt.Errorf("make a staging directory for the mount: %w", err)
	}
	defer os.Remove(stage)
	// A private mount of its own, so that the NFS mount made in it is not
	// propagated to other mount namespaces before it is in place.
	if err := unix.Mount(stage, stage, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind the staging directory for the mount: %w", err)
	}
	defer detachAll(stage)
	if err := unix.Mount("", stage, "", unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the staging directory private: %w", err)
	}
	before, err := mountID(stage)
	if err != nil {
		return err
	}
	if err := m.Mount(ctx, target, stage); err != nil {
		return errors.New(strings.ReplaceAll(err.Error(), stage, path))
	}
	if after, err := mountID(stage); err != nil {
		return err
	} else if after == before {
		return errors.New("the mount reported success, but nothing is mounted")
	}
	tree, err := unix.OpenTree(unix.AT_FDCWD, stage, unix.OPEN_TREE_CLONE|unix.O_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return fmt.Errorf("take the new mount (open_tree, Linux 5.2): %w", err)
	}
	defer unix.Close(tree)
	if err := unix.MoveMount(tree, "", dir, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach the new mount at %s (move_mount): %w", path, err)
	}
	return nil
}

// makeStage makes a staging directory for a mount: root's, 0700, in /run
// or the temporary directory, whichever is root's and only root can change
// a name in (not writable by others, or sticky), under / (root's). So only
// root can change what its path leads to, and mount(8) resolving it again
// finds it.
func makeStage() (string, error) {
	for _, d := range []string{"/run", os.TempDir()} {
		var st unix.Stat_t
		if !filepath.IsAbs(d) || filepath.Dir(d) != "/" || unix.Lstat(d, &st) != nil {
			continue
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Uid == 0 && (st.Mode&0o022 == 0 || st.Mode&unix.S_ISVTX != 0) {
			return os.MkdirTemp(d, "envd-mount-")
		}
	}
	return "", errors.New("neither /run nor the temporary directory is a directory of root's that only root can change")
}

// mountID is the id of the topmost mount at path, without asking its
// filesystem (an NFS server) anything.
func mountID(path string) (uint64, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID, &st); err != nil {
		return 0, fmt.Errorf("statx %s: %w", path, err)
	}
	if st.Mask&unix.STATX_MNT_ID == 0 {
		return 0, errors.New("the kernel does not tell mount ids (statx STATX_MNT_ID, Linux 5.8)")
	}
	return st.Mnt_id, nil
}

// detachAll detaches every mount stacked at path (a staging directory).
func detachAll(path string) {
	for range 8 {
		if err := unix.Unmount(path, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil {
			return
		}
	}
}
