package ports

import (
	"bufio"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/envd-dev/envd/internal/procstat"
)

// Which listeners are private, never forwarded, and whose (Port.Private).
// The socket's holder decides (the owner the fd walk found, the lowest pid
// holding it):
//
//   - envd: envd's own process (its API and code ports).
//   - jupyter: envd's Jupyter server process (Options.JupyterServer),
//     whatever it listens on.
//   - kernel: a kernel is a child of that server process whose command
//     line names a connection file of the server's
//     (Options.KernelChannels: its five ZeroMQ channels' ports). Its
//     private listeners are those on its channels' ports, and those in
//     the same epoll instance as one of them: the poller of the ZeroMQ
//     I/O thread that serves the channels, in which ipykernel also binds
//     its IOPub pipe (the PULL socket forked subprocesses print through,
//     on a random port that no file names).
//
// Everything else is the workload's, and forwarded when bound to loopback
// only: every listener of a kernel's subprocess (it is not the server's
// child), and a kernel's own listener outside its channels' poller: a
// server that code run in the kernel starts in a thread (http.server, a
// Flask app), in the kernel's asyncio loop, or in a ZeroMQ context of its
// own. Only a socket that code binds in the kernel's own ZeroMQ context
// (ipykernel's, which it does not expose) would count as the kernel's.
//
// Not the jupyter cgroup: it also holds every process the kernels start,
// the user's servers among them. Not a kernel's every listener: that
// would hide the servers run inside a kernel. Not the listeners a kernel
// had when first seen: a scan comes about once a second, and code may
// have started a server by then.
//
// Nothing the workload does makes another process's listener private:
// only the server's children can be kernels (a command line is anyone's
// to write, a parent is not), and a verdict covers only the sockets that
// process holds. Nor can it make envd's, the server's or a kernel's
// channels public: their holder decides, and a port with one private
// listener is not forwarded at all (forwards). The one way around is a
// copy of such a socket held by a process of a lower pid, which only code
// inside its holder (or allowed to ptrace it) can hand out: code in a
// kernel, which may as well relay the kernel's channels itself.
//
// ZeroMQ registers a listener in its poller just after it starts
// listening (its I/O thread does it): a scan that comes in between sees
// the pipe outside the poller. So a verdict "the workload's" on a kernel's
// listener stands only once a second scan agrees; until then each scan
// looks again (a forward made meanwhile stops at the next scan).

// privacy decides which listeners are private. It keeps its verdicts on
// kernels' listeners outside their channels' ports, which need a look at
// the kernel's file descriptors, so that an unchanged sandbox costs no
// such look. Not safe for concurrent use.
type privacy struct {
	proc     string
	server   func() int         // Options.JupyterServer; nil: none
	channels func(int) []uint16 // Options.KernelChannels; nil: none
	verdicts map[uint64]verdict // by inode
}

// verdict is what a kernel's listener outside its channels' ports was
// found to be.
type verdict struct {
	pid     int  // the kernel
	private bool // in its channels' poller
	settled bool // private, or found the workload's twice
}

func newPrivacy(proc string, server func() int, channels func(int) []uint16) *privacy {
	return &privacy{proc: proc, server: server, channels: channels, verdicts: map[uint64]verdict{}}
}

// classify returns whose each of ls is, by inode (the workload's left
// out), given their owners and envd's pid.
func (pv *privacy) classify(self int, ls []Listener, owners map[uint64]owner) map[uint64]Private {
	out := map[uint64]Private{}
	server := 0
	if pv.server != nil {
		server = pv.server()
	}
	kernels := map[int][]uint16{}          // pid -> its channels; nil: not a kernel
	polled := map[int]map[uint64]bool{}    // kernel -> the listeners in its channels' poller
	seen := make(map[uint64]bool, len(ls)) // the verdicts still wanted
	for _, l := range ls {
		pid := owners[l.Inode].pid
		switch {
		case pid == 0:
			continue
		case pid == self:
			out[l.Inode] = PrivateEnvd
			continue
		case server != 0 && pid == server:
			out[l.Inode] = PrivateJupyter
			continue
		}
		chans, ok := kernels[pid]
		if !ok {
			chans = pv.kernelChannels(pid, server)
			kernels[pid] = chans
		}
		if chans == nil {
			continue
		}
		if slices.Contains(chans, l.Port) {
			out[l.Inode] = PrivateKernel
			continue
		}
		seen[l.Inode] = true
		v, known := pv.verdicts[l.Inode]
		known = known && v.pid == pid
		if known && v.settled {
			if v.private {
				out[l.Inode] = PrivateKernel
			}
			continue
		}
		in, ok := polled[pid]
		if !ok {
			in = pv.poller(pid, chans, ls)
			polled[pid] = in
		}
		private := in[l.Inode]
		pv.verdicts[l.Inode] = verdict{pid: pid, private: private, settled: private || (known && !v.private)}
		if private {
			out[l.Inode] = PrivateKernel
		}
	}
	for ino := range pv.verdicts {
		if !seen[ino] {
			delete(pv.verdicts, ino)
		}
	}
	return out
}

// kernelChannels returns the channels' ports of pid if it is a kernel of
// the server: its child, naming a connection file of the server's.
func (pv *privacy) kernelChannels(pid, server int) []uint16 {
	if server == 0 || pv.channels == nil {
		return nil
	}
	if st, err := procstat.Read(pid); err != nil || st.PPid != server {
		return nil
	}
	return pv.channels(pid)
}

// poller returns the listeners of ls that kernel pid's channels' poller
// watches: every epoll instance of the kernel that watches a listener on
// one of its channels' ports.
func (pv *privacy) poller(pid int, chans []uint16, ls []Listener) map[uint64]bool {
	channel := map[uint64]bool{}
	listening := make(map[uint64]bool, len(ls))
	for _, l := range ls {
		listening[l.Inode] = true
		if slices.Contains(chans, l.Port) {
			channel[l.Inode] = true
		}
	}
	out := map[uint64]bool{}
	for _, ep := range pv.kernelPollers(pid) {
		// The sockets' device: that of the channels' entries (an inode
		// number alone may be another file system's).
		dev, ok := "", false
		for _, w := range ep {
			if channel[w.ino] {
				dev, ok = w.dev, true
				break
			}
		}
		if !ok {
			continue
		}
		for _, w := range ep {
			if w.dev == dev && listening[w.ino] {
				out[w.ino] = true
			}
		}
	}
	return out
}

// epollFD is what one epoll instance watches.
type epollFD []watched

// watched is a file an epoll instance watches: its inode and device, as
// fdinfo prints them.
type watched struct {
	ino uint64
	dev string
}

// Bounds of the look at a kernel's file descriptors.
const (
	maxKernelFDs    = 1 << 16
	maxFDInfoBytes  = 1 << 20
	eventpollTarget = "anon_inode:[eventpoll]"
)

// kernelPollers reads the epoll instances of process pid from procfs:
// /proc/PID/fdinfo/N of each, a line "tfd: N events: E data: D pos:0
// ino:HEX sdev:HEX" per file watched.
func (pv *privacy) kernelPollers(pid int) []epollFD {
	dir := pv.proc + "/" + strconv.Itoa(pid)
	fds, err := os.ReadDir(dir + "/fd")
	if err != nil {
		return nil
	}
	var out []epollFD
	for i, fd := range fds {
		if i >= maxKernelFDs {
			break
		}
		if link, err := os.Readlink(dir + "/fd/" + fd.Name()); err != nil || link != eventpollTarget {
			continue
		}
		f, err := os.Open(dir + "/fdinfo/" + fd.Name())
		if err != nil {
			continue
		}
		out = append(out, parseEpollInfo(io.LimitReader(f, maxFDInfoBytes)))
		f.Close()
	}
	return out
}

// parseEpollInfo reads the files an epoll's fdinfo says it watches.
func parseEpollInfo(r io.Reader) epollFD {
	var out epollFD
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "tfd:") {
			continue
		}
		var w watched
		ok := false
		for f := range strings.FieldsSeq(line) {
			if v, found := strings.CutPrefix(f, "ino:"); found {
				n, err := strconv.ParseUint(v, 16, 64)
				w.ino, ok = n, err == nil
			} else if v, found := strings.CutPrefix(f, "sdev:"); found {
				w.dev = v
			}
		}
		if ok {
			out = append(out, w)
		}
	}
	return out
}
