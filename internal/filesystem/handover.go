package filesystem

import (
	"errors"
	"fmt"

	hpb "github.com/envd-dev/envd/gen/envd/handover/v1"
	"github.com/envd-dev/envd/internal/identity"
)

// A live upgrade (internal/handover, docs/upgrade.md) hands the polling
// watchers (CreateWatcher) to the envd exec'd next, with their unread
// events: HandoverWatchers stops them and describes them, AdoptWatchers
// watches again under the same ids. What changes while neither envd
// watches (the exec, about a second) is not reported; the events handed
// over lose their entries (IncludeEntry); a watcher that had failed
// (fallen behind) is not handed over, and polling it then says it is not
// found.

// HandoverWatchers stops every polling watcher and returns them with their
// unread events. No watcher is created after it.
func (f *Files) HandoverWatchers() []*hpb.Watcher {
	r := f.watchers
	r.mu.Lock()
	r.closed = true
	all := r.byID
	r.byID = map[string]*polled{}
	r.mu.Unlock()
	var out []*hpb.Watcher
	for id, p := range all {
		w := p.w
		w.closeForHandover()
		evs, err := w.Drain()
		if err != nil && !errors.Is(err, ErrClosed) {
			f.log.Warn("a watcher that failed is not handed over", "path", w.root, "error", err)
			continue
		}
		hw := &hpb.Watcher{
			Id: id, Path: w.root, Recursive: w.opts.Recursive, IncludeEntry: w.opts.IncludeEntry,
			AllowNetworkMounts: w.opts.AllowNetworkMounts, Owner: w.u.Name, OwnerUid: w.u.UID,
		}
		for _, ev := range evs {
			hw.Events = append(hw.Events, &hpb.WatchEvent{Name: ev.Name, Type: int32(ev.Type)})
		}
		out = append(out, hw)
	}
	return out
}

// AdoptWatchers watches again what HandoverWatchers handed over, under the
// same ids, with the unread events queued first. A watcher that cannot be
// (its directory or user is gone) is logged and left out.
func (f *Files) AdoptWatchers(ws []*hpb.Watcher) {
	for _, hw := range ws {
		u, err := identity.Lookup(hw.GetOwner())
		if err == nil && u.UID != hw.GetOwnerUid() {
			err = fmt.Errorf("user %s is uid %d now, was %d", hw.GetOwner(), u.UID, hw.GetOwnerUid())
		}
		var w *Watch
		if err == nil {
			w, err = f.Watch(u, hw.GetPath(), WatchOptions{
				Recursive: hw.GetRecursive(), IncludeEntry: hw.GetIncludeEntry(), AllowNetworkMounts: hw.GetAllowNetworkMounts(),
			})
		}
		if err == nil && len(hw.GetEvents()) > 0 {
			evs := make([]Event, 0, len(hw.GetEvents()))
			for _, ev := range hw.GetEvents() {
				evs = append(evs, Event{Name: ev.GetName(), Type: EventType(ev.GetType())})
			}
			w.mu.Lock()
			w.events = append(evs, w.events...)
			w.mu.Unlock()
			w.notify()
		}
		if err == nil {
			_, err = f.watchers.register(hw.GetId(), w)
		}
		if err != nil {
			f.log.Warn("a watcher handed over cannot watch again; polling it says it is not found", "path", hw.GetPath(), "error", err)
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
