package daemon_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/quartz"
	"go.uber.org/goleak"

	fspb "github.com/envd-dev/envd/gen/filesystem"
	"github.com/envd-dev/envd/gen/filesystem/filesystemconnect"
	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/gen/process/processconnect"
	"github.com/envd-dev/envd/internal/daemon"
	"github.com/envd-dev/envd/internal/procstat"
	"github.com/envd-dev/envd/internal/reaper"
	"github.com/envd-dev/envd/internal/testutil"
)

// The tests of this package run one at a time, never t.Parallel: at
// shutdown a daemon signals every child of its process, as envd must (it is
// the subreaper and the only daemon in its process), so one test's shutdown
// would kill the processes another test started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// daemon.Run makes this process a subreaper; its reap loop lives as
		// long as the process, by design.
		goleak.IgnoreTopFunction("github.com/envd-dev/envd/internal/reaper.enable.func1"),
	)
}

// testTimeout bounds each wait of these tests.
const testTimeout = testutil.Wait

// logSink collects the daemon's JSON log lines.
type logSink struct {
	mu    sync.Mutex
	lines []map[string]any
	raw   strings.Builder
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.raw.Write(p)
	sc := bufio.NewScanner(strings.NewReader(string(p)))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			s.lines = append(s.lines, m)
		}
	}
	return len(p), nil
}

// addrs returns the addresses the daemon logged it listens on.
func (s *logSink) addrs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, l := range s.lines {
		if l["msg"] == "listening" {
			out = append(out, l["addr"].(string))
		}
	}
	return out
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.raw.String()
}

type running struct {
	tcp    string // host:port
	unix   string // socket path
	logs   *logSink
	cancel context.CancelFunc
	done   chan error // Run's result
}

// treeSeq numbers the cgroup trees of the daemons start runs.
var treeSeq atomic.Int64

// start runs the daemon in this process on a random port and a unix socket,
// and returns once it is ready.
func start(t *testing.T, cfg daemon.Config) *running {
	t.Helper()
	logs := &logSink{}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.Host = "127.0.0.1"
	cfg.Port = 0 // CodePort: as given (zero: none)
	cfg.NoJupyter = true
	if cfg.UnixSocket == "" {
		cfg.UnixSocket = filepath.Join(t.TempDir(), "envd.sock")
	}
	if cfg.CgroupTree == "" {
		// Its own tree: envd's default one ("envd") is shared with every
		// other envd on the machine, and one that stops removes it.
		cfg.CgroupTree = fmt.Sprintf("envd-daemon-test-%d-%d", os.Getpid(), treeSeq.Add(1))
	}
	ready := make(chan struct{})
	cfg.Ready = func() { close(ready) }
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{unix: cfg.UnixSocket, logs: logs, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- daemon.Run(ctx, cfg) }()
	select {
	case <-ready:
	case err := <-r.done:
		cancel()
		t.Fatalf("daemon.Run: %v\n%s", err, logs)
	case <-time.After(testTimeout):
		cancel()
		t.Fatalf("daemon not ready after %v\n%s", testTimeout, logs)
	}
	for _, a := range logs.addrs() {
		if strings.HasPrefix(a, "127.0.0.1:") {
			r.tcp = a
		}
	}
	if r.tcp == "" {
		t.Fatalf("no TCP address in the log:\n%s", logs)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(testTimeout):
			t.Errorf("daemon still running at cleanup")
		}
	})
	return r
}

// stop cancels Run's context and returns its result and how long it took.
func (r *running) stop(t *testing.T, within time.Duration) (time.Duration, error) {
	t.Helper()
	began := time.Now()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for Cleanup
		return time.Since(began), err
	case <-time.After(within):
		t.Fatalf("daemon did not stop within %v\n%s", within, r.logs)
		return 0, nil
	}
}

func tcpClient(t *testing.T) *http.Client {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{}, Timeout: testTimeout}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// smallWindowClient's connections take little at a time (a small socket
// receive buffer), so a stream the test does not read backs up into envd.
func smallWindowClient(t *testing.T) *http.Client {
	t.Helper()
	d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func getHealth(c *http.Client, url string) (int, error) {
	resp, err := c.Get(url + "/health")
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func TestRunServesTCPAndUnix(t *testing.T) {
	r := start(t, daemon.Config{})
	for name, tc := range map[string]struct {
		c   *http.Client
		url string
	}{
		"tcp":  {tcpClient(t), "http://" + r.tcp},
		"unix": {testutil.UnixClient(t, r.unix, testTimeout), "http://envd"},
	} {
		if code, err := getHealth(tc.c, tc.url); err != nil || code != http.StatusNoContent {
			t.Errorf("%s: GET /health = %d, %v; want 204", name, code, err)
		}
		pc := processconnect.NewProcessClient(tc.c, tc.url, connect.WithProtoJSON())
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		if _, err := pc.List(ctx, connect.NewRequest(&pb.ListRequest{})); err != nil {
			t.Errorf("%s: List: %v", name, err)
		}
		cancel()
	}
	// The daemon's route table went through server.New, which refuses a
	// route declared twice: serving at all proves the table is sound.
	if took, err := r.stop(t, testTimeout); err != nil {
		t.Fatalf("Run returned %v after %v", err, took)
	}
	if _, err := os.Stat(r.unix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unix socket %s left behind after shutdown: %v", r.unix, err)
	}
	if strings.Contains(r.logs.String(), `"level":"ERROR"`) {
		t.Errorf("errors logged:\n%s", r.logs)
	}
}

// TestRunReplacesStaleSocket: a socket file left by a crashed envd does not
// stop the next one from starting.
func TestRunReplacesStaleSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stale.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	// Leave the file, as a crash would.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	r := start(t, daemon.Config{UnixSocket: path})
	if code, err := getHealth(testutil.UnixClient(t, path, testTimeout), "http://envd"); err != nil || code != 204 {
		t.Fatalf("GET /health over the replaced socket: %d, %v", code, err)
	}
	r.stop(t, testTimeout)
}

func TestRunErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })
	busyPort := busy.Addr().(*net.TCPAddr).Port

	tests := []struct {
		name    string
		cfg     daemon.Config
		wantErr string
	}{
		{name: "unknown default user", cfg: daemon.Config{Host: "127.0.0.1", DefaultUser: "no-such-user-envd-test"}, wantErr: "default user: unknown user"},
		{name: "port in use", cfg: daemon.Config{Host: "127.0.0.1", Port: busyPort}, wantErr: "listen on port " + strconv.Itoa(busyPort)},
		{name: "unix socket in a missing directory", cfg: daemon.Config{Host: "127.0.0.1", UnixSocket: "/no/such/dir/envd.sock"}, wantErr: "listen on unix socket /no/such/dir/envd.sock"},
		{name: "bad host", cfg: daemon.Config{Host: "not a host"}, wantErr: "listen on port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.cfg.Logger = slog.New(slog.DiscardHandler)
			tt.cfg.NoJupyter = true
			tt.cfg.Ready = func() { t.Error("Ready called for a daemon that failed") }
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			err := daemon.Run(ctx, tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Run = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestRunClosesListenersOnFailure: when a later listener fails, the TCP one
// opened before it is closed again. Not parallel, as TestNoLeakedListener.
func TestRunClosesListenersOnFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	err = daemon.Run(context.Background(), daemon.Config{
		Host: "127.0.0.1", Port: port, NoJupyter: true,
		UnixSocket: "/no/such/dir/envd.sock",
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err == nil {
		t.Fatal("Run succeeded with a bad unix socket path")
	}
	ln, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("port %d still taken after a failed start: %v", port, err)
	}
	ln.Close()
}

// childOf returns a child of pid, 0 when it has none.
func childOf(pid int) int {
	if kids := procstat.Select(func(st procstat.Stat) bool { return st.PPid == pid }); len(kids) > 0 {
		return kids[0]
	}
	return 0
}

// startProcess starts cmd through the API and returns its pid and a channel
// closed when its stream ends; the stream stays open until the test ends or
// the daemon stops.
func startProcess(t *testing.T, pc processconnect.ProcessClient, cmd string, args ...string) (uint32, <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := pc.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: cmd, Args: args, Cwd: new("/")}}))
	if err != nil {
		t.Fatalf("Start %s: %v", cmd, err)
	}
	t.Cleanup(func() { stream.Close() })
	if !stream.Receive() {
		t.Fatalf("Start %s: %v", cmd, stream.Err())
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	if pid == 0 {
		t.Fatalf("Start %s: first event %v, want start", cmd, stream.Msg())
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for stream.Receive() {
		}
	}()
	return pid, ended
}

// TestShutdownStopsChildren: at shutdown, every child gets SIGTERM; one
// that ignores it is killed when the grace period ends, and Run returns
// then. The clock is the test's: the grace ends when the test says.
func TestShutdownStopsChildren(t *testing.T) {
	const grace = 5 * time.Second
	clock := quartz.NewMock(t)
	graceSet := clock.Trap().AfterFunc("shutdown", "children")
	defer graceSet.Close()
	r := start(t, daemon.Config{ShutdownGrace: grace, Clock: clock})
	pc := processconnect.NewProcessClient(tcpClient(t), "http://"+r.tcp, connect.WithProtoJSON())
	polite, politeEnded := startProcess(t, pc, "/bin/sleep", "300")
	stubborn, _ := startProcess(t, pc, "/bin/sh", "-c", `trap "" TERM; while :; do sleep 0.05; done`)
	// Its child ignores SIGTERM too, and is orphaned when the shell is killed.
	parent, _ := startProcess(t, pc, "/bin/sh", "-c", `trap "" TERM; sleep 300; true`)
	var orphan int
	testutil.Poll(t, "the shell's child", func() bool {
		orphan = childOf(int(parent))
		return orphan != 0
	})

	ctx := testutil.Context(t, testutil.Wait)
	r.cancel()
	graceSet.MustWait(ctx).MustRelease(ctx)
	// TERM ends the polite one; the others live on until the grace ends.
	testutil.RequireClosed(t, politeEnded, "the stream of the process that took SIGTERM to end")
	for _, pid := range []int{int(stubborn), int(parent), orphan} {
		if !testutil.Alive(pid) {
			t.Errorf("pid %d, which ignores SIGTERM, ended before the grace period did", pid)
		}
	}
	testutil.RequireOpen(t, r.done, "Run's return before the grace period ended")
	clock.Advance(grace).MustWait(ctx)
	if err := testutil.RequireReceive(t, r.done); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	r.done <- nil // for Cleanup
	for _, pid := range []int{int(polite), int(stubborn), int(parent), orphan} {
		if testutil.Alive(pid) {
			t.Errorf("pid %d still alive after shutdown", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// TestShutdownCancelsStreamsAfterGrace: a stream that does not end by
// itself (a directory watch) is cancelled once the stream grace period has
// run out, and only then.
func TestShutdownCancelsStreamsAfterGrace(t *testing.T) {
	const grace = 2 * time.Second
	clock := quartz.NewMock(t)
	graceSet := clock.Trap().NewTimer("shutdown", "streams")
	defer graceSet.Close()
	r := start(t, daemon.Config{StreamGrace: grace, Clock: clock})
	fc := filesystemconnect.NewFilesystemClient(tcpClient(t), "http://"+r.tcp, connect.WithProtoJSON())
	ctx := testutil.Context(t, testutil.Wait)
	watch, err := fc.WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: testutil.SharedDir(t)}))
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	if !watch.Receive() {
		t.Fatalf("WatchDir: %v", watch.Err())
	}
	ended := make(chan error, 1)
	go func() {
		for watch.Receive() {
		}
		ended <- watch.Err()
	}()
	r.cancel()
	graceSet.MustWait(ctx).MustRelease(ctx)
	testutil.RequireOpen(t, ended, "the watch's end before the grace period ended")
	testutil.RequireOpen(t, r.done, "Run's return before the grace period ended")
	clock.Advance(grace).MustWait(ctx)
	if err := testutil.RequireReceive(t, ended); err == nil {
		t.Errorf("watch ended without an error")
	}
	if err := testutil.RequireReceive(t, r.done); err != nil {
		t.Errorf("Run = %v", err)
	}
	r.done <- nil // for Cleanup
}

// TestShutdownEndsStreams: a client following a process at shutdown gets
// every byte of its output and then its end, even when it reads slowly: the
// daemon cancels requests only once their streams have ended (or after a
// grace period, which the test's clock never lets run out). The process has
// ended before the shutdown, its output backed up in the stream; the client
// reads nothing until envd has no child left, the point at which the old
// daemon cancelled every request.
func TestShutdownEndsStreams(t *testing.T) {
	r := start(t, daemon.Config{Clock: quartz.NewMock(t)})
	pc := processconnect.NewProcessClient(smallWindowClient(t), "http://"+r.tcp, connect.WithProtoJSON())
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const size = 600_000 // well under half the process's log: its output never waits for us
	stream, err := pc.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{
		Cmd: "/usr/bin/head", Args: []string{"-c", strconv.Itoa(size), "/dev/zero"}, Cwd: new("/"),
	}}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatal(stream.Err())
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	// Its end is published once its output is all in envd: from then on it
	// is no longer listed.
	list := processconnect.NewProcessClient(tcpClient(t), "http://"+r.tcp, connect.WithProtoJSON())
	testutil.Poll(t, "process to end", func() bool {
		resp, err := list.List(ctx, connect.NewRequest(&pb.ListRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		return !slices.ContainsFunc(resp.Msg.GetProcesses(), func(p *pb.ProcessInfo) bool { return p.GetPid() == pid })
	})
	stopped := make(chan error, 1)
	go func() {
		_, err := r.stop(t, testTimeout)
		stopped <- err
	}()
	testutil.Poll(t, "envd to have no child", func() bool { return len(reaper.Children()) == 0 })
	var got int
	var end *pb.ProcessEvent_EndEvent
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		got += len(ev.GetData().GetStdout())
		if e := ev.GetEnd(); e != nil {
			end = e
		}
	}
	if got != size || end == nil || end.GetStatus() != "exit status 0" {
		t.Errorf("got %d bytes of %d, end event %v (stream error %v); want all of it and exit status 0", got, size, end, stream.Err())
	}
	if err := testutil.RequireReceive(t, stopped); err != nil {
		t.Errorf("Run = %v", err)
	}
}

// TestNoLeakedListener: after Run returns, its port can be listened on again.
// Not parallel: no other daemon of this process may take the port meanwhile.
func TestNoLeakedListener(t *testing.T) {
	r := start(t, daemon.Config{})
	r.stop(t, testTimeout)
	ln, err := net.Listen("tcp", r.tcp)
	if err != nil {
		t.Fatalf("listen on %s after shutdown: %v", r.tcp, err)
	}
	ln.Close()
}
