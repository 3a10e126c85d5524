package process_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/internal/process"
	"github.com/envd-dev/envd/internal/process/processtest"
)

// TestTypedEnds: the end says why the process ended and what it used;
// an older Python SDK (User-Agent connect-python) gets neither field: the
// service always sends both, and the server's handler options
// (internal/legacysdk) strip them for it.
func TestTypedEnds(t *testing.T) {
	t.Parallel()
	s := processtest.New(t, processtest.Options{})
	c := s.Client(t, processtest.ClientOptions{})
	run := func(req *pb.StartRequest) *pb.ProcessEvent_EndEvent {
		t.Helper()
		return start(t, c, req).End(t, waitShort).End
	}

	// Exited, with the CPU and memory it used: 64 MiB touched, a busy loop.
	e := run(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/usr/bin/python3", Args: []string{"-c",
		"b = bytearray(64 << 20)\nn = 0\nfor i in range(3_000_000): n += i\nraise SystemExit(3)"}}})
	if e.GetReason() != pb.ProcessEvent_END_REASON_EXITED || e.GetExitCode() != 3 {
		t.Errorf("exit 3: %v", e)
	}
	if u := e.GetUsage(); u.GetMaxRssBytes() < 64<<20 || u.GetUserCpuUs() == 0 {
		t.Errorf("usage %v: want a peak RSS of at least 64 MiB and some user CPU", u)
	}

	// Its own signal.
	if e := run(&pb.StartRequest{Process: processtest.Sh("kill -KILL $$")}); e.GetReason() != pb.ProcessEvent_END_REASON_SIGNALED {
		t.Errorf("killed itself: %v", e)
	}

	// A client's signal.
	w := start(t, c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "sleep", Args: []string{"60"}}})
	if _, err := c.SendSignal(bounded(t), connect.NewRequest(&pb.SendSignalRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: w.Pid(t)}}, Signal: pb.Signal_SIGNAL_SIGTERM,
	})); err != nil {
		t.Fatal(err)
	}
	if e := w.End(t, waitShort).End; e.GetReason() != pb.ProcessEvent_END_REASON_CLIENT_SIGNAL || e.GetStatus() != "signal: terminated" {
		t.Errorf("client's SIGTERM: %v", e)
	}

	// Its lifetime: the Start request's deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	stream, err := c.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "sleep", Args: []string{"60"}}}))
	if err != nil {
		t.Fatal(err)
	}
	var pid uint32
	for stream.Receive() {
		if st := stream.Msg().GetEvent().GetStart(); st != nil {
			pid = st.GetPid()
		}
	}
	stream.Close()
	cw := processtest.Connect(t, c, &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}, processtest.WatchOptions{})
	if e := cw.End(t, waitShort).End; e.GetReason() != pb.ProcessEvent_END_REASON_TIMED_OUT {
		t.Errorf("past its deadline: %v", e)
	}

	// An older Python SDK: the end as it knows it (internal/legacysdk has
	// the strict checks of every procedure).
	py := s.Client(t, processtest.ClientOptions{Codec: processtest.JSON, Header: http.Header{"User-Agent": {"connect-python/0.4"}}})
	if e := start(t, py, &pb.StartRequest{Process: processtest.Sh("exit 2")}).End(t, waitShort).End; e.GetReason() != 0 || e.GetUsage() != nil || e.GetExitCode() != 2 {
		t.Errorf("connect-python: %v", e)
	}
}

// TestShutdownEnds: a process envd's shutdown ended says so.
func TestShutdownEnds(t *testing.T) {
	t.Parallel()
	m := newManager(t, process.Options{})
	p := startDomain(t, m, "sleep", "30")
	m.Shutdown(context.Background())
	if ex, ok := p.Exit(); !ok || ex.Reason != process.EndShutdown || ex.Usage == nil {
		t.Errorf("exit %+v, %v", ex, ok)
	}
}
