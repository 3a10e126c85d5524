package procconnect_test

import (
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/quartz"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/internal/process/processtest"
	"github.com/envd-dev/envd/internal/server"
)

// TestStreamKeepaliveClock: the Start and Connect streams of a quiet
// process carry a keepalive each Keepalive-Ping-Interval of the manager's
// clock, and without the header the interval is the default; driven by a
// mock clock, without waiting for real seconds.
func TestStreamKeepaliveClock(t *testing.T) {
	t.Parallel()
	ctx := paceContext(t)
	clk := quartz.NewMock(t).WithLogger(quietLogger{})
	s := processtest.New(t, processtest.Options{Clock: clk})
	tickers := clk.Trap().NewTicker("streamloop", "keepalive")
	defer tickers.Close()

	c := s.Client(t, processtest.ClientOptions{Header: http.Header{"Keepalive-Ping-Interval": {"1"}}})
	w := start(t, c, &pb.StartRequest{Process: processtest.Sh("read x; echo b")})
	pid := w.Pid(t)
	if call := tickers.MustWait(ctx); call.Duration != time.Second {
		t.Errorf("Start stream: keepalive every %v, want 1s", call.Duration)
	} else {
		call.MustRelease(ctx)
	}
	cw := processtest.Connect(t, c, processtest.PidSel(pid), processtest.WatchOptions{})
	if call := tickers.MustWait(ctx); call.Duration != time.Second {
		t.Errorf("Connect stream: keepalive every %v, want 1s", call.Duration)
	} else {
		call.MustRelease(ctx)
	}
	plain := processtest.Connect(t, s.Client(t, processtest.ClientOptions{}), processtest.PidSel(pid), processtest.WatchOptions{})
	if call := tickers.MustWait(ctx); call.Duration != server.DefaultKeepalive {
		t.Errorf("stream without the header: keepalive every %v, want %v", call.Duration, server.DefaultKeepalive)
	} else {
		call.MustRelease(ctx)
	}
	tickers.Close()

	for n := 1; n <= 2; n++ {
		clk.Advance(time.Second).MustWait(ctx)
		for _, x := range []*processtest.Watcher{w, cw} {
			x.WaitFor(t, waitShort, "a keepalive", func(s processtest.Snapshot) bool { return s.Keepalives >= n })
		}
	}
	if _, err := c.SendInput(bounded(t), connect.NewRequest(&pb.SendInputRequest{Process: processtest.PidSel(pid), Input: processtest.StdinInput("\n")})); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*processtest.Watcher{w, cw, plain} {
		st := x.End(t, waitShort)
		checkExit0(t, st)
		if st.Stdout != "b\n" {
			t.Errorf("stdout = %q", st.Stdout)
		}
	}
	if st := plain.Snapshot(); st.Keepalives != 0 {
		t.Errorf("%d keepalives after 2 s at the default interval of %v", st.Keepalives, server.DefaultKeepalive)
	}
	for _, x := range []*processtest.Watcher{w, cw} {
		if st := x.Snapshot(); st.Keepalives != 2 {
			t.Errorf("%d keepalives in 2 s of the clock at 1 s intervals, want 2", st.Keepalives)
		}
	}
}
