package daemon_test

import (
	"context"
	"net/netip"
	"os"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/envd/ports/v1"
	"github.com/envd-dev/envd/gen/envd/ports/v1/portsv1connect"
	"github.com/envd-dev/envd/internal/daemon"
)

// The ports service is routed on the main port: it lists envd's own
// listener as envd's (private) (forwarding is off: this runs in the machine's
// network namespace; internal/ports tests forwarding in one of its own),
// and refuses a nonsense filter.
func TestPortsService(t *testing.T) {
	r := start(t, daemon.Config{})
	c := portsv1connect.NewPortServiceClient(tcpClient(t), "http://"+r.tcp)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	ap := netip.MustParseAddrPort(r.tcp)
	l, err := c.List(ctx, connect.NewRequest(&pb.ListRequest{Filter: &pb.Filter{Ports: []uint32{uint32(ap.Port())}}}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range l.Msg.GetPorts() {
		if p.GetAddress() == ap.Addr().String() {
			found = true
			if !p.GetEnvd() || p.GetPrivate() != pb.Private_PRIVATE_ENVD || p.GetPid() != uint32(os.Getpid()) || p.GetForwarded() {
				t.Errorf("envd's listener: %v, want envd's (pid %d), private, not forwarded", p, os.Getpid())
			}
		}
	}
	if !found {
		t.Errorf("envd's listener %s not listed: %v", r.tcp, l.Msg.GetPorts())
	}

	_, err = c.List(ctx, connect.NewRequest(&pb.ListRequest{Filter: &pb.Filter{Ports: []uint32{65536}}}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "filter.ports[0] is 65536: a port is 1-65535") {
		t.Errorf("bad port: %v", err)
	}
}
