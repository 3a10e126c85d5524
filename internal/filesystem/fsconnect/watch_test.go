package fsconnect_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/quartz"

	pb "github.com/envd-dev/envd/gen/filesystem"
	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/testutil"
)

// watching is an open WatchDir stream whose events a goroutine collects.
type watching struct {
	mu     sync.Mutex
	events []*pb.FilesystemEvent
	keeps  int
	err    error
	// changed is signalled after each message the goroutine collected.
	changed chan struct{}
	done    chan struct{}
	cancel  context.CancelFunc
}

func watch(t *testing.T, c interface {
	WatchDir(context.Context, *connect.Request[pb.WatchDirRequest]) (*connect.ServerStreamForClient[pb.WatchDirResponse], error)
}, req *pb.WatchDirRequest, header http.Header, timeout time.Duration) *watching {
	t.Helper()
	if timeout == 0 {
		timeout = waitLong
	}
	cctx, cancel := context.WithTimeout(context.Background(), timeout)
	r := connect.NewRequest(req)
	for k, v := range header {
		r.Header()[k] = v
	}
	w := &watching{changed: make(chan struct{}, 1), done: make(chan struct{}), cancel: cancel}
	stream, err := c.WatchDir(cctx, r)
	if err != nil {
		cancel()
		w.err = err
		close(w.done)
		return w
	}
	started := make(chan error, 1)
	go func() {
		defer close(w.done)
		defer stream.Close()
		first := true
		for stream.Receive() {
			msg := stream.Msg()
			if first {
				first = false
				if msg.GetStart() == nil {
					started <- fmt.Errorf("first message %v, want start", msg)
					return
				}
				started <- nil
				continue
			}
			w.mu.Lock()
			switch {
			case msg.GetFilesystem() != nil:
				w.events = append(w.events, msg.GetFilesystem())
			case msg.GetKeepalive() != nil:
				w.keeps++
			}
			w.mu.Unlock()
			select {
			case w.changed <- struct{}{}:
			default:
			}
		}
		w.mu.Lock()
		w.err = stream.Err()
		w.mu.Unlock()
		if first {
			started <- stream.Err()
		}
	}()
	if err := <-started; err != nil {
		cancel()
		<-w.done
		w.err = err
		return w
	}
	t.Cleanup(func() { cancel(); <-w.done })
	return w
}

func (w *watching) snapshot() []*pb.FilesystemEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.events)
}

func evName(e *pb.FilesystemEvent) string {
	return strings.ToLower(strings.TrimPrefix(e.GetType().String(), "EVENT_TYPE_")) + " " + e.GetName()
}

// waitFor waits until every one of want ("create f.txt") was seen.
func (w *watching) waitFor(t *testing.T, want ...string) []*pb.FilesystemEvent {
	t.Helper()
	timeout := time.NewTimer(waitShort)
	defer timeout.Stop()
	for {
		ended := isDone(w.done) // before the snapshot, which then holds every event
		evs := w.snapshot()
		var got []string
		for _, e := range evs {
			got = append(got, evName(e))
		}
		missing := ""
		for _, x := range want {
			if !slices.Contains(got, x) {
				missing = x
				break
			}
		}
		if missing == "" {
			return evs
		}
		if ended {
			t.Fatalf("no %q event before the stream ended (%v); got %q", missing, w.streamErr(), got)
		}
		select {
		case <-w.changed:
		case <-w.done:
		case <-timeout.C:
			t.Fatalf("no %q event; got %q", missing, got)
		}
	}
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (w *watching) streamErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// keepalives is how many keepalives the stream sent so far.
func (w *watching) keepalives() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.keeps
}

func indexOf(evs []*pb.FilesystemEvent, want string) int {
	return slices.IndexFunc(evs, func(e *pb.FilesystemEvent) bool { return evName(e) == want })
}

// upload writes p as u the way POST /files does.
func upload(t *testing.T, f *filesystem.Files, u *identity.User, p, content string) {
	t.Helper()
	up, err := f.Create(u, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := up.Write([]byte(content)); err != nil {
		t.Fatal(err)
	}
	if err := up.Commit(); err != nil {
		t.Fatal(err)
	}
}

// The SDK's check 31: an upload, a new directory, a nested upload, a move
// and a remove, seen by a recursive watch with entries.
func TestWatchDirRecursiveEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	usr := testutil.User(t, "user")
	dir := testutil.WorkDir(t)
	w := watch(t, e.user, &pb.WatchDirRequest{Path: dir, Recursive: true, IncludeEntry: true}, nil, 0)
	if w.err != nil {
		t.Fatal(w.err)
	}
	upload(t, e.files, usr, dir+"/f.txt", "x")
	if _, err := e.user.MakeDir(testutil.Context(t, waitLong), connect.NewRequest(&pb.MakeDirRequest{Path: dir + "/sub"})); err != nil {
		t.Fatal(err)
	}
	// At once, before the watch may have caught up with sub.
	upload(t, e.files, usr, dir+"/sub/g.txt", "y")
	if _, err := e.user.Move(testutil.Context(t, waitLong), connect.NewRequest(&pb.MoveRequest{Source: dir + "/f.txt", Destination: dir + "/f2.txt"})); err != nil {
		t.Fatal(err)
	}
	if _, err := e.user.Remove(testutil.Context(t, waitLong), connect.NewRequest(&pb.RemoveRequest{Path: dir + "/f2.txt"})); err != nil {
		t.Fatal(err)
	}
	evs := w.waitFor(t, "create f.txt", "write f.txt", "create sub", "create sub/g.txt", "write sub/g.txt",
		"rename f.txt", "create f2.txt", "remove f2.txt")
	if indexOf(evs, "write f2.txt") >= 0 {
		t.Error("a moved file was reported written")
	}
	for _, pair := range [][2]string{
		{"create f.txt", "write f.txt"}, {"write f.txt", "rename f.txt"}, {"rename f.txt", "create f2.txt"},
		{"create f2.txt", "remove f2.txt"}, {"create sub", "create sub/g.txt"}, {"create sub/g.txt", "write sub/g.txt"},
	} {
		if indexOf(evs, pair[0]) > indexOf(evs, pair[1]) {
			t.Errorf("%q came after %q", pair[0], pair[1])
		}
	}
	for _, ev := range evs {
		if filesystem.IsTemp(ev.GetName()) {
			t.Errorf("a temporary file shows: %v", ev)
		}
		switch ev.GetType() {
		case pb.EventType_EVENT_TYPE_CREATE, pb.EventType_EVENT_TYPE_WRITE, pb.EventType_EVENT_TYPE_CHMOD:
			// Best effort: a path already moved or removed has none.
			if en := ev.GetEntry(); en != nil && en.GetPath() != dir+"/"+ev.GetName() {
				t.Errorf("%s has the entry of %s", evName(ev), en.GetPath())
			}
			if strings.HasPrefix(ev.GetName(), "sub") && ev.GetEntry() == nil {
				t.Errorf("%s has no entry", evName(ev))
			}
		default:
			if ev.Entry != nil {
				t.Errorf("%s has an entry", evName(ev))
			}
		}
	}
	write := evs[indexOf(evs, "write sub/g.txt")].GetEntry()
	if write.GetPath() != dir+"/sub/g.txt" || write.GetName() != "g.txt" || write.GetSize() != 1 || write.GetOwner() != "user" || write.GetType() != pb.FileType_FILE_TYPE_FILE {
		t.Errorf("write entry %v", write)
	}
}

func TestWatchDirNestedMkdirP(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	dir := testutil.WorkDir(t)
	w := watch(t, e.root, &pb.WatchDirRequest{Path: dir, Recursive: true}, nil, 0)
	if _, err := e.root.MakeDir(testutil.Context(t, waitLong), connect.NewRequest(&pb.MakeDirRequest{Path: dir + "/a/b/c"})); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(dir+"/a/b/c/file", []byte("z"), 0o644)
	w.waitFor(t, "create a", "create a/b", "create a/b/c", "create a/b/c/file")
	// Chmod of the watched dir itself is ".".
	os.Chmod(dir, 0o775)
	w.waitFor(t, "chmod .")
}

func TestWatchDirNotRecursive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	dir := testutil.WorkDir(t)
	os.Mkdir(dir+"/sub", 0o777)
	w := watch(t, e.root, &pb.WatchDirRequest{Path: dir}, nil, 0)
	os.WriteFile(dir+"/sub/deep", []byte("x"), 0o644)
	os.WriteFile(dir+"/top", []byte("x"), 0o644)
	os.Chmod(dir+"/top", 0o600)
	evs := w.waitFor(t, "create top", "write top", "chmod top")
	for _, ev := range evs {
		if strings.HasPrefix(ev.GetName(), "sub/") {
			t.Errorf("a non-recursive watch reported %s", evName(ev))
		}
		if ev.Entry != nil {
			t.Errorf("entry without include_entry: %v", ev)
		}
	}
}

func TestWatchDirKeepaliveAndDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	dir := testutil.WorkDir(t)
	// A quiet watch sends keepalives at the interval the client asked for.
	w := watch(t, e.root, &pb.WatchDirRequest{Path: dir}, http.Header{"Keepalive-Ping-Interval": {"1"}}, 0)
	timeout := time.NewTimer(waitShort)
	defer timeout.Stop()
	for w.keepalives() == 0 {
		select {
		case <-w.changed:
		case <-w.done:
			t.Fatalf("the stream ended without a keepalive: %v", w.streamErr())
		case <-timeout.C:
			t.Fatalf("no keepalive in %v at 1 s intervals", waitShort)
		}
	}
	// It ends at the request's deadline.
	w = watch(t, e.root, &pb.WatchDirRequest{Path: dir}, nil, 200*time.Millisecond)
	select {
	case <-w.done:
	case <-timeout.C:
		t.Fatal("the stream did not end at its deadline")
	}
	wantErr(t, w.streamErr(), connect.CodeDeadlineExceeded)
}

func TestWatchDirErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	dir := testutil.WorkDir(t)
	testutil.WriteFile(t, dir+"/file", "x", 0o644)
	priv := testutil.PrivateDir(t)
	tests := []struct {
		name string
		user bool
		path string
		code connect.Code
		msg  string
	}{
		{"missing", false, dir + "/nowatch", connect.CodeNotFound, dir + "/nowatch: no such file or directory"},
		{"a file", false, dir + "/file", connect.CodeInvalidArgument, "path " + dir + "/file is not a directory"},
		{"other's home", false, "~root", connect.CodeInvalidArgument, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := e.root
			if tt.user {
				c = e.user
			}
			w := watch(t, c, &pb.WatchDirRequest{Path: tt.path}, nil, 0)
			wantErr(t, w.err, tt.code, tt.msg)
		})
	}
	t.Run("unreadable, strict mode", func(t *testing.T) {
		t.Parallel()
		es := newEnv(t, filesystem.Options{StrictUsers: true})
		w := watch(t, es.user, &pb.WatchDirRequest{Path: priv}, nil, 0)
		wantErr(t, w.err, connect.CodePermissionDenied, "user 'user' may not watch")
	})
}

// In strict mode, a user's recursive watch does not descend into
// directories they may not read, and reports nothing from there.
func TestWatchDirAsUserSkipsUnreadable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{StrictUsers: true})
	dir := testutil.WorkDir(t)
	os.Mkdir(dir+"/priv", 0o700)
	w := watch(t, e.user, &pb.WatchDirRequest{Path: dir, Recursive: true, AllowNetworkMounts: true}, nil, 0)
	os.WriteFile(dir+"/priv/secret", []byte("x"), 0o600)
	os.WriteFile(dir+"/public", []byte("x"), 0o644)
	evs := w.waitFor(t, "create public")
	for _, ev := range evs {
		if strings.HasPrefix(ev.GetName(), "priv/") {
			t.Errorf("reported %s from a directory the user may not read", evName(ev))
		}
	}
}

func TestHundredWatchers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	dir := testutil.WorkDir(t)
	const n = 100
	ws := make([]*watching, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := e.root
			if i%2 == 1 {
				c = e.user
			}
			ws[i] = watch(t, c, &pb.WatchDirRequest{Path: dir, Recursive: i%3 == 0, IncludeEntry: i%4 == 0}, nil, 0)
		}()
	}
	wg.Wait()
	for i, w := range ws {
		if w.err != nil {
			t.Fatalf("watcher %d: %v", i, w.err)
		}
	}
	os.WriteFile(dir+"/hello", []byte("x"), 0o644)
	os.Remove(dir + "/hello")
	for _, w := range ws {
		w.waitFor(t, "create hello", "write hello", "remove hello")
	}
	// Half of them go; the others still see changes.
	for _, w := range ws[:n/2] {
		w.cancel()
		<-w.done
	}
	os.WriteFile(dir+"/again", []byte("x"), 0o644)
	for _, w := range ws[n/2:] {
		w.waitFor(t, "create again")
	}
}

// pollUntil polls the watcher until done holds for what it collected,
// which it returns; GetWatcherEvents is a polling API, so this test polls
// it, every few milliseconds.
func pollUntil(t *testing.T, c interface {
	GetWatcherEvents(context.Context, *connect.Request[pb.GetWatcherEventsRequest]) (*connect.Response[pb.GetWatcherEventsResponse], error)
}, id string, done func(got []string, err error) bool) []string {
	t.Helper()
	timeout := time.NewTimer(waitShort)
	defer timeout.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var got []string
	for {
		evs, err := c.GetWatcherEvents(testutil.Context(t, waitLong), connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
		if err == nil {
			for _, ev := range evs.Msg.GetEvents() {
				got = append(got, evName(ev))
			}
		}
		if done(got, err) {
			return got
		}
		if err != nil {
			t.Fatalf("GetWatcherEvents: %v (after %q)", err, got)
		}
		select {
		case <-tick.C:
		case <-timeout.C:
			t.Fatalf("polled for %v; got %q, %v", waitShort, got, err)
		}
	}
}

func TestPollingWatcher(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	dir := testutil.WorkDir(t)
	res, err := e.user.CreateWatcher(testutil.Context(t, waitLong), connect.NewRequest(&pb.CreateWatcherRequest{Path: dir, Recursive: true, IncludeEntry: true}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetWatcherId()
	if len(id) != 21 || id[0] != 'w' || strings.Trim(id[1:], "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
		t.Errorf("watcher id %q, want w and 20 of [a-z0-9]", id)
	}
	os.WriteFile(dir+"/x", []byte("x"), 0o644)
	os.Mkdir(dir+"/s", 0o755)
	// Once its creation is reported, s is watched too.
	got := pollUntil(t, e.user, id, func(got []string, _ error) bool { return slices.Contains(got, "create s") })
	os.WriteFile(dir+"/s/y", []byte("y"), 0o644)
	got = append(got, pollUntil(t, e.user, id, func(got []string, _ error) bool { return slices.Contains(got, "write s/y") })...)
	for _, want := range []string{"create x", "write x", "create s", "create s/y", "write s/y"} {
		if !slices.Contains(got, want) {
			t.Errorf("no %q in %q", want, got)
		}
	}
	// Taken events are not returned twice.
	evs, err := e.user.GetWatcherEvents(testutil.Context(t, waitLong), connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
	if err != nil || len(evs.Msg.GetEvents()) != 0 {
		t.Errorf("second poll: %v %v", evs, err)
	}
	if _, err := e.user.RemoveWatcher(testutil.Context(t, waitLong), connect.NewRequest(&pb.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatal(err)
	}
	_, err = e.user.GetWatcherEvents(testutil.Context(t, waitLong), connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
	wantErr(t, err, connect.CodeNotFound, "watcher with id "+id+" not found")
	_, err = e.user.RemoveWatcher(testutil.Context(t, waitLong), connect.NewRequest(&pb.RemoveWatcherRequest{WatcherId: id}))
	wantErr(t, err, connect.CodeNotFound)
	_, err = e.user.CreateWatcher(testutil.Context(t, waitLong), connect.NewRequest(&pb.CreateWatcherRequest{Path: dir + "/missing"}))
	wantErr(t, err, connect.CodeNotFound)
}

// A polling watcher lives as long as it is polled within its idle time, and
// is removed once nobody polled it for longer. The janitor runs every
// idle/4 on a mock clock: each Advance waits for its sweep.
func TestPollingWatcherNobodyPolls(t *testing.T) {
	t.Parallel()
	const idle = 2 * time.Second
	clock := quartz.NewMock(t)
	e := newEnv(t, filesystem.Options{WatcherIdle: idle, Clock: clock})
	res, err := e.root.CreateWatcher(testutil.Context(t, waitLong), connect.NewRequest(&pb.CreateWatcherRequest{Path: testutil.WorkDir(t)}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetWatcherId()
	poll := func() error {
		_, err := e.root.GetWatcherEvents(testutil.Context(t, waitLong), connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
		return err
	}
	// Polled every idle/4, it lives on, for 4 idle times.
	for range 16 {
		clock.Advance(idle / 4).MustWait(testutil.Context(t, waitLong))
		if err := poll(); err != nil {
			t.Fatal(err)
		}
	}
	// Not polled: idle is not over after 4 sweeps, it is after a fifth.
	for range 4 {
		clock.Advance(idle / 4).MustWait(testutil.Context(t, waitLong))
	}
	if err := poll(); err != nil {
		t.Fatalf("removed after exactly its idle time: %v", err)
	}
	for range 5 {
		clock.Advance(idle / 4).MustWait(testutil.Context(t, waitLong))
	}
	wantErr(t, poll(), connect.CodeNotFound)
}

// A reader that lets events pile up loses the watch, with a clear error;
// envd and the other watchers go on.
func TestWatcherQueueIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{WatchQueue: 16})
	dir := testutil.WorkDir(t)
	res, err := e.root.CreateWatcher(testutil.Context(t, waitLong), connect.NewRequest(&pb.CreateWatcherRequest{Path: dir}))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		os.WriteFile(fmt.Sprintf("%s/f%d", dir, i), []byte("x"), 0o644)
	}
	pollUntil(t, e.root, res.Msg.GetWatcherId(), func(_ []string, err error) bool {
		if err != nil {
			wantErr(t, err, connect.CodeDataLoss, "fell behind", "watch again")
		}
		return err != nil
	})
	// Another directory: the hub may still be routing the flood to dir.
	other := testutil.WorkDir(t)
	w := watch(t, e.root, &pb.WatchDirRequest{Path: other}, nil, 0)
	os.WriteFile(other+"/later", nil, 0o644)
	w.waitFor(t, "create later")
}

// A recursive watch follows a directory moved within it: what happens in it
// is named by its new name, and the move is reported once.
func TestWatchDirFollowsMovedDirectory(t *testing.T) {
	t.Parallel()
	e := newEnv(t, filesystem.Options{})
	dir := testutil.WorkDir(t)
	os.MkdirAll(dir+"/sub/inner", 0o755)
	w := watch(t, e.root, &pb.WatchDirRequest{Path: dir, Recursive: true}, nil, 0)
	if err := os.Rename(dir+"/sub", dir+"/sub2"); err != nil {
		t.Fatal(err)
	}
	w.waitFor(t, "rename sub", "create sub2")
	os.WriteFile(dir+"/sub2/inner/x", []byte("x"), 0o644)
	evs := w.waitFor(t, "create sub2/inner/x")
	n := 0
	for _, ev := range evs {
		if evName(ev) == "rename sub" {
			n++
		}
		if strings.HasPrefix(ev.GetName(), "sub/") {
			t.Errorf("event under the old name: %s", evName(ev))
		}
	}
	if n != 1 {
		t.Errorf("%d rename events for one move", n)
	}
}
