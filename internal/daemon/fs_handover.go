package daemon

import (
	hpb "github.com/envd-dev/envd/gen/envd/handover/v1"
	"github.com/envd-dev/envd/internal/filesystem"
)

// Polling watchers across a live upgrade (docs/upgrade.md): the filesystem
// domain stops and describes them (Files.HandoverWatchers) and watches
// again (Files.AdoptWatchers); these convert its WatcherState to the
// handover's record and back.

func watchersToProto(states []filesystem.WatcherState) []*hpb.Watcher {
	if len(states) == 0 {
		return nil
	}
	out := make([]*hpb.Watcher, 0, len(states))
	for _, st := range states {
		w := &hpb.Watcher{
			Id: st.ID, Path: st.Path, Recursive: st.Options.Recursive, IncludeEntry: st.Options.IncludeEntry,
			AllowNetworkMounts: st.Options.AllowNetworkMounts, Owner: st.Owner, OwnerUid: st.OwnerUID,
		}
		for _, ev := range st.Events {
			// The record's type is the domain's EventType as it is.
			w.Events = append(w.Events, &hpb.WatchEvent{Name: ev.Name, Type: int32(ev.Type)})
		}
		out = append(out, w)
	}
	return out
}

func watchersFromProto(ws []*hpb.Watcher) []filesystem.WatcherState {
	if len(ws) == 0 {
		return nil
	}
	out := make([]filesystem.WatcherState, 0, len(ws))
	for _, w := range ws {
		st := filesystem.WatcherState{
			ID: w.GetId(), Path: w.GetPath(),
			Options: filesystem.WatchOptions{
				Recursive: w.GetRecursive(), IncludeEntry: w.GetIncludeEntry(), AllowNetworkMounts: w.GetAllowNetworkMounts(),
			},
			Owner: w.GetOwner(), OwnerUID: w.GetOwnerUid(),
		}
		for _, ev := range w.GetEvents() {
			st.Events = append(st.Events, filesystem.Event{Name: ev.GetName(), Type: filesystem.EventType(ev.GetType())})
		}
		out = append(out, st)
	}
	return out
}
