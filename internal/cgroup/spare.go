package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
)

// Spare cgroups: NewChild hands out a per-process cgroup made ahead, in the
// background, and the child's Start makes the next one once the process
// started. A start then skips the mkdir in each hierarchy (v1's memory
// hierarchy's is the slow one), and the refill runs while the process
// does, not while envd's thread moves between cgroups (both take the
// kernel's cgroup locks: at the same time, the start waits).
//
// On cgroup v1, a per-process cgroup whose process ended is given back
// (Release) and handed out again, rather than removed: its mkdir and rmdir
// in each hierarchy, and the kernel's work behind a memory cgroup's birth
// and death, are saved from every command's path (bench/run.sh measures
// commands.run through the SDK). A cgroup is given back only when it is empty, no
// process in it was OOM-killed (its counter would carry over) and it holds
// at most maxReusedMemory (page cache its processes left charged to it;
// its memory peak is reset to what is left, so a later process's peak
// includes at most that). v2 removes them: there a peak is reset only for
// the file descriptor that wrote it.
//
// A spare is an empty cgroup like any per-process one: freezing its parent
// freezes it, and Close removes it with the tree. One whose directory went
// (removed from outside) is dropped when taken. A live upgrade leaves the
// spares of the old image as empty cgroups in the tree, until Close.

// sparesPerParent is how many cgroups are made ahead under each parent
// (user, pty) that processes were started in.
const sparesPerParent = 2

// maxReady bounds the cgroups kept ready under each parent, made ahead and
// given back: after a burst of starts, the rest are removed.
const maxReady = 8

// maxReusedMemory is the most memory a cgroup given back may hold.
const maxReusedMemory = 4 << 20

type spares struct {
	mu      sync.Mutex
	ready   map[string][]*Group // by parent rel; guarded by mu
	filling map[string]bool     // parents being refilled; guarded by mu
	closed  bool                // guarded by mu
	wg      sync.WaitGroup      // refills
}

// take returns a spare child of parent whose directories exist, or nil.
func (s *spares) take(parent string) *Group {
	for {
		s.mu.Lock()
		list := s.ready[parent]
		if s.closed || len(list) == 0 {
			s.mu.Unlock()
			return nil
		}
		g := list[0]
		s.ready[parent] = list[1:]
		s.mu.Unlock()
		if g.exists() {
			return g
		}
		g.Remove() // what is left of it
	}
}

// Release gives back g, a per-process cgroup (from NewChild) whose process
// ended and was reaped: it is handed out again when it can be, else removed
// (see above). g must not be used after.
func (g *Group) Release() {
	if g.parent == nil || g.m.v2 != nil || !g.reusable() || !g.m.spares.put(g) {
		g.Remove()
	}
}

// reusable tells whether v1 cgroup g can hold another process, and if so
// resets its memory peak.
func (g *Group) reusable() bool {
	pids, err := readPids(filepath.Join(g.m.dirs(g.rel)[0], "cgroup.procs"))
	if err != nil || len(pids) > 0 {
		return false // gone, or orphans still in it
	}
	d, err := g.memDir()
	if err != nil {
		return true // no memory hierarchy: nothing carries over
	}
	if n, err := readKey(filepath.Join(d, "memory.oom_control"), "oom_kill"); err != nil || n > 0 {
		return false
	}
	if n, err := readUint(filepath.Join(d, "memory.usage_in_bytes")); err != nil || n > maxReusedMemory {
		return false
	}
	return writeFile(filepath.Join(d, "memory.max_usage_in_bytes"), []byte("0")) == nil
}

// put keeps g ready under its parent, unless enough are. Its files are
// opened again for the next process, outside the lock.
func (s *spares) put(g *Group) bool {
	g.closeFiles()
	again := &Group{m: g.m, rel: g.rel}
	again.openFiles()
	parent := g.parent.rel
	s.mu.Lock()
	ok := !s.closed && len(s.ready[parent]) < maxReady
	if ok {
		if s.ready == nil {
			s.ready = map[string][]*Group{}
			s.filling = map[string]bool{}
		}
		s.ready[parent] = append(s.ready[parent], again)
	}
	s.mu.Unlock()
	if !ok {
		again.closeFiles()
	}
	return ok
}

// exists tells whether g's directory is there in every hierarchy.
func (g *Group) exists() bool {
	for _, d := range g.m.dirs(g.rel) {
		if _, err := os.Lstat(d); err != nil {
			return false
		}
	}
	return true
}

// refill makes spares under parent in the background, up to
// sparesPerParent, unless a refill of it runs already.
func (s *spares) refill(parent *Group) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.filling[parent.rel] || len(s.ready[parent.rel]) >= sparesPerParent {
		return
	}
	if s.ready == nil {
		s.ready = map[string][]*Group{}
		s.filling = map[string]bool{}
	}
	s.filling[parent.rel] = true
	s.wg.Go(func() {
		for {
			g, err := parent.newChild()
			if err == nil {
				g.openFiles()
			}
			s.mu.Lock()
			if err != nil || s.closed {
				delete(s.filling, parent.rel)
				s.mu.Unlock()
				if g != nil {
					g.Remove()
				}
				if err != nil && !errors.Is(err, os.ErrNotExist) {
					parent.m.log.Debug("cannot make a spare cgroup", "parent", parent.rel, "error", err)
				}
				return
			}
			s.ready[parent.rel] = append(s.ready[parent.rel], g)
			done := len(s.ready[parent.rel]) >= sparesPerParent
			if done {
				delete(s.filling, parent.rel)
			}
			s.mu.Unlock()
			if done {
				return
			}
		}
	})
}

// close stops the refills, waits for them, and removes the spares.
func (s *spares) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wg.Wait()
	s.mu.Lock()
	var gs []*Group
	for _, list := range s.ready {
		gs = append(gs, list...)
	}
	s.ready = nil
	s.mu.Unlock()
	for _, g := range gs {
		g.Remove()
	}
}

// Spares counts the per-process cgroups made ahead and not handed out yet.
// A hierarchy sweep (Freeze) visits them as it does any cgroup.
func (m *Manager) Spares() int {
	m.spares.mu.Lock()
	defer m.spares.mu.Unlock()
	n := 0
	for _, list := range m.spares.ready {
		n += len(list)
	}
	return n
}
