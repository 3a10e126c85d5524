package portsconnect_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/envd/ports/v1"
	"github.com/envd-dev/envd/gen/envd/ports/v1/portsv1connect"
	"github.com/envd-dev/envd/internal/ports"
	"github.com/envd-dev/envd/internal/ports/portsconnect"
	"github.com/envd-dev/envd/internal/ports/portstest"
	"github.com/envd-dev/envd/internal/testutil"
)

// serve serves a monitor (forwarding in the test's namespace, scanning every 20 ms on the real
// clock; more options set by opts) and returns a client of it; both stop when the test ends.
func serve(t *testing.T, opts ...func(*ports.Options)) portsv1connect.PortServiceClient {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	o := ports.Options{Logger: log, Forward: portstest.InNetns(), Interval: 20 * time.Millisecond}
	for _, f := range opts {
		f(&o)
	}
	m := ports.New(o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx)
	}()
	mux := http.NewServeMux()
	mux.Handle(portsconnect.New(m, portsconnect.Options{Logger: log}).Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		cancel()
		testutil.RequireClosed(t, done, "the monitor's end")
	})
	return portsv1connect.NewPortServiceClient(srv.Client(), srv.URL)
}

// TestList: a loopback server is listed with its process and where it is
// forwarded from.
func TestList(t *testing.T) {
	portstest.RequireNetns(t)
	c := serve(t)
	s := portstest.StartServer(t, "[::1]:0")
	ctx := testutil.Context(t, testutil.Wait)
	resp, err := c.List(ctx, connect.NewRequest(&pb.ListRequest{Filter: &pb.Filter{Ports: []uint32{uint32(s.Port)}}}))
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(int(s.Port))
	want := []string{net.JoinHostPort(portstest.ExtV4, port), net.JoinHostPort(portstest.ExtV6, port)}
	if ps := resp.Msg.GetPorts(); len(ps) != 1 || ps[0].GetPid() != uint32(s.PID) || ps[0].GetProcessName() != portstest.ServerName() ||
		ps[0].GetAddress() != "::1" || ps[0].GetFamily() != pb.Family_FAMILY_IPV6 || !ps[0].GetLoopback() || !ps[0].GetForwarded() ||
		strings.Join(ps[0].GetForwardedFrom(), " ") != strings.Join(want, " ") {
		t.Fatalf("List: %v, want the server (pid %d) on ::1 forwarded from %v", ps, s.PID, want)
	}
}

// TestListPrivate: private listeners say whose they are (private) and
// are envd's (envd, for the clients that know only that): envd's own, the
// Jupyter server's, a kernel's channel and its pipe; the workload's say
// neither.
func TestListPrivate(t *testing.T) {
	portstest.RequireNetns(t)
	j := portstest.StartJupyter(t)
	k := j.Kernel
	c := serve(t, func(o *ports.Options) {
		o.JupyterServer = func() int { return j.ServerPID }
		o.KernelChannels = func(pid int) []uint16 {
			if pid == k.PID {
				return []uint16{k.Channel}
			}
			return nil
		}
	})
	own, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	want := map[uint32]pb.Private{
		uint32(own.Addr().(*net.TCPAddr).Port): pb.Private_PRIVATE_ENVD,
		uint32(j.ServerPort):                   pb.Private_PRIVATE_JUPYTER,
		uint32(k.Channel):                      pb.Private_PRIVATE_KERNEL,
		uint32(k.Pipe):                         pb.Private_PRIVATE_KERNEL,
		uint32(k.Thread):                       pb.Private_PRIVATE_UNSPECIFIED,
		uint32(k.Sub):                          pb.Private_PRIVATE_UNSPECIFIED,
	}
	var filter []uint32
	for port := range want {
		filter = append(filter, port)
	}
	ctx := testutil.Context(t, testutil.Wait)
	resp, err := c.List(ctx, connect.NewRequest(&pb.ListRequest{Filter: &pb.Filter{Ports: filter}}))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Msg.GetPorts()) != len(want) {
		t.Errorf("List: %v, want one listener on each of %v", resp.Msg.GetPorts(), filter)
	}
	for _, p := range resp.Msg.GetPorts() {
		w := want[p.GetPort()]
		if p.GetPrivate() != w || p.GetEnvd() != (w != pb.Private_PRIVATE_UNSPECIFIED) || p.GetForwarded() == p.GetEnvd() {
			t.Errorf("port %d: %v, want private %v, envd %v, forwarded %v", p.GetPort(), p, w, w != pb.Private_PRIVATE_UNSPECIFIED, w == pb.Private_PRIVATE_UNSPECIFIED)
		}
	}
}

// TestWatch: the snapshot, then the server opening and closing.
func TestWatch(t *testing.T) {
	portstest.RequireNetns(t)
	c := serve(t)
	ctx := testutil.Context(t, testutil.Wait)
	st, err := c.Watch(ctx, connect.NewRequest(&pb.WatchRequest{Filter: &pb.Filter{Family: pb.Family_FAMILY_IPV4}}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !st.Receive() || st.Msg().GetSnapshot() == nil {
		t.Fatalf("first message: %v, %v; want the snapshot", st.Msg(), st.Err())
	}
	s := portstest.StartServer(t, "127.0.0.1:0")
	// next returns the next change of the server's port.
	next := func() *pb.PortChange {
		t.Helper()
		for st.Receive() {
			if ch := st.Msg().GetChange(); ch.GetPort().GetPort() == uint32(s.Port) {
				return ch
			}
		}
		t.Fatalf("the stream ended: %v", st.Err())
		return nil
	}
	// The scan that sees the server forwards it: one change, opened and
	// forwarded.
	if ch := next(); ch.GetKind() != pb.ChangeKind_CHANGE_KIND_OPENED || ch.GetPort().GetPid() != uint32(s.PID) || !ch.GetPort().GetForwarded() {
		t.Fatalf("change: %v, want the server opened and forwarded", ch)
	}
	s.Kill()
	// An update may come between: a scan in the middle of the server's
	// exit sees its socket still listening with no process holding it
	// (pid 0). Then the close.
	ch := next()
	for ch.GetKind() == pb.ChangeKind_CHANGE_KIND_UPDATED {
		ch = next()
	}
	if ch.GetKind() != pb.ChangeKind_CHANGE_KIND_CLOSED {
		t.Fatalf("change after the server's end: %v", ch)
	}
}

// TestBadInput: nonsense filters are refused, precisely, by List and Watch
// alike, before anything is sent.
func TestBadInput(t *testing.T) {
	c := serve(t)
	ctx := testutil.Context(t, testutil.Wait)
	for _, tc := range []struct {
		f    *pb.Filter
		want string
	}{
		{&pb.Filter{Ports: []uint32{80, 0}}, "filter.ports[1] is 0: a port is 1-65535"},
		{&pb.Filter{Ports: []uint32{70000}}, "filter.ports[0] is 70000: a port is 1-65535"},
		{&pb.Filter{Family: 7}, "filter.family 7 is unknown: give FAMILY_IPV4, FAMILY_IPV6 or none"},
		{&pb.Filter{Pid: 1 << 31}, "filter.pid 2147483648 is not a process id"},
	} {
		_, err := c.List(ctx, connect.NewRequest(&pb.ListRequest{Filter: tc.f}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("List(%v): %v, want invalid_argument %q", tc.f, err, tc.want)
		}
		st, err := c.Watch(ctx, connect.NewRequest(&pb.WatchRequest{Filter: tc.f}))
		if err == nil {
			for st.Receive() {
				t.Errorf("Watch(%v): a message before the refusal: %v", tc.f, st.Msg())
			}
			err = st.Err()
			st.Close()
		}
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Watch(%v): %v, want invalid_argument %q", tc.f, err, tc.want)
		}
	}
}
