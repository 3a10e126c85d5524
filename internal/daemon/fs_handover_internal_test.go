package daemon

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	hpb "github.com/envd-dev/envd/gen/envd/handover/v1"
	"github.com/envd-dev/envd/internal/filesystem"
)

// TestWatchersRoundTrip: the polling watchers a live upgrade hands over
// come back from the record as the filesystem described them, every field
// and unread event in order, and the record read back is the record
// written.
func TestWatchersRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		states []filesystem.WatcherState
	}{
		{name: "none"},
		{name: "one, no events", states: []filesystem.WatcherState{
			{ID: "wabc", Path: "/home/user", Owner: "user", OwnerUID: 1000},
		}},
		{name: "every field", states: []filesystem.WatcherState{
			{
				ID: "w0123456789abcdefghij", Path: "/tmp/w",
				Options: filesystem.WatchOptions{Recursive: true, IncludeEntry: true, AllowNetworkMounts: true},
				Owner:   "root", OwnerUID: 0,
				Events: []filesystem.Event{
					{Name: "a", Type: filesystem.EventCreate},
					{Name: "a", Type: filesystem.EventWrite},
					{Name: "d/b", Type: filesystem.EventRename},
					{Name: ".", Type: filesystem.EventChmod},
					{Name: "a", Type: filesystem.EventRemove},
				},
			},
			{ID: "wother", Path: "/srv", Options: filesystem.WatchOptions{IncludeEntry: true}, Owner: "user", OwnerUID: 1000,
				Events: []filesystem.Event{{Name: "x", Type: filesystem.EventCreate}}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := watchersToProto(tt.states)
			if len(rec) != len(tt.states) {
				t.Fatalf("%d watchers in the record, want %d", len(rec), len(tt.states))
			}
			got := watchersFromProto(rec)
			if !reflect.DeepEqual(got, tt.states) {
				t.Errorf("round trip:\n got %+v\nwant %+v", got, tt.states)
			}
			again := watchersToProto(got)
			if len(again) != len(rec) {
				t.Fatalf("%d watchers in the second record, want %d", len(again), len(rec))
			}
			for i := range rec {
				if !proto.Equal(again[i], rec[i]) {
					t.Errorf("record %d: %v, want %v", i, again[i], rec[i])
				}
			}
		})
	}
}

// TestWatchersFromProtoEntriesDropped: a record's events carry no entry,
// so an event handed over with one comes back without it, and an event
// type this envd does not know is kept as it is (the domain reports it as
// EventType(n)).
func TestWatchersFromProtoEntriesDropped(t *testing.T) {
	t.Parallel()
	e := filesystem.Entry{Name: "a", Path: "/tmp/a"}
	rec := watchersToProto([]filesystem.WatcherState{{ID: "w", Path: "/tmp", Events: []filesystem.Event{{Name: "a", Type: filesystem.EventWrite, Entry: &e}}}})
	got := watchersFromProto(rec)
	if ev := got[0].Events[0]; ev.Entry != nil || ev.Name != "a" || ev.Type != filesystem.EventWrite {
		t.Errorf("event %+v, want a write of a without its entry", ev)
	}
	got = watchersFromProto([]*hpb.Watcher{{Id: "w", Events: []*hpb.WatchEvent{{Name: "n", Type: 99}}}})
	if ev := got[0].Events[0]; ev.Type != filesystem.EventType(99) {
		t.Errorf("event type %v, want EventType(99)", ev.Type)
	}
}
