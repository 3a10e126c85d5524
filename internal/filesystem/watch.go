package filesystem

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/identity"
)

// EventType is what happened to a path below a watched directory.
type EventType int

const (
	EventCreate EventType = iota + 1
	EventWrite
	EventRemove
	EventRename
	EventChmod
)

func (t EventType) String() string {
	switch t {
	case EventCreate:
		return "create"
	case EventWrite:
		return "write"
	case EventRemove:
		return "remove"
	case EventRename:
		return "rename"
	case EventChmod:
		return "chmod"
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// Event is one change. Name is relative to the watched directory, with "/"
// between elements; "." is the directory itself. Entry is set when the watch
// asked for entries, on create, write and chmod only, when the path could
// still be described.
type Event struct {
	Name  string
	Type  EventType
	Entry *Entry
}

// WatchOptions says what a watch reports.
type WatchOptions struct {
	Recursive          bool // every subdirectory too, new ones included
	IncludeEntry       bool
	AllowNetworkMounts bool // else a directory on NFS, SMB or FUSE is refused
}

// Watch reports the changes below one directory. Its events wait in a
// bounded queue until Drain takes them; a reader that lets the queue fill
// loses the watch, which fails with ErrLagging. The zero value is not usable:
// get one from Files.Watch, and Close it.
type Watch struct {
	f    *Files
	u    *identity.User
	root string
	opts WatchOptions

	// raw holds the notifications the hub routed here, for pump: at most
	// Options.WatchQueue, past which the watch is lagging. The hub never
	// blocks on it. It grows with what waits, so an idle watch costs little
	// memory whatever its limit.
	rawMu    sync.Mutex
	raw      []fsnotify.Event // guarded by rawMu
	rawReady chan struct{}    // signalled when raw gets a notification
	lagged   atomic.Bool
	dirs     map[string]bool // directories this watch holds in the hub; owned by pump

	mu     sync.Mutex
	events []Event // guarded by mu
	err    error   // guarded by mu; once set, the watch is over
	ready  chan struct{}

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// networkFS are the filesystems whose changes made elsewhere inotify
// cannot see, by statfs magic.
var networkFS = map[int64]string{
	unix.NFS_SUPER_MAGIC:  "NFS",
	unix.SMB_SUPER_MAGIC:  "SMB",
	unix.SMB2_SUPER_MAGIC: "SMB2",
	unix.CIFS_SUPER_MAGIC: "CIFS",
	unix.FUSE_SUPER_MAGIC: "FUSE",
}

// Watch starts watching dir as u. Changes made once it returns are
// reported.
func (f *Files) Watch(u *identity.User, dir string, o WatchOptions) (*Watch, error) {
	if err := checkPath(dir); err != nil {
		return nil, err
	}
	if err := f.limits.addWatch(dir); err != nil {
		return nil, err
	}
	w := &Watch{
		f: f, u: u, root: filepath.Clean(dir), opts: o,
		rawReady: make(chan struct{}, 1),
		dirs:     map[string]bool{},
		ready:    make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	// envd's one inotify instance is envd's, whoever asks first: made here,
	// before acting as u.
	if _, err := f.hub.watcher(); err != nil {
		f.limits.dropWatch()
		return nil, err
	}
	r := f.resolverFor(u)
	err := f.read(u, func() error {
		fi, err := r.stat(w.root)
		if err != nil {
			if kindOf(err) == ErrNotFound {
				return notFound(dir, err)
			}
			return osErr(u.Name, "watch", dir, err)
		}
		if !fi.IsDir() {
			return newErr(ErrInvalid, nil, "path %s is not a directory", dir)
		}
		if !o.AllowNetworkMounts {
			var st unix.Statfs_t
			if err := r.statfs(w.root, &st); err == nil {
				if name, ok := networkFS[int64(st.Type)]; ok {
					return newErr(ErrInvalid, nil, "cannot watch path on network filesystem: %s is on %s, where changes made elsewhere are not seen; allow network mounts to watch it anyway", dir, name)
				}
			}
		}
		return w.addTree(r, w.root, true, nil, nil)
	})
	if err != nil {
		w.dropAll()
		f.limits.dropWatch()
		return nil, err
	}
	go w.pump()
	return w, nil
}

// Ready is signalled when Drain has something to return.
func (w *Watch) Ready() <-chan struct{} { return w.ready }

// Drain takes the events queued so far, and the error that ended the watch
// if it ended. Events queued before the error come first.
func (w *Watch) Drain() ([]Event, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ev := w.events
	w.events = nil
	return ev, w.err
}

// Close stops the watch. It is safe to call more than once.
func (w *Watch) Close() {
	w.closeOnce.Do(func() {
		close(w.stop)
		<-w.done
		w.dropAll()
		w.f.limits.dropWatch()
		w.fail(newErr(ErrClosed, nil, "watch of %s was stopped", w.root))
	})
}

func (w *Watch) notify() {
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// fail ends the watch with err, unless it already ended.
func (w *Watch) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
	w.notify()
}

func (w *Watch) failed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err != nil
}

// push is called by the hub, which must never block.
func (w *Watch) push(ev fsnotify.Event) {
	w.rawMu.Lock()
	full := len(w.raw) >= w.f.opts.WatchQueue
	if !full {
		w.raw = append(w.raw, ev)
	}
	w.rawMu.Unlock()
	if full {
		if !w.lagged.Swap(true) {
			w.fail(w.laggingErr())
		}
		return
	}
	select {
	case w.rawReady <- struct{}{}:
	default:
	}
}

func (w *Watch) laggingErr() error {
	return newErr(ErrLagging, nil, "watch of %s fell behind: more than %d events waited to be read, and some were lost; watch again", w.root, w.f.opts.WatchQueue)
}

// pump turns notifications into events until the watch stops or fails.
func (w *Watch) pump() {
	defer close(w.done)
	// A directory below the root this watch holds reports its own chmod
	// or move, as its parent does, a few notifications apart: recent holds
	// the last few such notifications of such directories, and each drops
	// one echo. Files are never deduplicated: the same change made twice
	// (an editor saving twice through the same temporary file) is two.
	var recent [4]fsnotify.Event
	echo := func(ev fsnotify.Event) bool {
		if ev.Op&(fsnotify.Chmod|fsnotify.Rename) == 0 {
			return false
		}
		for i, r := range recent {
			if r == ev {
				recent[i] = fsnotify.Event{}
				return true
			}
		}
		if ev.Name != w.root && w.dirs[ev.Name] {
			copy(recent[1:], recent[:len(recent)-1])
			recent[0] = ev
		}
		return false
	}
	for {
		select {
		case <-w.stop:
			return
		case <-w.rawReady:
		}
		// At most 512 at a time, so the reader gets each part as it is ready.
		w.rawMu.Lock()
		n := min(len(w.raw), 512)
		batch := slices.Clone(w.raw[:n])
		w.raw = w.raw[n:]
		if len(w.raw) == 0 {
			w.raw = nil // its array goes: memory follows what waits
		} else {
			select {
			case w.rawReady <- struct{}{}:
			default:
			}
		}
		w.rawMu.Unlock()
		if len(batch) == 0 {
			continue
		}
		if w.failed() {
			return
		}
		var out []Event
		r := w.f.resolverFor(w.u)
		err := w.f.read(w.u, func() error {
			names := newNameCache()
			for _, ev := range batch {
				if echo(ev) {
					continue
				}
				w.convert(r, ev, names, &out)
			}
			return nil
		})
		if err != nil {
			w.fail(err)
			return
		}
		if len(out) > 0 {
			w.mu.Lock()
			if len(w.events)+len(out) > w.f.opts.WatchQueue {
				w.mu.Unlock()
				w.fail(w.laggingErr())
				return
			}
			w.events = append(w.events, out...)
			w.mu.Unlock()
			w.notify()
		}
	}
}

// convert appends the events one notification stands for, in the order
// create, rename, chmod, write, remove. It runs inside Files.read.
func (w *Watch) convert(r *resolver, ev fsnotify.Event, names *nameCache, out *[]Event) {
	if IsTemp(ev.Name) {
		return
	}
	name := w.rel(ev.Name)
	if ev.Has(fsnotify.Create) {
		fi, err := r.lstat(ev.Name)
		if err != nil {
			// Gone already (moved or removed), or envd's own /proc
			// (ownproc.go): report what can be known.
			*out = append(*out, Event{Name: name, Type: EventCreate})
			if w.f.commits.hasPath(ev.Name) {
				*out = append(*out, Event{Name: name, Type: EventWrite})
			}
		} else {
			w.emitCreated(r, ev.Name, name, fi, names, out)
			if w.opts.Recursive && fi.IsDir() {
				if err := w.addTree(r, ev.Name, false, names, out); err != nil {
					w.fail(err)
				}
			}
		}
	}
	if ev.Has(fsnotify.Rename) {
		*out = append(*out, Event{Name: name, Type: EventRename})
		w.dropTree(ev.Name)
	}
	if ev.Has(fsnotify.Chmod) {
		*out = append(*out, w.event(r, ev.Name, name, EventChmod, names))
	}
	if ev.Has(fsnotify.Write) {
		*out = append(*out, w.event(r, ev.Name, name, EventWrite, names))
	}
	if ev.Has(fsnotify.Remove) {
		*out = append(*out, Event{Name: name, Type: EventRemove})
		w.dropTree(ev.Name)
	}
}

// emitCreated reports a path that appeared; a file an upload just put in
// place is also reported written.
func (w *Watch) emitCreated(r *resolver, path, name string, fi fs.FileInfo, names *nameCache, out *[]Event) {
	ev := Event{Name: name, Type: EventCreate}
	if w.opts.IncludeEntry {
		e := r.describe(path, fi, names)
		ev.Entry = &e
	}
	*out = append(*out, ev)
	if id, ok := idOf(fi); ok && fi.Mode().IsRegular() && w.f.commits.has(id, path) {
		ev.Type = EventWrite
		*out = append(*out, ev)
	}
}

func (w *Watch) event(r *resolver, path, name string, t EventType, names *nameCache) Event {
	ev := Event{Name: name, Type: t}
	if w.opts.IncludeEntry {
		if e, _, err := r.lstatEntry(path, names); err == nil {
			ev.Entry = &e
		}
	}
	return ev
}

func (w *Watch) rel(path string) string {
	r, err := filepath.Rel(w.root, path)
	if err != nil {
		return filepath.ToSlash(path)
	}
	return filepath.ToSlash(r)
}

// addTree watches dir and, for a recursive watch, every directory below it.
// For a directory that appeared after the watch began (out != nil), what is
// already inside it is reported created: it may have been made before the
// directory was watched, as by mkdir -p. It runs inside Files.read, so in
// strict mode a directory u may not read is not watched. Only an error on the root, or
// running out of inotify watches or of envd's MaxWatchedDirs, is returned;
// other directories that cannot be watched (gone, unreadable) are skipped.
func (w *Watch) addTree(r *resolver, dir string, root bool, names *nameCache, out *[]Event) error {
	// Not a directory of envd's own /proc (ownproc.go): the root as the
	// request named it, a directory below as it is (never a link).
	if err := r.check(dir, root); err != nil {
		if root {
			return osErr(w.u.Name, "watch", dir, err)
		}
		return nil
	}
	counted := w.dirs[dir]
	if !counted {
		if err := w.f.limits.addDir(w.root, dir); err != nil {
			return err
		}
	}
	if err := w.f.hub.add(dir, w); err != nil {
		if !counted {
			w.f.limits.dropDirs(1)
		}
		switch {
		case errors.Is(err, unix.ENOSPC):
			return newErr(ErrNoSpace, err, "cannot watch %s: the system's limit of inotify watches is reached (fs.inotify.max_user_watches)", dir)
		case errors.Is(err, unix.EMFILE):
			return newErr(ErrNoSpace, err, "cannot watch %s: the system's limit of inotify instances is reached (fs.inotify.max_user_instances)", dir)
		case root:
			return osErr(w.u.Name, "watch", dir, err)
		}
		return nil
	}
	w.dirs[dir] = true
	if !w.opts.Recursive {
		return nil
	}
	des, err := r.readDir(dir)
	if err != nil {
		return nil
	}
	for _, de := range des {
		p := filepath.Join(dir, de.Name())
		if IsTemp(p) {
			continue
		}
		if out != nil {
			fi, err := r.lstat(p)
			if err != nil {
				continue
			}
			w.emitCreated(r, p, w.rel(p), fi, names, out)
		}
		if de.IsDir() {
			if err := w.addTree(r, p, false, names, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// dropTree stops watching dir and the directories below it: it was removed
// or moved away (a move shows up again as a create of the new name).
func (w *Watch) dropTree(dir string) {
	for d := range w.dirs {
		if d == w.root {
			continue
		}
		if d == dir || (len(d) > len(dir) && d[:len(dir)] == dir && d[len(dir)] == '/') {
			w.f.hub.remove(d, w)
			delete(w.dirs, d)
			w.f.limits.dropDirs(1)
		}
	}
}

func (w *Watch) dropAll() {
	w.f.limits.dropDirs(len(w.dirs))
	for d := range w.dirs {
		w.f.hub.remove(d, w)
		delete(w.dirs, d)
	}
}

// hub owns envd's one inotify instance and routes its notifications to the
// watches that asked for each directory. It never waits on a watch.
//
// inotify watches inodes, not paths: a directory reached by two names (a
// symlink, a bind mount) has one kernel watch, and fsnotify reports its
// changes under the one name it was first added by. So the hub keeps one
// kernel watch per directory, by identity, and gives each watch the
// changes under the name that watch used.
type hub struct {
	log *slog.Logger

	addMu sync.Mutex // serializes changes to the kernel's watch list

	// byID, byName and subs change only with both addMu and mu held, so
	// either lock is enough to read them.
	mu     sync.Mutex
	w      *fsnotify.Watcher    // guarded by mu; nil until first needed
	byID   map[fileID]*dirWatch // the directory's kernel watch
	byName map[string]*dirWatch // the name fsnotify reports, last added
	subs   map[dirSub]*dirWatch // what each watch holds, by its own name
	closed bool                 // guarded by mu
	done   chan struct{}        // closed when the loop ends
}

// dirWatch is the kernel's watch of one directory.
type dirWatch struct {
	id   fileID
	name string              // the name fsnotify knows it by, and reports
	subs map[dirSub]struct{} // who holds it; it goes with the last one
}

// dirSub is one watch holding a directory by one name: a watch may hold
// the same directory by two names, both below its root.
type dirSub struct {
	w   *Watch
	dir string
}

func newHub(log *slog.Logger) *hub {
	return &hub{
		log:    log,
		byID:   map[fileID]*dirWatch{},
		byName: map[string]*dirWatch{},
		subs:   map[dirSub]*dirWatch{},
	}
}

func (h *hub) watcher() (*fsnotify.Watcher, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, newErr(ErrClosed, nil, "envd is shutting down")
	}
	if h.w == nil {
		fw, err := fsnotify.NewWatcher()
		if err != nil {
			return nil, err
		}
		h.w = fw
		h.done = make(chan struct{})
		go h.loop(fw, h.done)
	}
	return h.w, nil
}

// errDirMoved says a directory's name led to another directory between
// two looks at it.
var errDirMoved = errors.New("the directory changed while it was being watched")

// dirID stats dir as the caller, following a final symlink as inotify
// does.
func dirID(dir string) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return fileID{}, err
	}
	return fileID{dev: st.Dev, ino: st.Ino}, nil
}

// add asks the kernel to watch dir for w. Called as the user in strict mode
// (Files.read), so the kernel checks that the user may read dir, and the
// stats here see what the user's lookup sees.
func (h *hub) add(dir string, w *Watch) error {
	fw, err := h.watcher()
	if err != nil {
		return err
	}
	h.addMu.Lock()
	defer h.addMu.Unlock()
	// The name is looked up once before the kernel's watch and once after:
	// if it led elsewhere meanwhile, what the kernel watches is unknown, so
	// try again, a few times.
	for range 3 {
		err = h.addOnce(fw, dir, w)
		if !errors.Is(err, errDirMoved) {
			return err
		}
	}
	return err
}

// addOnce is add, once; addMu is held.
func (h *hub) addOnce(fw *fsnotify.Watcher, dir string, w *Watch) error {
	id, err := dirID(dir)
	if err != nil {
		return err
	}
	if k := h.byID[id]; k != nil && k.name != dir && h.known(fw, k) {
		if leadsTo(k.name, id) {
			return h.share(fw, k, dir, id, w)
		}
		// fsnotify's name for it leads elsewhere now: the directory (or
		// one above it) was moved, or that name was a link since changed.
		// fsnotify drops a moved directory's watch once it reads the move,
		// and would take this name down with it; and its holders let it
		// go as they see the move. So drop it now, and watch the
		// directory afresh by this name. Given to fsnotify while it still
		// held the old one, this name would have been recorded nowhere.
		h.mu.Lock()
		delete(h.byName, k.name)
		h.mu.Unlock()
		fw.Remove(k.name)
	}
	// A new directory, or one fsnotify knows by this very name (another
	// watch of it, a name watched again), or one fsnotify forgot (moved
	// or deleted while a slow watch still held it).
	if err := fw.Add(dir); err != nil {
		return err
	}
	after, err := dirID(dir)
	if err == nil && after != id {
		err = errDirMoved
	}
	if err != nil {
		// Watched, but what is unknown: unless the name is one of the
		// hub's, let it go.
		if h.byName[dir] == nil {
			fw.Remove(dir)
		}
		return err
	}
	k := h.byID[id]
	if k == nil || k.name != dir {
		// Unknown, or known by a name fsnotify forgot: fsnotify now
		// reports it by this one.
		k = &dirWatch{id: id, name: dir, subs: map[dirSub]struct{}{}}
	}
	h.mu.Lock()
	h.byID[id] = k
	// fsnotify now reports this name for this directory, whatever it did
	// before (a directory mounted over, say).
	h.byName[dir] = k
	h.mu.Unlock()
	h.hold(fw, k, dirSub{w, dir})
	return nil
}

// share has w hold k, the kernel's watch of the directory dir names too.
// Given to fsnotify, dir would find the same kernel watch and be recorded
// nowhere (fsnotify keeps the first name), or, were dir its name for
// another directory, that one would lose its watch. But the kernel would
// have checked that the caller may read the directory: check it.
func (h *hub) share(fw *fsnotify.Watcher, k *dirWatch, dir string, id fileID, w *Watch) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	unix.Close(fd)
	if err != nil {
		return err
	}
	if (fileID{dev: st.Dev, ino: st.Ino}) != id {
		return errDirMoved
	}
	h.hold(fw, k, dirSub{w, dir})
	return nil
}

// leadsTo tells whether name still leads to the directory id. Only a
// name that surely does not (gone, or another directory) says no: one the
// caller may not look up is someone else's, and stays theirs.
func leadsTo(name string, id fileID) bool {
	got, err := dirID(name)
	if err != nil {
		return !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR)
	}
	return got == id
}

// known tells whether fsnotify still watches k by its name: it forgets a
// directory moved or deleted, while the watches holding it may not have
// seen that yet. Asked only for a second name, which is rare, as it lists
// every watch.
func (h *hub) known(fw *fsnotify.Watcher, k *dirWatch) bool {
	return h.byName[k.name] == k && slices.Contains(fw.WatchList(), k.name)
}

// hold records s as holding k, and lets go of what s held before (the
// name led elsewhere then); addMu is held.
func (h *hub) hold(fw *fsnotify.Watcher, k *dirWatch, s dirSub) {
	h.mu.Lock()
	old := h.subs[s]
	var drop string
	if old != nil && old != k {
		drop = h.release(old, s)
	}
	h.subs[s] = k
	k.subs[s] = struct{}{}
	h.mu.Unlock()
	if drop != "" {
		fw.Remove(drop)
	}
}

// release lets go of s's hold of k and returns the name to give
// fsnotify.Remove if k's kernel watch should go: none while someone else
// holds it, by whatever name. Both locks are held.
func (h *hub) release(k *dirWatch, s dirSub) string {
	delete(h.subs, s)
	delete(k.subs, s)
	if len(k.subs) > 0 {
		return ""
	}
	if h.byID[k.id] == k {
		delete(h.byID, k.id)
	}
	// A name fsnotify gave since to another directory is that one's.
	if h.byName[k.name] != k {
		return ""
	}
	delete(h.byName, k.name)
	return k.name
}

func (h *hub) remove(dir string, w *Watch) {
	h.addMu.Lock()
	defer h.addMu.Unlock()
	h.mu.Lock()
	s := dirSub{w, dir}
	var drop string
	if k := h.subs[s]; k != nil {
		drop = h.release(k, s)
	}
	fw := h.w
	h.mu.Unlock()
	if drop != "" && fw != nil {
		// The kernel drops the watch of a removed directory by itself, so
		// this may find nothing to remove.
		fw.Remove(drop)
	}
}

func (h *hub) loop(fw *fsnotify.Watcher, done chan struct{}) {
	defer close(done)
	for {
		select {
		case ev, ok := <-fw.Events:
			if !ok {
				return
			}
			h.dispatch(ev)
		case err, ok := <-fw.Errors:
			if !ok {
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				h.failAll(newErr(ErrLagging, err, "the kernel's queue of file change notifications overflowed (fs.inotify.max_queued_events) and events were lost; watch again"))
				continue
			}
			h.log.Warn("file watch failed", "error", err)
		}
	}
}

// dispatch routes one notification: to the watches of its directory, and,
// for a change to a watched root itself, to the watches rooted there. Each
// gets it under the name it watches by, whichever name fsnotify used.
func (h *hub) dispatch(ev fsnotify.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	dir := filepath.Dir(ev.Name)
	if k := h.byName[dir]; k != nil {
		base := filepath.Base(ev.Name)
		for s := range k.subs {
			e := ev
			e.Name = filepath.Join(s.dir, base)
			s.w.push(e)
		}
	}
	if dir == ev.Name {
		return
	}
	if k := h.byName[ev.Name]; k != nil {
		for s := range k.subs {
			if s.w.root == s.dir {
				e := ev
				e.Name = s.dir
				s.w.push(e)
			}
		}
	}
}

func (h *hub) failAll(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[*Watch]bool{}
	for s := range h.subs {
		if !seen[s.w] {
			seen[s.w] = true
			s.w.fail(err)
		}
	}
}

func (h *hub) close() error {
	h.mu.Lock()
	h.closed = true
	fw, done := h.w, h.done
	h.mu.Unlock()
	if fw == nil {
		return nil
	}
	err := fw.Close()
	<-done
	return err
}
