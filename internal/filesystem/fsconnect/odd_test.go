package fsconnect_test

import (
	"log/slog"
	"os"
	"runtime"
	"slices"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/filesystem"
	"github.com/envd-dev/envd/gen/filesystem/filesystemconnect"
	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/testutil"
)

// A file name that is not UTF-8, which any user can make, is listed with
// its invalid bytes replaced by U+FFFD; the other entries are listed as
// they are, over both codecs.
func TestListDirNonUTF8Name(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	dir := testutil.WorkDir(t)
	testutil.WriteFile(t, dir+"/bad\xff\xfename", "x", 0o644)
	testutil.WriteFile(t, dir+"/sub\xc3/inner", "y", 0o644)
	testutil.WriteFile(t, dir+"/good", "z", 0o644)
	if err := os.Symlink(dir+"/bad\xff\xfename", dir+"/link"); err != nil {
		t.Fatal(err)
	}
	binary := filesystemconnect.NewFilesystemClient(e.hc, e.url, connect.WithInterceptors(basicAuth("root")))
	for name, c := range map[string]filesystemconnect.FilesystemClient{"json": e.root, "binary": binary} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res, err := c.ListDir(testutil.Context(t, waitLong), connect.NewRequest(&pb.ListDirRequest{Path: dir, Depth: 2}))
			if err != nil {
				t.Fatal(err)
			}
			es := res.Msg.GetEntries()
			want := []string{"bad\uFFFDname", "good", "link", "sub\uFFFD", "sub\uFFFD/inner"}
			if got := names(es, dir); !slices.Equal(got, want) {
				t.Fatalf("listed %q, want %q", got, want)
			}
			if es[0].GetName() != "bad\uFFFDname" || es[0].GetSize() != 1 {
				t.Errorf("entry %v", es[0])
			}
			if es[2].GetSymlinkTarget() != dir+"/bad\uFFFDname" || es[2].GetType() != pb.FileType_FILE_TYPE_FILE {
				t.Errorf("link %v", es[2])
			}
		})
	}
}

// A watch reports a change to a file whose name is not UTF-8, made valid
// as ListDir makes it, and goes on streaming.
func TestWatchDirNonUTF8Name(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	dir := testutil.WorkDir(t)
	w := watch(t, e.root, &pb.WatchDirRequest{Path: dir, IncludeEntry: true}, nil, 0)
	if w.err != nil {
		t.Fatal(w.err)
	}
	testutil.WriteFile(t, dir+"/bad\xffname", "x", 0o644)
	testutil.WriteFile(t, dir+"/after", "y", 0o644)
	evs := w.waitFor(t, "create bad\uFFFDname", "write bad\uFFFDname", "create after")
	if en := evs[indexOf(evs, "create bad\uFFFDname")].GetEntry(); en.GetPath() != dir+"/bad\uFFFDname" {
		t.Errorf("entry %v", en)
	}
}

// envd holds at most MaxWatches watches and MaxWatchedDirs watched
// directories; past either, a watch fails with resource_exhausted, saying
// which limit, and the others go on. A recursive watch whose tree grows past
// the limit ends with that error.
func TestWatchLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{MaxWatches: 3, MaxWatchedDirs: 5})
	dir := testutil.WorkDir(t)
	for _, d := range []string{"a", "b", "c"} {
		os.Mkdir(dir+"/"+d, 0o755)
	}
	w1 := watch(t, e.root, &pb.WatchDirRequest{Path: dir, Recursive: true}, nil, 0) // 4 directories
	if w1.err != nil {
		t.Fatal(w1.err)
	}
	w2 := watch(t, e.root, &pb.WatchDirRequest{Path: dir, Recursive: true}, nil, 0)
	wantErr(t, w2.err, connect.CodeResourceExhausted, "already watch 5 directories, its limit", "watch a smaller tree, or not recursively")
	// The failed watch gave back what it took: one more directory fits.
	res, err := e.root.CreateWatcher(testutil.Context(t, waitLong), connect.NewRequest(&pb.CreateWatcherRequest{Path: dir}))
	if err != nil {
		t.Fatal(err)
	}
	polled := res.Msg.GetWatcherId()
	// w1's tree grows past the limit: it ends, saying so.
	os.Mkdir(dir+"/d", 0o755)
	<-w1.done
	wantErr(t, w1.streamErr(), connect.CodeResourceExhausted, "cannot watch "+dir+"/d", "its limit")

	// Watches: the polled one and two more; a fourth is refused.
	for _, d := range []string{"a", "b"} {
		if w := watch(t, e.root, &pb.WatchDirRequest{Path: dir + "/" + d}, nil, 0); w.err != nil {
			t.Fatal(w.err)
		}
	}
	w := watch(t, e.root, &pb.WatchDirRequest{Path: dir + "/c"}, nil, 0)
	wantErr(t, w.err, connect.CodeResourceExhausted, "envd already holds 3 watches, its limit")
	_, err = e.root.CreateWatcher(testutil.Context(t, waitLong), connect.NewRequest(&pb.CreateWatcherRequest{Path: dir + "/c"}))
	wantErr(t, err, connect.CodeResourceExhausted, "envd already holds 3 watches, its limit")
	if _, err := e.root.RemoveWatcher(testutil.Context(t, waitLong), connect.NewRequest(&pb.RemoveWatcherRequest{WatcherId: polled})); err != nil {
		t.Fatal(err)
	}
	if w := watch(t, e.root, &pb.WatchDirRequest{Path: dir + "/c"}, nil, 0); w.err != nil {
		t.Fatalf("after a watcher was removed: %v", w.err)
	}
}

// An idle watch costs little memory, whatever its queue may hold: its
// queue grows with what waits. (Each held a 16384-event channel before, and
// 3000 watches took envd to 1.5 GiB.) Not parallel: the heap is measured
// while no other test runs.
func TestIdleWatchIsSmall(t *testing.T) {
	requireRoot(t)
	f := filesystem.New(filesystem.Options{Logger: slog.New(slog.DiscardHandler)})
	defer f.Close()
	root := testutil.User(t, "root")
	dir := testutil.WorkDir(t)
	const n = 50
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		w, err := f.Watch(root, dir, filesystem.WatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / n
	t.Logf("%d bytes allocated per idle watch", per)
	if per > 64<<10 {
		t.Errorf("%d KiB allocated per idle watch, want under 64 KiB", per>>10)
	}
}
