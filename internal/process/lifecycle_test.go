package process_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/gen/process/processconnect"
	"github.com/envd-dev/envd/internal/process/processtest"
)

// TestDefaultUserAndWorkdir: without Basic auth a process runs as the
// default user, in its home, or in the default workdir once set; a relative
// cwd stays relative to the home.
func TestDefaultUserAndWorkdir(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	s := processtest.New(t, processtest.Options{DefaultUser: "user"})
	u := lookup(t, "user")
	c := s.Client(t, processtest.ClientOptions{Codec: processtest.JSON})
	run := func(cwd *string) (id, pwd string) {
		t.Helper()
		cfg := processtest.Sh("id -u; pwd -P")
		cfg.Cwd = cwd
		st := start(t, c, &pb.StartRequest{Process: cfg}).End(t, waitShort)
		checkEnd(t, st, exit0)
		id, pwd, _ = strings.Cut(strings.TrimSpace(st.Stdout), "\n")
		return id, pwd
	}
	if id, pwd := run(nil); id != strconv.Itoa(int(u.UID)) || pwd != u.Home {
		t.Errorf("default: uid %s in %s, want %d in %s", id, pwd, u.UID, u.Home)
	}
	s.Defaults.SetWorkdir("/tmp")
	if _, pwd := run(nil); pwd != "/tmp" {
		t.Errorf("with default workdir /tmp: pwd = %s", pwd)
	}
	if _, pwd := run(ptr("..")); pwd != filepath.Dir(u.Home) {
		t.Errorf("cwd '..' with default workdir: pwd = %s, want %s", pwd, filepath.Dir(u.Home))
	}
	// A cwd the user may not enter is refused, naming the directory that
	// stops the user (see TestCwdAsUser).
	private := filepath.Join(t.TempDir(), "private") // TempDir's parent is root's, mode 0700 too
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := processtest.Sh("pwd")
	cfg.Cwd = &private
	err := processtest.StartCall(c, &pb.StartRequest{Process: cfg})(bounded(t))
	wantErr(t, err, connect.CodePermissionDenied, "cwd '"+private+"'", "user 'user' may not enter", "permission denied")
}

// TestEnvPrecedence: login env < daemon env (/init's and the fixed ones) <
// request envs.
func TestEnvPrecedence(t *testing.T) {
	t.Parallel()
	s := processtest.New(t, processtest.Options{})
	s.Defaults.SetEnv(map[string]string{"DAEMON": "d", "SHARED": "daemon", "LOGNAME": "from-daemon", "TERM": "vt100"})
	c := s.Client(t, processtest.ClientOptions{})
	u := lookup(t, "root")
	st := start(t, c, &pb.StartRequest{Process: &pb.ProcessConfig{
		Cmd:  "env",
		Envs: map[string]string{"SHARED": "request", "E2B_SANDBOX": "from-request"},
	}}).End(t, waitShort)
	checkEnd(t, st, exit0)
	checkEnv(t, parseEnv(t, st.Stdout), map[string]string{
		"PATH": loginPath(), "HOME": u.Home, "USER": u.Name, "SHELL": u.Shell,
		"LOGNAME":     "from-daemon",
		"TERM":        "vt100", // envd's dumb for pipes, overridden
		"DAEMON":      "d",
		"SHARED":      "request",
		"E2B_SANDBOX": "from-request",
	})
	// Request envs are not remembered.
	st = start(t, c, &pb.StartRequest{Process: processtest.Sh("echo ${SHARED}")}).End(t, waitShort)
	if st.Stdout != "daemon\n" {
		t.Errorf("next process sees SHARED=%q, want daemon", st.Stdout)
	}
}

// TestKeepalive: with Keepalive-Ping-Interval: 1 a quiet process's stream
// carries a keepalive about every second, on Start and on Connect.
func TestKeepalive(t *testing.T) {
	t.Parallel()
	s := processtest.New(t, processtest.Options{})
	for _, codec := range []processtest.Codec{processtest.JSON, processtest.Binary} {
		t.Run(string(codec), func(t *testing.T) {
			t.Parallel()
			c := s.Client(t, processtest.ClientOptions{Codec: codec, Header: http.Header{"Keepalive-Ping-Interval": {"1"}}})
			w := start(t, c, &pb.StartRequest{Process: processtest.Sh("echo a; read x; echo b")})
			pid := w.Pid(t)
			cw := processtest.Connect(t, c, processtest.PidSel(pid), processtest.WatchOptions{})
			for _, x := range []*processtest.Watcher{w, cw} {
				x.WaitFor(t, waitShort, "2 keepalives", func(s processtest.Snapshot) bool { return s.Keepalives >= 2 })
			}
			if _, err := c.SendInput(bounded(t), connect.NewRequest(&pb.SendInputRequest{Process: processtest.PidSel(pid), Input: processtest.StdinInput("\n")})); err != nil {
				t.Fatal(err)
			}
			for _, x := range []*processtest.Watcher{w, cw} {
				st := x.End(t, waitShort)
				checkEnd(t, st, exit0)
				if st.Stdout != "a\nb\n" {
					t.Errorf("stdout = %q", st.Stdout)
				}
			}
		})
	}
	t.Run("default interval is long", func(t *testing.T) {
		t.Parallel()
		c := s.Client(t, processtest.ClientOptions{})
		st := start(t, c, &pb.StartRequest{Process: processtest.Sh("sleep 1.2")}).End(t, waitShort)
		if st.Keepalives != 0 {
			t.Errorf("%d keepalives in 1.2 s without the header", st.Keepalives)
		}
	})
}

// ticker is a script printing tick1..tickN, one every 50 ms, that touches
// the file $1 after tick $2.
const ticker = `for i in $(seq 1 %d); do echo tick$i; [ $i = "$2" ] && touch "$1"; sleep 0.05; done`

func ticks(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "tick%d\n", i)
	}
	return b.String()
}

// TestReconnectReplay drops the Start stream mid-way: the process goes on
// printing with nobody attached; a later Connect gets everything printed
// so far, then live output, then the end; a Connect after the exit gets the
// whole output and the end.
func TestReconnectReplay(t *testing.T) {
	t.Parallel()
	s := processtest.New(t, processtest.Options{})
	for _, cc := range processtest.ClientCases("") {
		t.Run(cc.Name, func(t *testing.T) {
			t.Parallel()
			c := s.Client(t, cc.Opts)
			const n = 30
			mark := filepath.Join(t.TempDir(), "mark")
			w := start(t, c, &pb.StartRequest{Process: processtest.Sh(fmt.Sprintf(ticker, n), "sh", mark, "15")})
			pid := w.Pid(t)
			w.Output(t, waitShort, "tick3\n")
			w.Close() // the client goes away
			if st := w.Done(t, waitShort); st.End != nil {
				t.Fatalf("the dropped stream got the end: %v", st.End)
			}
			// Printing goes on, unwatched, past tick 15.
			processtest.Eventually(t, waitShort, func() bool { _, err := os.Stat(mark); return err == nil }, "no tick15 while detached")
			if listed(t, c, pid) == nil {
				t.Fatalf("process %d gone after its client left", pid)
			}
			cw := processtest.Connect(t, c, processtest.PidSel(pid), processtest.WatchOptions{})
			// Replay: ticks 1..15 at once, though printed while detached.
			cw.Output(t, waitShort, ticks(1, 15))
			st := cw.End(t, waitShort)
			checkEnd(t, st, exit0)
			if st.Stdout != ticks(1, n) {
				t.Errorf("Connect got %q, want tick1..tick%d once each, in order", st.Stdout, n)
			}
			// After the exit, within retention: the same output, then the end.
			processtest.Eventually(t, waitShort, func() bool { return listed(t, c, pid) == nil }, "ended pid %d still listed", pid)
			late := processtest.Connect(t, c, processtest.PidSel(pid), processtest.WatchOptions{}).End(t, waitShort)
			checkEnd(t, late, exit0)
			if late.Pid != pid || late.Stdout != ticks(1, n) {
				t.Errorf("late Connect: pid %d, stdout %q; want pid %d and every tick", late.Pid, late.Stdout, pid)
			}
		})
	}
}

// TestRetention: an exited process can be connected to for Retention, then
// it is not found.
func TestRetention(t *testing.T) {
	t.Parallel()
	s := processtest.New(t, processtest.Options{Retention: 2 * time.Second})
	c := s.Client(t, processtest.ClientOptions{})
	tag := processtest.UniqueTag("retention")
	w := start(t, c, &pb.StartRequest{Process: processtest.Sh("echo bye; exit 7"), Tag: &tag})
	pid := w.Pid(t)
	w.End(t, waitShort)
	late := processtest.Connect(t, c, processtest.TagSel(tag), processtest.WatchOptions{}).End(t, waitShort)
	checkEnd(t, late, end{7, true, "exit status 7"})
	if late.Stdout != "bye\n" {
		t.Errorf("late Connect stdout = %q", late.Stdout)
	}
	processtest.Eventually(t, waitShort, func() bool {
		return processtest.Code(processtest.ConnectCall(c, processtest.PidSel(pid))(bounded(t))) == connect.CodeNotFound.String()
	}, "pid %d still found after retention", pid)
}

// TestFanOut: Start and several Connects all get every byte and the end.
func TestFanOut(t *testing.T) {
	t.Parallel()
	s := processtest.New(t, processtest.Options{})
	c := s.Client(t, processtest.ClientOptions{})
	w := start(t, c, &pb.StartRequest{Process: processtest.Sh("read x; head -c 300000 /dev/urandom | od -An -v -tx1; echo err >&2; exit 2")})
	pid := w.Pid(t)
	var watchers []*processtest.Watcher
	for range 3 {
		watchers = append(watchers, processtest.Connect(t, c, processtest.PidSel(pid), processtest.WatchOptions{}))
	}
	for _, x := range watchers {
		x.Pid(t)
	}
	if _, err := c.SendInput(bounded(t), connect.NewRequest(&pb.SendInputRequest{Process: processtest.PidSel(pid), Input: processtest.StdinInput("go\n")})); err != nil {
		t.Fatal(err)
	}
	want := w.End(t, waitShort)
	checkEnd(t, want, end{2, true, "exit status 2"})
	if len(want.Stdout) < 900000 || want.Stderr != "err\n" {
		t.Fatalf("Start stream: %d bytes of stdout, stderr %q", len(want.Stdout), want.Stderr)
	}
	for i, x := range watchers {
		got := x.End(t, waitShort)
		checkEnd(t, got, end{2, true, "exit status 2"})
		if got.Stdout != want.Stdout || got.Stderr != want.Stderr {
			t.Errorf("Connect #%d: %d bytes stdout, stderr %q; want the same as Start's (%d bytes)", i, len(got.Stdout), got.Stderr, len(want.Stdout))
		}
	}
}

// TestEndAfterAllOutput: the end comes after every byte, even when much is
// printed right before the exit.
func TestEndAfterAllOutput(t *testing.T) {
	t.Parallel()
	s := processtest.New(t, processtest.Options{})
	for _, codec := range []processtest.Codec{processtest.JSON, processtest.Binary} {
		t.Run(string(codec), func(t *testing.T) {
			t.Parallel()
			c := s.Client(t, processtest.ClientOptions{Codec: codec})
			for _, pty := range []bool{false, true} {
				req := &pb.StartRequest{Process: processtest.Sh("head -c 1000000 /dev/zero | tr '\\0' x; echo; echo last >&2; exit 3")}
				want := 1000000 + len("\nlast\n")
				if pty {
					req.Pty = processtest.PTYSize(80, 24)
					want = 1000000 + len("\r\nlast\r\n")
				}
				st := start(t, c, req).End(t, waitShort)
				checkEnd(t, st, end{3, true, "exit status 3"})
				if got := len(st.Stdout) + len(st.Stderr) + len(st.PTY); got != want {
					t.Errorf("pty %v: %d bytes before the end, want %d", pty, got, want)
				}
				if !strings.HasSuffix(st.Stderr+st.PTY, "last\n") && !strings.HasSuffix(st.PTY, "last\r\n") {
					t.Errorf("pty %v: the last line is missing", pty)
				}
			}
		})
	}
}

// TestStartDeadline: Connect-Timeout-Ms on Start is the process's lifetime:
// when it runs out the process is killed, whoever is attached.
func TestStartDeadline(t *testing.T) {
	t.Parallel()
	s := processtest.New(t, processtest.Options{})
	for _, cc := range processtest.ClientCases("") {
		t.Run(cc.Name, func(t *testing.T) {
			t.Parallel()
			c := s.Client(t, cc.Opts)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			began := time.Now()
			w := processtest.Start(t, c, &pb.StartRequest{Process: processtest.Sh("echo up; exec sleep 60")}, processtest.WatchOptions{Context: ctx})
			pid := w.Pid(t)
			other := processtest.Connect(t, c, processtest.PidSel(pid), processtest.WatchOptions{})
			st := w.Done(t, waitShort)
			if code := processtest.Code(st.Err); code != connect.CodeDeadlineExceeded.String() {
				t.Errorf("Start stream ended with %s (%v), want deadline_exceeded", code, st.Err)
			}
			// A stream that was attached sees the kill.
			checkEnd(t, other.End(t, waitShort), killed)
			if d := time.Since(began); d > 10*time.Second {
				t.Errorf("killed after %v", d)
			}
			processtest.Eventually(t, waitShort, func() bool { return listed(t, c, pid) == nil }, "pid %d still listed", pid)
			fresh := processtest.Connect(t, c, processtest.PidSel(pid), processtest.WatchOptions{}).End(t, waitShort)
			checkEnd(t, fresh, killed)
			if fresh.Stdout != "up\n" {
				t.Errorf("fresh Connect stdout = %q", fresh.Stdout)
			}
		})
	}
}

// TestConnectDeadline: a Connect's deadline ends that stream only.
func TestConnectDeadline(t *testing.T) {
	t.Parallel()
	s := processtest.New(t, processtest.Options{})
	c := s.Client(t, processtest.ClientOptions{Codec: processtest.JSON})
	w := start(t, c, &pb.StartRequest{Process: processtest.Sh("echo up; read x; echo after:$x")})
	pid := w.Pid(t)
	// A deadline that runs out before the stream has begun, or before the
	// replay of "up" arrives, says nothing about envd: a loaded machine can
	// take a second for that. Such a try is made again with a longer one.
	for d := time.Second; ; d *= 4 {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		last := d >= 16*time.Second
		cw, err := processtest.TryConnect(t, c, processtest.PidSel(pid), processtest.WatchOptions{Context: ctx})
		if err != nil && !last && connect.CodeOf(err) == connect.CodeDeadlineExceeded {
			t.Logf("the stream had not begun after %v; trying a longer deadline", d)
			continue
		}
		if err != nil {
			t.Fatalf("Connect: %v", err)
		}
		st := cw.Done(t, waitShort+d)
		if st.Stdout == "" && !last {
			t.Logf("no replay within %v; trying a longer deadline", d)
			continue
		}
		if code := processtest.Code(st.Err); code != connect.CodeDeadlineExceeded.String() {
			t.Errorf("Connect ended with %s (%v), want deadline_exceeded", code, st.Err)
		}
		if st.Stdout != "up\n" {
			t.Errorf("Connect stdout = %q", st.Stdout)
		}
		break
	}
	if listed(t, c, pid) == nil {
		t.Fatalf("process %d gone after a Connect's deadline", pid)
	}
	if _, err := c.SendInput(bounded(t), connect.NewRequest(&pb.SendInputRequest{Process: processtest.PidSel(pid), Input: processtest.StdinInput("ok\n")})); err != nil {
		t.Fatal(err)
	}
	if st := w.End(t, waitShort); st.Stdout != "up\nafter:ok\n" {
		t.Errorf("Start stdout = %q", st.Stdout)
	}
}

// TestBackgroundChildren: a background child that holds the output pipe
// delays the end, as upstream (users rely on it, and on redirecting to
// detach); SIGKILL ends promptly even with an orphan holding the pipe.
func TestBackgroundChildren(t *testing.T) {
	t.Parallel()
	s := processtest.New(t, processtest.Options{})
	c := s.Client(t, processtest.ClientOptions{})
	// orphan reads the pid a script printed on its first line and has it
	// killed at cleanup.
	orphan := func(t *testing.T, w *processtest.Watcher) {
		t.Helper()
		st := w.Output(t, waitShort, "\n")
		pid, err := strconv.Atoi(strings.Fields(st.Stdout)[0])
		if err != nil {
			t.Fatalf("no pid in %q", st.Stdout)
		}
		processtest.KillAtCleanup(t, pid)
	}
	t.Run("holding the pipe delays the end", func(t *testing.T) {
		t.Parallel()
		began := time.Now() // before the sleep starts: it ends 1 s after at the earliest
		w := start(t, c, &pb.StartRequest{Process: processtest.Sh("sleep 1 & echo $! started")})
		orphan(t, w)
		st := w.End(t, waitShort)
		checkEnd(t, st, exit0)
		if d := time.Since(began); d < time.Second {
			t.Errorf("end came %v after the start, before the shell's child closed the pipe", d)
		}
	})
	t.Run("redirected child does not", func(t *testing.T) {
		t.Parallel()
		w := start(t, c, &pb.StartRequest{Process: processtest.Sh("sleep 30 >/dev/null 2>&1 & echo $! started")})
		orphan(t, w)
		began := time.Now()
		checkEnd(t, w.End(t, waitShort), exit0)
		if d := time.Since(began); d > 10*time.Second {
			t.Errorf("end came after %v", d)
		}
	})
	// The shell has exited (and was reaped) but its orphan holds the pipe: it
	// is still listed, and a kill must end the wait, as upstream's kill of
	// the zombie does.
	t.Run("SIGKILL after the exit, with an orphan holding the pipe", func(t *testing.T) {
		t.Parallel()
		w := start(t, c, &pb.StartRequest{Process: processtest.Sh("sleep 60 & echo $! started")})
		orphan(t, w)
		pid := w.Pid(t)
		// Wait until the shell itself is gone.
		processtest.Eventually(t, waitShort, func() bool {
			_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
			return err != nil
		}, "shell %d still running", pid)
		if listed(t, c, pid) == nil {
			t.Fatalf("pid %d not listed while its orphan holds the output", pid)
		}
		began := time.Now()
		if _, err := c.SendSignal(bounded(t), connect.NewRequest(&pb.SendSignalRequest{Process: processtest.PidSel(pid), Signal: pb.Signal_SIGNAL_SIGKILL})); err != nil {
			t.Fatalf("SendSignal to a listed process: %v", err)
		}
		checkEnd(t, w.End(t, waitShort), exit0) // it had exited by itself
		if d := time.Since(began); d > 10*time.Second {
			t.Errorf("end came %v after the signal", d)
		}
	})
	for _, sig := range []pb.Signal{pb.Signal_SIGNAL_SIGKILL, pb.Signal_SIGNAL_SIGTERM} {
		t.Run(sig.String()+" with an orphan holding the pipe", func(t *testing.T) {
			t.Parallel()
			w := start(t, c, &pb.StartRequest{Process: processtest.Sh("sleep 60 & echo $!; wait")})
			orphan(t, w)
			began := time.Now()
			if _, err := c.SendSignal(bounded(t), connect.NewRequest(&pb.SendSignalRequest{Process: processtest.PidSel(w.Pid(t)), Signal: sig})); err != nil {
				t.Fatal(err)
			}
			want := killed
			if sig == pb.Signal_SIGNAL_SIGTERM {
				want = end{-1, false, "signal: terminated"}
			}
			checkEnd(t, w.End(t, waitShort), want)
			if d := time.Since(began); d > 10*time.Second {
				t.Errorf("end came %v after the signal", d)
			}
		})
	}
}

// TestSignalRacesExit signals processes just as they end: each signal
// succeeds or finds the process gone (not_found), never an internal error.
func TestSignalRacesExit(t *testing.T) {
	t.Parallel()
	s := processtest.New(t, processtest.Options{})
	c := s.Client(t, processtest.ClientOptions{})
	for i := range 40 {
		w := start(t, c, &pb.StartRequest{Process: processtest.Sh("exit 0")})
		pid := w.Pid(t)
		var errs []error
		for {
			_, err := c.SendSignal(bounded(t), connect.NewRequest(&pb.SendSignalRequest{Process: processtest.PidSel(pid), Signal: pb.Signal_SIGNAL_SIGKILL}))
			errs = append(errs, err)
			if err != nil {
				break
			}
		}
		for _, err := range errs {
			if code := processtest.Code(err); code != "ok" && code != connect.CodeNotFound.String() {
				t.Errorf("run %d: SendSignal: %v", i, err)
			}
		}
		w.Done(t, waitShort)
	}
}

// TestManyProcesses runs 200 processes at once, over both HTTP versions
// and codecs: all succeed with their own output.
func TestManyProcesses(t *testing.T) {
	t.Parallel()
	s := processtest.New(t, processtest.Options{})
	cases := processtest.ClientCases("")
	const n = 200
	type result struct {
		pid            uint32
		stdout, stderr string
		end            *pb.ProcessEvent_EndEvent
		err            error
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	ctx := processtest.Context(t, waitLong)
	// One client per case, as an SDK holds one: HTTP/2 multiplexes its
	// streams on one connection. (200 clients meant 100 h2c handshakes at
	// once, and Go's HTTP/2 server drops a connection whose client has not
	// sent its SETTINGS within 2 s, which a starved machine misses.)
	clients := make([]processconnect.ProcessClient, len(cases))
	for i, tc := range cases {
		clients[i] = s.Client(t, tc.Opts)
	}
	for i := range n {
		c := clients[i%len(cases)]
		wg.Go(func() {
			r := &results[i]
			st, err := c.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: processtest.Sh(`echo "out $1"; echo "err $1" >&2; exit $(($1 % 5))`, "sh", strconv.Itoa(i))}))
			if err != nil {
				r.err = err
				return
			}
			defer st.Close()
			for st.Receive() {
				e := st.Msg().GetEvent()
				switch {
				case e.GetStart() != nil:
					r.pid = e.GetStart().GetPid()
				case e.GetData() != nil:
					r.stdout += string(e.GetData().GetStdout())
					r.stderr += string(e.GetData().GetStderr())
				case e.GetEnd() != nil:
					r.end = e.GetEnd()
				}
			}
			r.err = st.Err()
		})
	}
	wg.Wait()
	pids := map[uint32]int{}
	for i, r := range results {
		if r.err != nil || r.end == nil {
			t.Errorf("process %d: err %v, end %v", i, r.err, r.end)
			continue
		}
		if prev, dup := pids[r.pid]; dup {
			t.Errorf("processes %d and %d both got pid %d", prev, i, r.pid)
		}
		pids[r.pid] = i
		if r.stdout != fmt.Sprintf("out %d\n", i) || r.stderr != fmt.Sprintf("err %d\n", i) {
			t.Errorf("process %d: stdout %q stderr %q", i, r.stdout, r.stderr)
		}
		if code := int32(i % 5); r.end.GetExitCode() != code || !r.end.GetExited() || r.end.GetStatus() != fmt.Sprintf("exit status %d", code) {
			t.Errorf("process %d: end %v, want exit status %d", i, r.end, code)
		}
	}
}

// TestStdinNotRead: input to a program that does not read it fills the pipe;
// the SendInput then ends with its request instead of holding the input lock
// for ever, and CloseStdin still works at once.
func TestStdinNotRead(t *testing.T) {
	t.Parallel()
	s := processtest.New(t, processtest.Options{})
	c := s.Client(t, processtest.ClientOptions{})
	w := start(t, c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"30"}}, Stdin: ptr(true)})
	pid := w.Pid(t)
	big := make([]byte, 4<<20) // more than any pipe holds
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: processtest.PidSel(pid), Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: big}}}))
	if code := connect.CodeOf(err); code != connect.CodeDeadlineExceeded && code != connect.CodeCanceled {
		t.Fatalf("SendInput to a program not reading stdin: %v, want deadline_exceeded or canceled", err)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), waitShort)
	defer ccancel()
	if _, err := c.CloseStdin(cctx, connect.NewRequest(&pb.CloseStdinRequest{Process: processtest.PidSel(pid)})); err != nil {
		t.Fatalf("CloseStdin after the cut-short input: %v", err)
	}
	if _, err := c.SendSignal(cctx, connect.NewRequest(&pb.SendSignalRequest{Process: processtest.PidSel(pid), Signal: pb.Signal_SIGNAL_SIGKILL})); err != nil {
		t.Fatalf("kill: %v", err)
	}
	checkEnd(t, w.End(t, waitShort), killed)
}
