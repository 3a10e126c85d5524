package ports

import (
	"os"
	"slices"
	"strconv"
	"strings"
)

// Bounds of the owner walk.
const (
	// maxFDsPerScan bounds the /proc/PID/fd entries one scan reads (a
	// process's are read whole): the sockets not found by then are looked
	// for at the next scan, from the process where this one stopped, so
	// that processes of lower pids holding many descriptors cannot keep
	// the walk from ever reaching the others.
	maxFDsPerScan = 1 << 16
	// missRetry is how many scans an inode no process was found for waits
	// before it is looked for again.
	missRetry = 10
)

// owner is a process holding a socket.
type owner struct {
	pid  int
	name string
}

// owners maps socket inodes to the processes holding them. It remembers
// what it found and walks /proc only for sockets it does not know yet,
// skipping processes of other network namespaces, so that a scan of an
// unchanged sandbox reads no fd directory at all. Not safe for concurrent
// use.
type owners struct {
	proc   string // "/proc"
	selfNS string // /proc/self/ns/net's link: the namespace scanned
	known  map[uint64]owner
	missed map[uint64]int // inode -> scans left before it is looked for again
	next   int            // the pid the next walk starts at: where one cut short stopped; 0 after a whole walk
}

func newOwners(proc string) *owners {
	ns, _ := os.Readlink(proc + "/self/ns/net")
	return &owners{proc: proc, selfNS: ns, known: map[uint64]owner{}, missed: map[uint64]int{}}
}

// resolve returns the owner of each inode it can find. It forgets what no
// longer exists.
func (o *owners) resolve(inodes []uint64) map[uint64]owner {
	present := make(map[uint64]bool, len(inodes))
	for _, ino := range inodes {
		present[ino] = true
	}
	for ino, ow := range o.known {
		// A socket whose process went may have been passed on (a fork):
		// look for it again.
		if !present[ino] || !o.alive(ow.pid) {
			delete(o.known, ino)
		}
	}
	want := map[uint64]bool{}
	for ino := range present {
		if _, ok := o.known[ino]; ok {
			continue
		}
		if left, ok := o.missed[ino]; ok && left > 0 {
			o.missed[ino] = left - 1
			continue
		}
		want[ino] = true
	}
	for ino := range o.missed {
		if !present[ino] {
			delete(o.missed, ino)
		}
	}
	if len(want) > 0 && o.walk(want) {
		for ino := range want {
			o.missed[ino] = missRetry
		}
	}
	out := make(map[uint64]owner, len(o.known))
	for ino, ow := range o.known {
		if present[ino] {
			out[ino] = ow
		}
	}
	return out
}

func (o *owners) alive(pid int) bool {
	_, err := os.Stat(o.proc + "/" + strconv.Itoa(pid))
	return err == nil
}

// walk looks for the inodes of want in the fd tables of the processes of
// the scanned network namespace, lowest pid first (from where the last
// walk stopped, if its budget ran out), and removes each one it finds from
// want. It reports whether it looked at every process (or found them all);
// false when the budget ran out first.
func (o *owners) walk(want map[uint64]bool) bool {
	ents, err := os.ReadDir(o.proc)
	if err != nil {
		return true
	}
	pids := make([]int, 0, len(ents))
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	start, _ := slices.BinarySearch(pids, o.next)
	pids = slices.Concat(pids[start:], pids[:start])
	budget := maxFDsPerScan
	for _, pid := range pids {
		if len(want) == 0 {
			break
		}
		if budget <= 0 {
			o.next = pid
			return false
		}
		dir := o.proc + "/" + strconv.Itoa(pid)
		if ns, err := os.Readlink(dir + "/ns/net"); err != nil || ns != o.selfNS {
			continue
		}
		fds, err := os.ReadDir(dir + "/fd")
		if err != nil {
			continue // gone, or a kernel thread
		}
		name := ""
		budget -= len(fds)
		for _, fd := range fds {
			link, err := os.Readlink(dir + "/fd/" + fd.Name())
			if err != nil || !strings.HasPrefix(link, "socket:[") {
				continue
			}
			ino, err := strconv.ParseUint(strings.TrimSuffix(link[len("socket:["):], "]"), 10, 64)
			if err != nil || !want[ino] {
				continue
			}
			if name == "" {
				b, _ := os.ReadFile(dir + "/comm")
				name = strings.TrimSuffix(string(b), "\n")
			}
			o.known[ino] = owner{pid: pid, name: name}
			delete(want, ino)
			delete(o.missed, ino)
		}
	}
	o.next = 0
	return true
}
