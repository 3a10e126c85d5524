package filesystem

import (
	"context"
	"crypto/rand"
	"sync"
	"time"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/internal/identity"
)

// registry holds the polling watchers (CreateWatcher): watches that outlive
// the request that made them, read with GetWatcherEvents. One nobody polls
// for idle is removed.
type registry struct {
	f     *Files
	idle  time.Duration
	clock quartz.Clock

	mu         sync.Mutex
	byID       map[string]*polled // guarded by mu
	stopSweep  func()             // guarded by mu; stops the janitor, nil when none runs
	sweepEnded quartz.Waiter      // guarded by mu; the janitor's
	closed     bool               // guarded by mu
}

type polled struct {
	w        *Watch
	lastPoll time.Time // guarded by registry.mu
}

func newRegistry(f *Files, idle time.Duration, clock quartz.Clock) *registry {
	return &registry{f: f, idle: idle, clock: clock, byID: map[string]*polled{}}
}

// CreateWatcher starts a polling watcher of dir as u and returns its id.
func (f *Files) CreateWatcher(u *identity.User, dir string, o WatchOptions) (string, error) {
	w, err := f.Watch(u, dir, o)
	if err != nil {
		return "", err
	}
	return f.watchers.register("", w)
}

// register registers w under id ("": a new one) and returns the id.
func (r *registry) register(id string, w *Watch) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		w.Close()
		return "", newErr(ErrClosed, nil, "envd is shutting down")
	}
	for id == "" || r.byID[id] != nil {
		id = watcherID()
	}
	r.byID[id] = &polled{w: w, lastPoll: r.clock.Now("watchers", "poll")}
	if r.stopSweep == nil {
		ctx, cancel := context.WithCancel(context.Background())
		r.stopSweep = cancel
		r.sweepEnded = r.clock.TickerFunc(ctx, max(r.idle/4, 10*time.Millisecond), r.sweep, "watchers", "sweep")
	}
	return id, nil
}

// GetWatcherEvents returns the events the watcher collected since the
// previous call. Once the watcher failed, every call returns the failure
// (after the events it collected before).
func (f *Files) GetWatcherEvents(id string) ([]Event, error) {
	r := f.watchers
	r.mu.Lock()
	p := r.byID[id]
	if p != nil {
		p.lastPoll = r.clock.Now("watchers", "poll")
	}
	r.mu.Unlock()
	if p == nil {
		return nil, newErr(ErrNotFound, nil, "watcher with id %s not found", id)
	}
	ev, err := p.w.Drain()
	if len(ev) > 0 {
		return ev, nil
	}
	return nil, err
}

// RemoveWatcher stops the watcher.
func (f *Files) RemoveWatcher(id string) error {
	r := f.watchers
	r.mu.Lock()
	p := r.byID[id]
	delete(r.byID, id)
	r.mu.Unlock()
	if p == nil {
		return newErr(ErrNotFound, nil, "watcher with id %s not found", id)
	}
	p.w.Close()
	return nil
}

// sweep removes the watchers nobody polled for r.idle. The janitor, a
// ticker of idle/4, calls it.
func (r *registry) sweep() error {
	var idle []*polled
	r.mu.Lock()
	now := r.clock.Now("watchers", "sweep")
	for id, p := range r.byID {
		if now.Sub(p.lastPoll) > r.idle {
			idle = append(idle, p)
			delete(r.byID, id)
		}
	}
	r.mu.Unlock()
	for _, p := range idle {
		r.f.log.Info("removed a watcher nobody polled", "path", p.w.root, "idle", r.idle)
		p.w.Close()
	}
	return nil
}

func (r *registry) close() {
	r.mu.Lock()
	r.closed = true
	all := r.byID
	r.byID = map[string]*polled{}
	stop, ended := r.stopSweep, r.sweepEnded
	r.stopSweep, r.sweepEnded = nil, nil
	r.mu.Unlock()
	if stop != nil {
		stop()
		ended.Wait() // context.Canceled: it was stopped
	}
	for _, p := range all {
		p.w.Close()
	}
}

// watcherID is "w" and 20 characters of [a-z0-9], as upstream.
func watcherID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	var b [20]byte
	rand.Read(b[:])
	out := make([]byte, 0, 21)
	out = append(out, 'w')
	for _, c := range b {
		out = append(out, alphabet[int(c)%len(alphabet)])
	}
	return string(out)
}
