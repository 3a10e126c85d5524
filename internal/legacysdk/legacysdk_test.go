package legacysdk_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	legacyfs "github.com/envd-dev/envd/gen/envd/legacy/filesystem/v1"
	legacyproc "github.com/envd-dev/envd/gen/envd/legacy/process/v1"
	fspb "github.com/envd-dev/envd/gen/filesystem"
	"github.com/envd-dev/envd/gen/filesystem/filesystemconnect"
	procpb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/gen/process/processconnect"
	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/filesystem/fsconnect"
	"github.com/envd-dev/envd/internal/legacysdk"
	"github.com/envd-dev/envd/internal/process"
	"github.com/envd-dev/envd/internal/process/procconnect"
	"github.com/envd-dev/envd/internal/process/processtest"
	"github.com/envd-dev/envd/internal/reaper"
	"github.com/envd-dev/envd/internal/server"
	"github.com/envd-dev/envd/internal/testutil"
)

// TestMain makes the test binary a subreaper, as envd runs (the process
// service waits for its children through the reaper).
func TestMain(m *testing.M) {
	if err := reaper.Enable(slog.New(slog.DiscardHandler)); err != nil {
		fmt.Fprintln(os.Stderr, "reaper:", err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m,
		// The reap loop lives as long as the process, as in envd.
		goleak.IgnoreAnyFunction("github.com/envd-dev/envd/internal/reaper.enable.func1"),
	)
}

const (
	legacyUA = "connect-python/0.4"
	otherUA  = "e2b-js-sdk/2.51.0"
)

// env serves the real process and filesystem services, with envd's handler
// options, acting as root by default.
type env struct {
	url string
	hc  *http.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the services act as root here: run as root")
	}
	log := slog.New(slog.DiscardHandler)
	defs := defaults.New("root", nil)
	m := process.NewManager(process.Options{Logger: log, Env: defs.Env})
	files := filesystem.New(filesystem.Options{Logger: log})
	opts := server.HandlerOptions(log, defs)
	ppath, ph := procconnect.NewService(m, defs).Handler(opts...)
	fpath, fh := fsconnect.NewService(files, defs).Handler(opts...)
	h, err := server.New(server.Options{Logger: log, Routes: []server.Route{{Pattern: ppath, Handler: ph}, {Pattern: fpath, Handler: fh}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	tr := &http.Transport{}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
		files.Close()
	})
	t.Cleanup(func() { processtest.KillAll(t, m) }) // first: the processes, then the server
	return &env{url: srv.URL, hc: &http.Client{Transport: tr}}
}

// client speaks Connect JSON over HTTP/1.1 with a User-Agent, as the
// Python SDK does, by hand: nothing between it and the bytes decodes
// leniently.
type client struct {
	e  *env
	ua string
}

func (c client) post(t *testing.T, procedure, contentType string, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(testutil.Context(t, testutil.Wait), http.MethodPost, c.e.url+procedure, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("User-Agent", c.ua)
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Accept-Encoding", "identity")
	res, err := c.e.hc.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", procedure, err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

func marshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decode decodes b strictly: a field T does not have fails the test.
func decode[T any, PT interface {
	*T
	proto.Message
}](t *testing.T, what string, b []byte) PT {
	t.Helper()
	out := PT(new(T))
	if err := protojson.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: strict decode of %s as %T: %v", what, b, out, err)
	}
	return out
}

// rawUnary calls procedure with req and returns the answer's status,
// header and body.
func (c client) rawUnary(t *testing.T, procedure string, req proto.Message) (int, http.Header, []byte) {
	t.Helper()
	res := c.post(t, procedure, "application/json", marshal(t, req))
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s: %v", procedure, err)
	}
	return res.StatusCode, res.Header, b
}

// unary calls procedure with req and decodes its answer strictly as a T.
// For the legacy client, the answer must carry the legacy header; for
// another, it must not.
func unary[T any, PT interface {
	*T
	proto.Message
}](t *testing.T, c client, procedure string, req proto.Message) PT {
	t.Helper()
	status, h, b := c.rawUnary(t, procedure, req)
	if status != http.StatusOK {
		t.Fatalf("%s: %d %s", procedure, status, b)
	}
	wantHeader(t, c, procedure, h)
	return decode[T, PT](t, procedure, b)
}

func wantHeader(t *testing.T, c client, procedure string, h http.Header) {
	t.Helper()
	want := ""
	if c.ua == legacyUA {
		want = "true"
	}
	if got := h.Get(legacysdk.Header); got != want {
		t.Errorf("%s (User-Agent %s): %s: %q, want %q", procedure, c.ua, legacysdk.Header, got, want)
	}
}

// stream is an open Connect stream (server or client streaming) whose
// frames a goroutine reads.
type stream struct {
	procedure string
	frames    chan frame
	quit      chan struct{}
}

type frame struct {
	flags byte
	data  []byte
	err   error
}

const endStream = 0x02

// open sends reqs as one stream's messages, then reads the answer's frames
// in the background until the test ends.
func (c client) open(t *testing.T, procedure string, reqs ...proto.Message) *stream {
	t.Helper()
	var body []byte
	for _, r := range reqs {
		b := marshal(t, r)
		body = append(body, 0)
		body = binary.BigEndian.AppendUint32(body, uint32(len(b)))
		body = append(body, b...)
	}
	res := c.post(t, procedure, "application/connect+json", body)
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("%s: %s %s", procedure, res.Status, b)
	}
	wantHeader(t, c, procedure, res.Header)
	s := &stream{procedure: procedure, frames: make(chan frame, 16), quit: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(s.frames)
		for {
			var f frame
			var h [5]byte
			if _, f.err = io.ReadFull(res.Body, h[:]); f.err == nil {
				f.flags = h[0]
				f.data = make([]byte, binary.BigEndian.Uint32(h[1:]))
				_, f.err = io.ReadFull(res.Body, f.data)
			}
			if errors.Is(f.err, io.EOF) {
				return
			}
			select {
			case s.frames <- f:
			case <-s.quit:
				return
			}
			if f.err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(s.quit)
		res.Body.Close()
		<-done
	})
	return s
}

// next returns the stream's next message decoded strictly as a T, or nil
// at the end of the stream, which must carry no error.
func next[T any, PT interface {
	*T
	proto.Message
}](t *testing.T, s *stream) PT {
	t.Helper()
	select {
	case f, ok := <-s.frames:
		switch {
		case !ok:
			t.Fatalf("%s: the stream ended without an end message", s.procedure)
		case f.err != nil:
			t.Fatalf("%s: %v", s.procedure, f.err)
		case f.flags&endStream != 0:
			var end struct {
				Error json.RawMessage `json:"error"`
			}
			if err := json.Unmarshal(f.data, &end); err != nil || end.Error != nil {
				t.Fatalf("%s: end of stream %s", s.procedure, f.data)
			}
			return nil
		}
		return decode[T, PT](t, s.procedure, f.data)
	case <-time.After(testutil.Wait):
		t.Fatalf("%s: no message in %v", s.procedure, testutil.Wait)
	}
	return nil
}

// run is what a Start or Connect stream told of a process.
type run struct {
	pid                 uint32
	stdout, stderr, pty []byte
	end                 *legacyproc.ProcessEvent_EndEvent
	ended               bool // the stream's end message came
}

// follow reads a process stream, each message strictly as a T, until until
// holds, or to the end of the stream if until is nil.
func follow[T any, PT interface {
	*T
	proto.Message
	GetEvent() *legacyproc.ProcessEvent
}](t *testing.T, s *stream, r *run, until func(*run) bool) {
	t.Helper()
	for until == nil || !until(r) {
		if r.ended {
			t.Fatalf("%s: the stream ended first: %+v", s.procedure, r)
		}
		m := next[T, PT](t, s)
		if m == nil {
			r.ended = true
			if until == nil {
				return
			}
			continue
		}
		switch ev := m.GetEvent().GetEvent().(type) {
		case *legacyproc.ProcessEvent_Start:
			r.pid = ev.Start.GetPid()
		case *legacyproc.ProcessEvent_Data:
			r.stdout = append(r.stdout, ev.Data.GetStdout()...)
			r.stderr = append(r.stderr, ev.Data.GetStderr()...)
			r.pty = append(r.pty, ev.Data.GetPty()...)
		case *legacyproc.ProcessEvent_End:
			r.end = ev.End
		}
	}
}

func started(r *run) bool { return r.pid != 0 }

func stdoutIs(s string) func(*run) bool {
	return func(r *run) bool { return string(r.stdout) == s }
}

func sh(script string) *legacyproc.ProcessConfig {
	return &legacyproc.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}
}

func byPid(pid uint32) *legacyproc.ProcessSelector {
	return &legacyproc.ProcessSelector{Selector: &legacyproc.ProcessSelector_Pid{Pid: pid}}
}

func wantEntry(t *testing.T, what string, e *legacyfs.EntryInfo, name string, typ legacyfs.FileType, path string) {
	t.Helper()
	if e.GetName() != name || e.GetType() != typ || e.GetPath() != path {
		t.Errorf("%s: entry %v, want %s %v %s", what, e, name, typ, path)
	}
}

// TestFilesystem: every filesystem procedure answers an older Python SDK
// with the frozen messages, marked, with the right content.
func TestFilesystem(t *testing.T) {
	t.Parallel()
	py := client{newEnv(t), legacyUA}
	dir := t.TempDir()
	file := filepath.Join(dir, "a.txt")
	if err := os.WriteFile(file, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	os.Symlink(file, filepath.Join(dir, "link"))
	os.Symlink(filepath.Join(dir, "nothere"), filepath.Join(dir, "dangling"))

	st := unary[legacyfs.StatResponse](t, py, filesystemconnect.FilesystemStatProcedure, &legacyfs.StatRequest{Path: file})
	wantEntry(t, "Stat", st.GetEntry(), "a.txt", legacyfs.FileType_FILE_TYPE_FILE, file)
	// A symlink has its target's type, as for every client (a dangling one
	// none): an old client never sees a type it does not know.
	st = unary[legacyfs.StatResponse](t, py, filesystemconnect.FilesystemStatProcedure, &legacyfs.StatRequest{Path: filepath.Join(dir, "link")})
	wantEntry(t, "Stat link", st.GetEntry(), "link", legacyfs.FileType_FILE_TYPE_FILE, filepath.Join(dir, "link"))
	st = unary[legacyfs.StatResponse](t, py, filesystemconnect.FilesystemStatProcedure, &legacyfs.StatRequest{Path: filepath.Join(dir, "dangling")})
	wantEntry(t, "Stat dangling", st.GetEntry(), "dangling", legacyfs.FileType_FILE_TYPE_UNSPECIFIED, filepath.Join(dir, "dangling"))

	// An error is the service's own.
	status, h, b := py.rawUnary(t, filesystemconnect.FilesystemStatProcedure, &legacyfs.StatRequest{Path: filepath.Join(dir, "missing")})
	if status != http.StatusNotFound || !strings.Contains(string(b), `"not_found"`) || h.Get(legacysdk.Header) != "" {
		t.Errorf("Stat of a missing file: %d %s, header %q", status, b, h.Get(legacysdk.Header))
	}

	ls := unary[legacyfs.ListDirResponse](t, py, filesystemconnect.FilesystemListDirProcedure, &legacyfs.ListDirRequest{Path: dir, Depth: 1})
	want := []struct {
		name string
		typ  legacyfs.FileType
	}{
		{"a.txt", legacyfs.FileType_FILE_TYPE_FILE},
		{"dangling", legacyfs.FileType_FILE_TYPE_UNSPECIFIED},
		{"link", legacyfs.FileType_FILE_TYPE_FILE},
		{"sub", legacyfs.FileType_FILE_TYPE_DIRECTORY},
	}
	if len(ls.GetEntries()) != len(want) {
		t.Fatalf("ListDir: %v", ls.GetEntries())
	}
	for i, w := range want {
		wantEntry(t, "ListDir", ls.GetEntries()[i], w.name, w.typ, filepath.Join(dir, w.name))
	}

	deep := filepath.Join(dir, "new", "deep")
	mk := unary[legacyfs.MakeDirResponse](t, py, filesystemconnect.FilesystemMakeDirProcedure, &legacyfs.MakeDirRequest{Path: deep})
	wantEntry(t, "MakeDir", mk.GetEntry(), "deep", legacyfs.FileType_FILE_TYPE_DIRECTORY, deep)

	moved := filepath.Join(dir, "moved", "b.txt")
	mv := unary[legacyfs.MoveResponse](t, py, filesystemconnect.FilesystemMoveProcedure, &legacyfs.MoveRequest{Source: file, Destination: moved})
	wantEntry(t, "Move", mv.GetEntry(), "b.txt", legacyfs.FileType_FILE_TYPE_FILE, moved)

	unary[legacyfs.RemoveResponse](t, py, filesystemconnect.FilesystemRemoveProcedure, &legacyfs.RemoveRequest{Path: filepath.Join(dir, "new")})
	if _, err := os.Lstat(filepath.Join(dir, "new")); !os.IsNotExist(err) {
		t.Errorf("Remove left %s: %v", filepath.Join(dir, "new"), err)
	}

	// A watch that asked for entries: the new-style event would carry one.
	wdir := t.TempDir()
	ws := py.open(t, filesystemconnect.FilesystemWatchDirProcedure, &fspb.WatchDirRequest{Path: wdir, IncludeEntry: true})
	if m := next[legacyfs.WatchDirResponse](t, ws); m.GetStart() == nil {
		t.Fatalf("WatchDir: first message %v, want start", m)
	}
	if err := os.WriteFile(filepath.Join(wdir, "w.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for {
		m := next[legacyfs.WatchDirResponse](t, ws)
		if m == nil {
			t.Fatal("WatchDir ended before the create event")
		}
		if ev := m.GetFilesystem(); ev.GetName() == "w.txt" && ev.GetType() == legacyfs.EventType_EVENT_TYPE_CREATE {
			break
		}
	}

	pdir := t.TempDir()
	cw := unary[legacyfs.CreateWatcherResponse](t, py, filesystemconnect.FilesystemCreateWatcherProcedure, &fspb.CreateWatcherRequest{Path: pdir, IncludeEntry: true})
	if cw.GetWatcherId() == "" {
		t.Fatal("CreateWatcher: no watcher id")
	}
	if err := os.WriteFile(filepath.Join(pdir, "p.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.Poll(t, "the polled create event", func() bool {
		evs := unary[legacyfs.GetWatcherEventsResponse](t, py, filesystemconnect.FilesystemGetWatcherEventsProcedure, &legacyfs.GetWatcherEventsRequest{WatcherId: cw.GetWatcherId()})
		for _, ev := range evs.GetEvents() {
			if ev.GetName() == "p.txt" && ev.GetType() == legacyfs.EventType_EVENT_TYPE_CREATE {
				return true
			}
		}
		return false
	})
	unary[legacyfs.RemoveWatcherResponse](t, py, filesystemconnect.FilesystemRemoveWatcherProcedure, &legacyfs.RemoveWatcherRequest{WatcherId: cw.GetWatcherId()})
}

// TestProcess: every process procedure answers an older Python SDK with
// the frozen messages, marked, with the right content.
func TestProcess(t *testing.T) {
	t.Parallel()
	py := client{newEnv(t), legacyUA}

	// Output of both pipes and an exit code: the end carries neither
	// reason nor usage (the strict decoding fails otherwise).
	var r run
	follow[legacyproc.StartResponse](t, py.open(t, processconnect.ProcessStartProcedure,
		&legacyproc.StartRequest{Process: sh("printf out; printf err >&2; exit 3")}), &r, nil)
	if r.pid == 0 || string(r.stdout) != "out" || string(r.stderr) != "err" ||
		r.end.GetExitCode() != 3 || !r.end.GetExited() || r.end.GetStatus() != "exit status 3" || r.end.GetError() != "exit status 3" {
		t.Errorf("Start: %+v, end %v", r, r.end)
	}

	// cat, fed by SendInput and StreamInput, listed, updated, its stdin
	// closed, then connected to after its end.
	tag := "legacy-cat"
	cat := py.open(t, processconnect.ProcessStartProcedure, &legacyproc.StartRequest{Process: &legacyproc.ProcessConfig{Cmd: "cat"}, Tag: &tag})
	var c run
	follow[legacyproc.StartResponse](t, cat, &c, started)

	ls := unary[legacyproc.ListResponse](t, py, processconnect.ProcessListProcedure, &legacyproc.ListRequest{})
	found := false
	for _, p := range ls.GetProcesses() {
		if p.GetPid() == c.pid {
			found = p.GetTag() == tag && p.GetConfig().GetCmd() == "cat"
		}
	}
	if !found {
		t.Errorf("List: no cat %d tagged %s in %v", c.pid, tag, ls.GetProcesses())
	}

	unary[legacyproc.SendInputResponse](t, py, processconnect.ProcessSendInputProcedure, &legacyproc.SendInputRequest{
		Process: byPid(c.pid), Input: &legacyproc.ProcessInput{Input: &legacyproc.ProcessInput_Stdin{Stdin: []byte("hello\n")}},
	})
	follow[legacyproc.StartResponse](t, cat, &c, stdoutIs("hello\n"))

	in := py.open(t, processconnect.ProcessStreamInputProcedure,
		&legacyproc.StreamInputRequest{Event: &legacyproc.StreamInputRequest_Start{Start: &legacyproc.StreamInputRequest_StartEvent{
			Process: &legacyproc.ProcessSelector{Selector: &legacyproc.ProcessSelector_Tag{Tag: tag}},
		}}},
		&legacyproc.StreamInputRequest{Event: &legacyproc.StreamInputRequest_Data{Data: &legacyproc.StreamInputRequest_DataEvent{
			Input: &legacyproc.ProcessInput{Input: &legacyproc.ProcessInput_Stdin{Stdin: []byte("world\n")}},
		}}},
	)
	if m := next[legacyproc.StreamInputResponse](t, in); m == nil {
		t.Fatal("StreamInput: no answer")
	}
	if m := next[legacyproc.StreamInputResponse](t, in); m != nil {
		t.Fatalf("StreamInput: a second answer %v", m)
	}
	follow[legacyproc.StartResponse](t, cat, &c, stdoutIs("hello\nworld\n"))

	unary[legacyproc.UpdateResponse](t, py, processconnect.ProcessUpdateProcedure, &legacyproc.UpdateRequest{Process: byPid(c.pid)})

	// The old service has no CloseStdin: its answer goes as an empty
	// message.
	unary[emptypb.Empty](t, py, processconnect.ProcessCloseStdinProcedure, &procpb.CloseStdinRequest{Process: &procpb.ProcessSelector{Selector: &procpb.ProcessSelector_Pid{Pid: c.pid}}})
	follow[legacyproc.StartResponse](t, cat, &c, nil)
	if c.end.GetExitCode() != 0 || !c.end.GetExited() || c.end.Error != nil {
		t.Errorf("cat's end %v", c.end)
	}

	var cc run
	follow[legacyproc.ConnectResponse](t, py.open(t, processconnect.ProcessConnectProcedure, &legacyproc.ConnectRequest{Process: byPid(c.pid)}), &cc, nil)
	if cc.pid != c.pid || string(cc.stdout) != "hello\nworld\n" || cc.end.GetStatus() != "exit status 0" {
		t.Errorf("Connect: %+v, end %v", cc, cc.end)
	}

	// A client's signal.
	sl := py.open(t, processconnect.ProcessStartProcedure, &legacyproc.StartRequest{Process: &legacyproc.ProcessConfig{Cmd: "sleep", Args: []string{"60"}}})
	var s run
	follow[legacyproc.StartResponse](t, sl, &s, started)
	unary[legacyproc.SendSignalResponse](t, py, processconnect.ProcessSendSignalProcedure, &legacyproc.SendSignalRequest{
		Process: byPid(s.pid), Signal: legacyproc.Signal_SIGNAL_SIGKILL,
	})
	follow[legacyproc.StartResponse](t, sl, &s, nil)
	if s.end.GetExitCode() != -1 || s.end.GetExited() || s.end.GetStatus() != "signal: killed" || s.end.GetError() != "signal: killed" {
		t.Errorf("SendSignal: end %v", s.end)
	}

	// A terminal, resized by Update, fed by SendInput.
	pt := py.open(t, processconnect.ProcessStartProcedure, &legacyproc.StartRequest{
		Process: sh("read x; stty size"),
		Pty:     &legacyproc.PTY{Size: &legacyproc.PTY_Size{Cols: 80, Rows: 24}},
	})
	var p run
	follow[legacyproc.StartResponse](t, pt, &p, started)
	unary[legacyproc.UpdateResponse](t, py, processconnect.ProcessUpdateProcedure, &legacyproc.UpdateRequest{
		Process: byPid(p.pid), Pty: &legacyproc.PTY{Size: &legacyproc.PTY_Size{Cols: 100, Rows: 30}},
	})
	unary[legacyproc.SendInputResponse](t, py, processconnect.ProcessSendInputProcedure, &legacyproc.SendInputRequest{
		Process: byPid(p.pid), Input: &legacyproc.ProcessInput{Input: &legacyproc.ProcessInput_Pty{Pty: []byte("\n")}},
	})
	follow[legacyproc.StartResponse](t, pt, &p, nil)
	if !strings.Contains(string(p.pty), "30 100") || p.end.GetExitCode() != 0 {
		t.Errorf("terminal: output %q, end %v", p.pty, p.end)
	}
}

// TestOtherClients: another client gets every field, and no legacy
// header; the frozen messages would refuse its answers.
func TestOtherClients(t *testing.T) {
	t.Parallel()
	js := client{newEnv(t), otherUA}
	dir := t.TempDir()
	file := filepath.Join(dir, "a.txt")
	if err := os.WriteFile(file, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}

	status, h, b := js.rawUnary(t, filesystemconnect.FilesystemStatProcedure, &fspb.StatRequest{Path: file})
	if status != http.StatusOK {
		t.Fatalf("Stat: %d %s", status, b)
	}
	wantHeader(t, js, "Stat", h)
	e := decode[fspb.StatResponse](t, "Stat", b).GetEntry()
	if e.GetSize() != 5 || e.GetPermissions() != "-rw-r--r--" || e.GetOwner() != "root" || e.GetModifiedTime() == nil {
		t.Errorf("Stat: %v", e)
	}
	if err := protojson.Unmarshal(b, &legacyfs.StatResponse{}); err == nil || !strings.Contains(err.Error(), "size") {
		t.Errorf("the frozen StatResponse read %s: %v", b, err)
	}

	ws := js.open(t, filesystemconnect.FilesystemWatchDirProcedure, &fspb.WatchDirRequest{Path: dir, IncludeEntry: true})
	if m := next[fspb.WatchDirResponse](t, ws); m.GetStart() == nil {
		t.Fatalf("WatchDir: first message %v, want start", m)
	}
	if err := os.WriteFile(filepath.Join(dir, "w.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for {
		m := next[fspb.WatchDirResponse](t, ws)
		if m == nil {
			t.Fatal("WatchDir ended before the create event")
		}
		if ev := m.GetFilesystem(); ev.GetName() == "w.txt" && ev.GetType() == fspb.EventType_EVENT_TYPE_CREATE {
			if ev.GetEntry().GetPath() != filepath.Join(dir, "w.txt") {
				t.Errorf("create event without its entry: %v", ev)
			}
			break
		}
	}

	st := js.open(t, processconnect.ProcessStartProcedure, &procpb.StartRequest{Process: &procpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "exit 2"}}})
	for {
		m := next[procpb.StartResponse](t, st)
		if m == nil {
			t.Fatal("Start ended without an end event")
		}
		if end := m.GetEvent().GetEnd(); end != nil {
			if end.GetExitCode() != 2 || end.GetReason() != procpb.ProcessEvent_END_REASON_EXITED || end.GetUsage() == nil {
				t.Errorf("end %v: want exit 2 with its reason and usage", end)
			}
			break
		}
	}
}
