package e2e_test

import (
	"os"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"

	fspb "github.com/envd-dev/envd/gen/filesystem"
	"github.com/envd-dev/envd/gen/filesystem/filesystemconnect"
	"github.com/envd-dev/envd/internal/testutil"
)

// watcherNames polls the watcher once and returns the names of its events.
func watcherNames(t *testing.T, fc filesystemconnect.FilesystemClient, id string) []string {
	t.Helper()
	resp, err := fc.GetWatcherEvents(testutil.Context(t, requestTimeout), connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: id}))
	if err != nil {
		t.Fatalf("GetWatcherEvents %s: %v", id, err)
	}
	var names []string
	for _, ev := range resp.Msg.GetEvents() {
		names = append(names, ev.GetName())
	}
	return names
}

func createWatcher(t *testing.T, fc filesystemconnect.FilesystemClient, dir string) string {
	t.Helper()
	resp, err := fc.CreateWatcher(testutil.Context(t, requestTimeout), connect.NewRequest(&fspb.CreateWatcherRequest{Path: dir}))
	if err != nil {
		t.Fatalf("CreateWatcher %s: %v", dir, err)
	}
	return resp.Msg.GetWatcherId()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestUpgradeWatcher: a polling watcher lives through an upgrade under its
// id, with the event it had not been polled for, and reports a change
// made after.
func TestUpgradeWatcher(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("an upgrade wants a root-owned binary: run as root")
	}
	_, oldBin, newBin := upgradeBinaries(t)
	e := startOld(t, oldBin)
	fc := filesystemconnect.NewFilesystemClient(tokenClient(t, requestTimeout), e.url)
	dir := t.TempDir()
	unread := createWatcher(t, fc, dir)
	// probe sees what unread saw (the hub hands each notification to both
	// at once): once it reports the file, unread holds it, unread.
	probe := createWatcher(t, fc, dir)
	if err := os.WriteFile(filepath.Join(dir, "before"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var seen []string
	if !testutil.PollFor(requestTimeout, func() bool {
		seen = append(seen, watcherNames(t, fc, probe)...)
		return contains(seen, "before")
	}) {
		t.Fatalf("the probe watcher never reported the file: %v", seen)
	}

	upgradeTo(t, e, newBin, newVersion)
	if err := os.WriteFile(filepath.Join(dir, "after"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var got []string
	if !testutil.PollFor(requestTimeout, func() bool {
		got = append(got, watcherNames(t, fc, unread)...)
		return contains(got, "after")
	}) || !contains(got, "before") {
		t.Fatalf("the watcher across the upgrade reported %v, want before (unread at the upgrade) and after\nstderr:\n%s", got, e.stderr)
	}
	if got[0] != "before" {
		t.Errorf("the watcher's events %v: the unread one first", got)
	}
}
