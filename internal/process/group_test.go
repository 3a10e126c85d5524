package process_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/quartz"
	"golang.org/x/sys/unix"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/gen/process/processconnect"
	"github.com/envd-dev/envd/internal/process/processtest"
	"github.com/envd-dev/envd/internal/procstat"
)

// bomb starts 50 background sleeps and waits for them.
const bomb = `for i in $(seq 50); do sleep 1000 & done; echo ready; wait`

// groupOf lists the processes whose process group is pgid, from /proc.
func groupOf(pgid uint32) []int {
	return procstat.Select(func(st procstat.Stat) bool { return st.PGrp == int(pgid) })
}

// startBomb starts bomb and returns its watcher once all 51 processes run.
func startBomb(t *testing.T, c processconnect.ProcessClient, o processtest.WatchOptions) (*processtest.Watcher, uint32) {
	t.Helper()
	w := processtest.Start(t, c, &pb.StartRequest{Process: processtest.Sh(bomb)}, o)
	w.Output(t, waitShort, "ready\n")
	pid := w.Pid(t)
	processtest.Eventually(t, waitShort, func() bool { return len(groupOf(pid)) >= 51 }, "group of %d: %v", pid, groupOf(pid))
	return w, pid
}

// noneLeft checks that no process of the group is left.
func noneLeft(t *testing.T, pid uint32) {
	t.Helper()
	if left := groupOf(pid); len(left) > 0 {
		t.Errorf("after the end, %d processes of the group of %d are left: %v", len(left), pid, left)
		for _, q := range left {
			unix.Kill(q, unix.SIGKILL)
		}
	}
}

// TestSignalReachesGroup: SendSignal reaches everything the process started
// in its group, and the end comes once they are all gone.
func TestSignalReachesGroup(t *testing.T) {
	t.Parallel()
	s := processtest.New(t, processtest.Options{})
	for _, tc := range []struct {
		sig  pb.Signal
		want end
	}{
		{pb.Signal_SIGNAL_SIGKILL, killed},
		{pb.Signal_SIGNAL_SIGTERM, end{-1, false, "signal: terminated"}},
	} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			t.Parallel()
			c := s.Client(t, processtest.ClientOptions{})
			w, pid := startBomb(t, c, processtest.WatchOptions{})
			if _, err := c.SendSignal(bounded(t), connect.NewRequest(&pb.SendSignalRequest{Process: processtest.PidSel(pid), Signal: tc.sig})); err != nil {
				t.Fatal(err)
			}
			checkEnd(t, w.End(t, waitShort), tc.want)
			noneLeft(t, pid)
		})
	}
}

// TestTimeoutReachesGroup: the lifetime a Start's deadline gives kills the
// whole group. The clock is fake: the test runs the lifetime out.
func TestTimeoutReachesGroup(t *testing.T) {
	t.Parallel()
	clock := quartz.NewMock(t)
	trap := clock.Trap().AfterFunc("process", "timeout")
	defer trap.Close()
	s := processtest.New(t, processtest.Options{Clock: clock})
	c := s.Client(t, processtest.ClientOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	wctx := processtest.Context(t, waitShort)
	// The Start call returns once the handler answers, which is after the
	// timer is set: release the trapped call from another goroutine.
	released := make(chan error, 1)
	var lifetime time.Duration
	go func() {
		call, err := trap.Wait(wctx)
		if err == nil {
			lifetime = call.Duration
			err = call.Release(wctx)
		}
		released <- err
	}()
	w, pid := startBomb(t, c, processtest.WatchOptions{Context: ctx})
	if err := <-released; err != nil {
		t.Fatalf("lifetime timer: %v", err)
	}
	// Keepalives tick on the same clock: run events until the lifetime is out.
	for passed := time.Duration(0); passed < lifetime; {
		d, aw := clock.AdvanceNext()
		aw.MustWait(wctx)
		passed += d
	}
	checkEnd(t, w.End(t, waitShort), killed)
	noneLeft(t, pid)
}

// TestCloseStdinDuringBlockedWrite: a SendInput to a program that does not
// read waits (its deadline is far), and CloseStdin does not wait behind it:
// it closes at once and the write ends, failed. A later input that waits
// behind a blocked one ends with its own deadline.
func TestCloseStdinDuringBlockedWrite(t *testing.T) {
	t.Parallel()
	s := processtest.New(t, processtest.Options{})
	c := s.Client(t, processtest.ClientOptions{})
	w := start(t, c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"30"}}, Stdin: ptr(true)})
	pid := w.Pid(t)
	big := &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: make([]byte, 4<<20)}}
	blocked := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		_, err := c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: processtest.PidSel(pid), Input: big}))
		blocked <- err
	}()
	// The write is blocked once the pipe the program does not read is full.
	in, err := os.Open(fmt.Sprintf("/proc/%d/fd/0", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	size, err := unix.FcntlInt(in.Fd(), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		t.Fatal(err)
	}
	processtest.Eventually(t, waitShort, func() bool {
		n, err := unix.IoctlGetInt(int(in.Fd()), unix.TIOCINQ)
		return err == nil && n >= size
	}, "stdin pipe of %d never filled", pid)

	// An input behind the blocked one ends with its deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err = c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: processtest.PidSel(pid), Input: processtest.StdinInput("x")}))
	cancel()
	if code := connect.CodeOf(err); code != connect.CodeDeadlineExceeded && code != connect.CodeCanceled {
		t.Errorf("input behind a blocked one: %v, want deadline_exceeded or canceled", err)
	}

	if _, err := c.CloseStdin(bounded(t), connect.NewRequest(&pb.CloseStdinRequest{Process: processtest.PidSel(pid)})); err != nil {
		t.Fatalf("CloseStdin while a write is blocked: %v", err)
	}
	select {
	case err := <-blocked:
		wantErr(t, err, connect.CodeFailedPrecondition, "closed while the input was being written")
	case <-time.After(waitShort):
		t.Fatal("the blocked write did not end when stdin was closed")
	}
	_, err = c.SendInput(bounded(t), connect.NewRequest(&pb.SendInputRequest{Process: processtest.PidSel(pid), Input: processtest.StdinInput("x")}))
	wantErr(t, err, connect.CodeFailedPrecondition, "not enabled or already closed")
	kill(t, c, pid)
	checkEnd(t, w.End(t, waitShort), killed)
}

// sessionOf lists the processes whose session is sid, from /proc.
func sessionOf(sid uint32) []int {
	return procstat.Select(func(st procstat.Stat) bool { return st.Session == int(sid) })
}

// TestSignalReachesSession: on a terminal the process leads a session, and a
// job-control shell puts its jobs in groups of their own: a kill reaches
// every process of the session, and the end comes once they are gone.
func TestSignalReachesSession(t *testing.T) {
	t.Parallel()
	s := processtest.New(t, processtest.Options{})
	c := s.Client(t, processtest.ClientOptions{})
	w := start(t, c, &pb.StartRequest{Process: processtest.Sh(`set -m; for i in 1 2 3 4 5; do sleep 1000 & done; echo ready; wait`), Pty: processtest.PTYSize(80, 24)})
	pid := w.Pid(t)
	processtest.Eventually(t, waitShort, func() bool { return len(sessionOf(pid)) >= 6 }, "session of %d: %v", pid, sessionOf(pid))
	if len(groupOf(pid)) >= 6 {
		t.Fatalf("the jobs share the shell's group %d: the test does not exercise the session", pid)
	}
	kill(t, c, pid)
	checkEnd(t, w.End(t, waitShort), killed)
	if left := sessionOf(pid); len(left) > 0 {
		t.Errorf("after the end, %d processes of the session of %d are left: %v", len(left), pid, left)
		for _, q := range left {
			unix.Kill(q, unix.SIGKILL)
		}
	}
}
