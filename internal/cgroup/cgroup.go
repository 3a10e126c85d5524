// Package cgroup makes, joins, freezes and reads the cgroups that hold the
// workload envd starts, on cgroup v2 or on the v1 freezer and memory
// hierarchies.
//
// Layout. envd makes its tree under its own cgroup in each hierarchy it uses
// (read from /proc/self/cgroup, so a supervisor's placement of envd is
// respected): <own>/<Root>/{user,pty,jupyter}. Every process envd starts gets
// a cgroup of its own under user (pipes) or pty (terminals), made ahead
// (spare.go) and removed once it ended and emptied; the Jupyter server and
// its kernels share jupyter. envd itself stays in its own cgroup, outside
// the tree, so freezing the tree never freezes envd.
//
// Joining before any user code runs. On v2 the child is cloned straight
// into its cgroup (clone3 with CLONE_INTO_CGROUP, SysProcAttr.UseCgroupFD).
// v1 has no such call: the forking OS thread (locked to its goroutine) moves
// itself into the cgroup, forks, and moves back, so the child is born in it
// (a child inherits its forking thread's cgroups). Go creates new threads
// from a template thread while a goroutine is locked, so no other thread
// inherits the move. See Group.Start.
package cgroup

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/mountinfo"
)

// Version is a cgroup hierarchy's version.
type Version int

// Versions; Auto picks v2 when /sys/fs/cgroup is a cgroup2 mount, else v1.
const (
	Auto Version = 0
	V1   Version = 1
	V2   Version = 2
)

func (v Version) String() string {
	switch v {
	case V1:
		return "v1"
	case V2:
		return "v2"
	}
	return "auto"
}

// Names of envd's workload cgroups under its root.
const (
	User    = "user"    // processes with pipes
	PTY     = "pty"     // processes on a terminal
	Jupyter = "jupyter" // the Jupyter server and its kernels
)

// ErrUnavailable: cgroups cannot be used on this machine (no hierarchy
// mounted, no freezer, not root).
var ErrUnavailable = errors.New("cgroups unavailable")

// ErrJoin: the child could not be placed in its cgroup (it was removed
// from outside meanwhile); nothing was started.
var ErrJoin = errors.New("cannot join the process's cgroup")

// ErrFrozen: the workload is frozen for a snapshot; a v1 start must wait for
// the thaw (see Group.Start).
var ErrFrozen = errors.New("the workload is frozen for a snapshot: thaw it first (POST /unfreeze)")

// Options configures New.
type Options struct {
	Logger *slog.Logger // zero: slog.Default()
	// Root names envd's tree under envd's own cgroup in each hierarchy.
	// Zero: "envd". Tests use a name of their own.
	Root string
	// Version forces a version. Zero: Auto.
	Version Version
	// FSRoot is where the cgroup filesystems are mounted: only hierarchies
	// mounted there or beneath it are used, and Auto picks v2 when FSRoot
	// itself is a cgroup2 mount. Zero: DefaultFSRoot.
	FSRoot string
	// SweepRoot is where a hierarchy freeze (Freeze with Hierarchy) starts
	// walking, relative to the hierarchy's root. Zero: "/", the whole
	// hierarchy. Tests bound the walk to a tree of their own.
	SweepRoot string
}

// DefaultFSRoot is where Linux distributions mount cgroups.
const DefaultFSRoot = "/sys/fs/cgroup"

// hier is one hierarchy envd uses: where it is mounted and envd's own cgroup
// in it, as a directory.
type hier struct {
	mount string // mount point
	own   string // envd's own cgroup's directory
}

// Manager is envd's cgroup tree.
type Manager struct {
	log       *slog.Logger
	version   Version
	root      string // Options.Root
	sweepRoot string
	// v2: the one hierarchy. v1: freezer (required) and memory (nil when
	// not mounted).
	v2, freezer, memory *hier
	seq                 atomic.Uint64

	// placing is held (read) by v1 starts across their thread's stay in a
	// workload cgroup, and (write) by Freeze while it sets frozen: a start
	// never moves envd's thread into a frozen cgroup.
	placing sync.RWMutex
	frozen  bool // guarded by placing

	// frozenByUs lists the cgroups Freeze froze, for Thaw. Guarded by
	// freezeMu (Freeze and Thaw are serialized by it).
	freezeMu   sync.Mutex
	frozenByUs []string

	lingerMu sync.Mutex
	linger   map[string]*Group // per-process cgroups left busy by orphans; guarded by lingerMu

	spares spares // per-process cgroups made ahead (spare.go)

	// treeLock is envd's tree's directory (the first hierarchy's), open
	// and flock'ed exclusively while this Manager owns the tree; -1 when
	// another live envd holds it. Only an owner removes the tree at Close:
	// a second envd started by mistake with the same tree (it then fails
	// to bind, and exits) must not remove the running one's cgroups. The
	// descriptor is close-on-exec: a live upgrade's new envd takes the
	// lock afresh.
	treeLock int
	owner    bool

	// ownTasks are the tasks files of envd's own cgroups, per hierarchy
	// (v1), open for a start's way back (see Group.Start); -1 where one
	// could not be opened (its path is written then).
	ownTasks []int
}

// New finds the hierarchies, makes envd's tree and its workload cgroups.
// An error wrapping ErrUnavailable means cgroups cannot be used here: run
// without them.
func New(o Options) (*Manager, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Root == "" {
		o.Root = "envd"
	}
	if strings.Contains(o.Root, "..") || filepath.IsAbs(o.Root) {
		return nil, fmt.Errorf("cgroup root %q: want a relative name without '..'", o.Root)
	}
	if o.SweepRoot == "" {
		o.SweepRoot = "/"
	}
	if o.FSRoot == "" {
		o.FSRoot = DefaultFSRoot
	}
	if !filepath.IsAbs(o.FSRoot) {
		return nil, fmt.Errorf("cgroup filesystem root %q: want an absolute path", o.FSRoot)
	}
	o.FSRoot = filepath.Clean(o.FSRoot)
	m := &Manager{log: o.Logger, root: o.Root, sweepRoot: o.SweepRoot, linger: map[string]*Group{}}
	mounts, err := readMounts(o.FSRoot)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	own, err := readOwn()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	v := o.Version
	if v == Auto {
		v = V1
		if mt, ok := mounts.v2[o.FSRoot]; ok && mt == "/" {
			v = V2
		}
	}
	m.version = v
	switch v {
	case V2:
		h, err := mounts.hierV2(own)
		if err != nil {
			return nil, err
		}
		m.v2 = h
	case V1:
		h, err := mounts.hierV1("freezer", own)
		if err != nil {
			return nil, err
		}
		m.freezer = h
		if h, err := mounts.hierV1("memory", own); err == nil {
			m.memory = h
		} else {
			m.log.Warn("cgroup v1 memory hierarchy unusable: no OOM ends or memory peaks", "error", err)
		}
	default:
		return nil, fmt.Errorf("cgroup version %d: want 1 or 2", v)
	}
	m.treeLock = -1
	for _, name := range []string{"", User, PTY, Jupyter} {
		if _, err := m.group(name, true); err != nil {
			if m.owner {
				m.removeTree()
			}
			closeFD(m.treeLock)
			return nil, fmt.Errorf("%w: make envd's cgroups: %v", ErrUnavailable, err)
		}
		if name == "" {
			m.lockTree()
		}
	}
	if m.v2 == nil {
		for _, h := range m.hiers() {
			m.ownTasks = append(m.ownTasks, openFile(filepath.Join(h.own, "tasks"), unix.O_WRONLY))
		}
	}
	return m, nil
}

// Version is the cgroup version in use.
func (m *Manager) Version() Version { return m.version }

// Root is the name of envd's tree (Options.Root).
func (m *Manager) Root() string { return m.root }

// Dirs lists the directories of cgroup rel (relative to envd's root) in
// every hierarchy used, the freezer's (or v2's) first.
func (m *Manager) dirs(rel string) []string {
	var out []string
	for _, h := range m.hiers() {
		out = append(out, filepath.Join(h.own, m.root, rel))
	}
	return out
}

func (m *Manager) hiers() []*hier {
	if m.v2 != nil {
		return []*hier{m.v2}
	}
	hs := []*hier{m.freezer}
	if m.memory != nil {
		hs = append(hs, m.memory)
	}
	return hs
}

// Group is one cgroup of envd's tree, in every hierarchy used.
type Group struct {
	m   *Manager
	rel string // relative to envd's root
	// parent is set on a per-process cgroup NewChild gave: its Start
	// refills the parent's spares.
	parent *Group
	// files a cgroup made ahead (spare.go) has open for its process: a
	// start then writes, and its end reads, without a path lookup (one
	// open and close fewer for each).
	files
}

// Group returns the workload cgroup name (User, PTY or Jupyter).
func (m *Manager) Group(name string) *Group { return &Group{m: m, rel: name} }

// group makes (mkdir -p) cgroup rel in every hierarchy when make is set.
func (m *Manager) group(rel string, mk bool) (*Group, error) {
	g := &Group{m: m, rel: rel}
	if mk {
		for _, d := range m.dirs(rel) {
			if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				g.Remove()
				return nil, fmt.Errorf("make cgroup: %w", err)
			}
		}
		if m.v2 != nil {
			m.enableControllers(filepath.Join(m.v2.own, m.root, rel))
		}
	}
	return g, nil
}

// remake makes envd's root and the cgroup rel under it again, in every
// hierarchy, where they are missing.
func (m *Manager) remake(rel string) error {
	for _, h := range m.hiers() {
		if h == nil {
			continue
		}
		dir := filepath.Join(h.own, m.root)
		for _, name := range append([]string{""}, strings.Split(rel, string(filepath.Separator))...) {
			dir = filepath.Join(dir, name)
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("make cgroup %s again: %w", dir, err)
			}
			if h == m.v2 {
				m.enableControllers(dir)
			}
		}
	}
	m.log.Warn("envd's cgroup was removed from outside: made again", "cgroup", filepath.Join(m.root, rel))
	return nil
}

// enableControllers turns on, in dir's children, the controllers envd reads
// (memory: OOM kills and peaks; pids, cpu). Best effort: a controller not
// offered, or refused (dir holds processes), is left off.
func (m *Manager) enableControllers(dir string) {
	avail, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return
	}
	for _, c := range strings.Fields(string(avail)) {
		if c == "memory" || c == "pids" || c == "cpu" {
			_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0)
		}
	}
}

// NewChild returns a new cgroup of its own under g for one process: one
// made ahead when there is one (see spare.go), else one made now.
func (g *Group) NewChild() (*Group, error) {
	c := g.m.spares.take(g.rel)
	if c == nil {
		var err error
		if c, err = g.newChild(); err != nil {
			return nil, err
		}
	}
	c.parent = g
	return c, nil
}

// newChild makes a cgroup of its own under g for one process.
// Its name is new: a name another envd in the same cgroup (tests run
// several) took already is skipped.
//
// A parent that is gone (removed from outside, or by another envd sharing
// the tree's name as it shut down) is made again.
func (g *Group) newChild() (*Group, error) {
	g.m.retryLingering()
	for range 64 {
		rel := filepath.Join(g.rel, "p"+strconv.FormatUint(g.m.seq.Add(1), 10))
		err := os.Mkdir(g.m.dirs(rel)[0], 0o755)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if errors.Is(err, os.ErrNotExist) {
			if err := g.m.remake(g.rel); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("make cgroup: %w", err)
		}
		child, err := g.m.group(rel, true)
		if errors.Is(err, os.ErrNotExist) { // gone in another hierarchy
			if err := g.m.remake(g.rel); err != nil {
				return nil, err
			}
			continue
		}
		return child, err
	}
	return nil, fmt.Errorf("make cgroup under %s: every name tried is taken", g.rel)
}

// Path is g's path relative to envd's root.
func (g *Group) Path() string { return g.rel }

// Remove removes g from every hierarchy. A cgroup that still holds
// processes (orphans of g's process) cannot go: it is kept, still frozen
// with the workload, and removed later once empty.
func (g *Group) Remove() error {
	g.closeFiles()
	var errs []error
	ds := g.m.dirs(g.rel)
	for i := len(ds) - 1; i >= 0; i-- {
		if err := os.Remove(ds[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	err := errors.Join(errs...)
	g.m.lingerMu.Lock()
	if err != nil {
		if len(g.m.linger) < maxLinger {
			g.m.linger[g.rel] = g
		}
	} else {
		delete(g.m.linger, g.rel)
	}
	g.m.lingerMu.Unlock()
	return err
}

// maxLinger bounds the busy per-process cgroups remembered for removal.
const maxLinger = 1024

// retryLingering removes the per-process cgroups that were busy and are
// empty now.
func (m *Manager) retryLingering() {
	m.lingerMu.Lock()
	gs := make([]*Group, 0, len(m.linger))
	for _, g := range m.linger {
		gs = append(gs, g)
	}
	m.lingerMu.Unlock()
	for _, g := range gs {
		g.Remove()
	}
}

// Close removes envd's tree, as far as it is empty (the tests' trees; envd
// leaves its own in place at exit only if processes outlive it).
func (m *Manager) Close() error {
	if m == nil {
		return nil
	}
	m.spares.close()
	// A v1 start's thread may be in its child's cgroup: it holds placing
	// until it is back.
	m.placing.Lock()
	defer m.placing.Unlock()
	for _, fd := range m.ownTasks {
		closeFD(fd)
	}
	m.ownTasks = nil
	defer func() { closeFD(m.treeLock); m.treeLock = -1 }()
	if !m.owner {
		return nil
	}
	return m.removeTree()
}

// lockTree takes the tree's lock (see Manager.treeLock). A tree another
// live envd holds is used as well (envds may share one), but left to it.
// When the lock cannot be tried at all, this Manager owns the tree, as
// if it were alone.
func (m *Manager) lockTree() {
	dir := m.dirs("")[0]
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		m.log.Warn("cannot open envd's cgroup tree to lock it", "dir", dir, "error", err)
		m.owner = true
		return
	}
	switch err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); {
	case err == nil:
		m.treeLock, m.owner = fd, true
	case errors.Is(err, unix.EWOULDBLOCK):
		unix.Close(fd)
		m.log.Warn("another running envd uses this cgroup tree: this one uses it too, and leaves it in place when it stops (give each envd its own -cgroup-tree)", "dir", dir)
	default:
		unix.Close(fd)
		m.log.Warn("cannot lock envd's cgroup tree", "dir", dir, "error", err)
		m.owner = true
	}
}

func (m *Manager) removeTree() error {
	var errs []error
	for _, h := range m.hiers() {
		if h == nil {
			continue
		}
		if err := removeAll(filepath.Join(h.own, m.root)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeAll removes an empty cgroup tree bottom-up (rmdir: a cgroup's files
// are not files).
func removeAll(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var errs []error
	for _, e := range ents {
		if e.IsDir() {
			if err := removeAll(filepath.Join(dir, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dir, err))
	}
	return errors.Join(errs...)
}

// mounts is what /proc/self/mountinfo says of cgroup filesystems.
type mounts struct {
	root string                       // the cgroup filesystem root they were read beneath
	v2   map[string]string            // mount point -> root of the mount
	v1   map[string]map[string]string // controller -> mount point -> root
}

// readMounts reads the cgroup mounts at fsRoot or beneath it.
func readMounts(fsRoot string) (*mounts, error) {
	all, err := mountinfo.Read()
	if err != nil {
		return nil, err
	}
	return mountsOf(fsRoot, all), nil
}

// mountsOf keeps the cgroup mounts of all at fsRoot or beneath it.
func mountsOf(fsRoot string, all []mountinfo.Mount) *mounts {
	ms := &mounts{root: fsRoot, v2: map[string]string{}, v1: map[string]map[string]string{}}
	for _, m := range all {
		if m.Point != fsRoot && !strings.HasPrefix(m.Point, strings.TrimSuffix(fsRoot, "/")+"/") {
			continue
		}
		switch m.FSType {
		case "cgroup2":
			ms.v2[m.Point] = m.Root
		case "cgroup":
			for _, opt := range m.Super {
				if ms.v1[opt] == nil {
					ms.v1[opt] = map[string]string{}
				}
				ms.v1[opt][m.Point] = m.Root
			}
		}
	}
	return ms
}

// ownCgroups is /proc/self/cgroup: controller ("" for v2) -> path.
type ownCgroups map[string]string

func readOwn() (ownCgroups, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	return parseOwn(b), nil
}

// parseOwn reads a /proc/PID/cgroup file.
func parseOwn(b []byte) ownCgroups {
	own := ownCgroups{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			own[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			own[c] = parts[2]
		}
	}
	return own
}

// dirOf maps a cgroup path to its directory in a mount of the hierarchy
// whose root is root; ok is false when the mount does not show it.
func dirOf(point, root, path string) (string, bool) {
	rel, err := filepath.Rel(root, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return filepath.Join(point, rel), true
}

func (ms *mounts) hierV2(own ownCgroups) (*hier, error) {
	path, ok := own[""]
	if !ok {
		return nil, fmt.Errorf("%w: envd is in no cgroup v2 (no 0:: line in /proc/self/cgroup)", ErrUnavailable)
	}
	for point, root := range ms.v2 {
		if d, ok := dirOf(point, root, path); ok {
			return &hier{mount: point, own: d}, nil
		}
	}
	return nil, fmt.Errorf("%w: no cgroup2 mount at or beneath %s shows envd's cgroup %s", ErrUnavailable, ms.root, path)
}

func (ms *mounts) hierV1(ctl string, own ownCgroups) (*hier, error) {
	path, ok := own[ctl]
	if !ok {
		return nil, fmt.Errorf("%w: no cgroup v1 %s hierarchy in /proc/self/cgroup", ErrUnavailable, ctl)
	}
	for point, root := range ms.v1[ctl] {
		if d, ok := dirOf(point, root, path); ok {
			return &hier{mount: point, own: d}, nil
		}
	}
	return nil, fmt.Errorf("%w: no cgroup v1 %s mount at or beneath %s shows envd's cgroup %s", ErrUnavailable, ctl, ms.root, path)
}
