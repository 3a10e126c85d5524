package filesystem

import (
	"errors"
	"fmt"

	"github.com/envd-dev/envd/internal/identity"
)

// A live upgrade (internal/handover, docs/upgrade.md) hands the polling
// watchers (CreateWatcher) to the envd exec'd next, with their unread
// events: HandoverWatchers stops them and describes them, AdoptWatchers
// watches again under the same ids. What changes while neither envd
// watches (during the exec) is not reported; the events handed
// over lose their entries (IncludeEntry); a watcher that had failed
// (fallen behind) is not handed over, and polling it then says it is not
// found. internal/daemon turns WatcherState into the handover's record
// and back.

// WatcherState is a polling watcher as a live upgrade hands it over.
type WatcherState struct {
	ID      string // the id its clients poll it by
	Path    string // the watched directory, absolute and clean
	Options WatchOptions
	// Owner is the user it watches as, by name; OwnerUID is that user's
	// uid when it was handed over, so AdoptWatchers can tell the account
	// was replaced meanwhile.
	Owner    string
	OwnerUID uint32
	// Events are its unread events, oldest first, without their entries.
	Events []Event
}

// HandoverWatchers stops every polling watcher and returns them with their
// unread events. No watcher is created after it.
func (f *Files) HandoverWatchers() []WatcherState {
	r := f.watchers
	r.mu.Lock()
	r.closed = true
	all := r.byID
	r.byID = map[string]*polled{}
	r.mu.Unlock()
	var out []WatcherState
	for id, p := range all {
		w := p.w
		w.closeForHandover()
		evs, err := w.Drain()
		if err != nil && !errors.Is(err, ErrClosed) {
			f.log.Warn("a watcher that failed is not handed over", "path", w.root, "error", err)
			continue
		}
		st := WatcherState{ID: id, Path: w.root, Options: w.opts, Owner: w.u.Name, OwnerUID: w.u.UID}
		for _, ev := range evs {
			st.Events = append(st.Events, Event{Name: ev.Name, Type: ev.Type})
		}
		out = append(out, st)
	}
	return out
}

// AdoptWatchers watches again what HandoverWatchers handed over, under the
// same ids, with the unread events queued first. A watcher that cannot be
// (its directory or user is gone) is logged and left out.
func (f *Files) AdoptWatchers(ws []WatcherState) {
	for _, st := range ws {
		u, err := identity.Lookup(st.Owner)
		if err == nil && u.UID != st.OwnerUID {
			err = fmt.Errorf("user %s is uid %d now, was %d", st.Owner, u.UID, st.OwnerUID)
		}
		var w *Watch
		if err == nil {
			w, err = f.Watch(u, st.Path, st.Options)
		}
		if err == nil && len(st.Events) > 0 {
			evs := make([]Event, 0, len(st.Events))
			for _, ev := range st.Events {
				evs = append(evs, Event{Name: ev.Name, Type: ev.Type})
			}
			w.mu.Lock()
			w.events = append(evs, w.events...)
			w.mu.Unlock()
			w.notify()
		}
		if err == nil {
			_, err = f.watchers.register(st.ID, w)
		}
		if err != nil {
			f.log.Warn("a watcher handed over cannot watch again; polling it says it is not found", "path", st.Path, "error", err)
			continue
		}
	}
	if len(ws) > 0 {
		f.log.Info("watchers handed over", "watchers", len(ws))
	}
}

// closeForHandover is Close, but that the notifications the hub routed
// here and the pump did not take yet become events too, rather than lost.
func (w *Watch) closeForHandover() {
	w.closeOnce.Do(func() {
		close(w.stop)
		<-w.done
		w.rawMu.Lock()
		batch := w.raw
		w.raw = nil
		w.rawMu.Unlock()
		if len(batch) > 0 && !w.failed() {
			var out []Event
			r := w.f.resolverFor(w.u)
			err := w.f.read(w.u, func() error {
				names := newNameCache()
				for _, ev := range batch {
					w.convert(r, ev, names, &out)
				}
				return nil
			})
			if err == nil {
				w.mu.Lock()
				w.events = append(w.events, out...)
				w.mu.Unlock()
			}
		}
		w.dropAll()
		w.f.limits.dropWatch()
		w.fail(newErr(ErrClosed, nil, "watch of %s was stopped", w.root))
	})
}
