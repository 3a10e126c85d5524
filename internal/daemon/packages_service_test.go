package daemon_test

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/envd/packages/v1"
	"github.com/envd-dev/envd/gen/envd/packages/v1/packagesv1connect"
	"github.com/envd-dev/envd/internal/daemon"
)

// The packages service is routed on the main port with envd's handler
// options: the run-as user is resolved (an unknown one is refused), and
// bad input is refused before anything runs.
func TestPackagesService(t *testing.T) {
	r := start(t, daemon.Config{})
	c := packagesv1connect.NewPackageServiceClient(tcpClient(t), "http://"+r.tcp)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	l, err := c.List(ctx, connect.NewRequest(&pb.ListRequest{Manager: pb.Manager_MANAGER_APT}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range l.Msg.GetPackages() {
		found = found || p.GetName() == "dpkg"
	}
	if !found {
		t.Errorf("apt list has no dpkg: %d packages", len(l.Msg.GetPackages()))
	}

	req := connect.NewRequest(&pb.ListRequest{Manager: pb.Manager_MANAGER_APT})
	req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("nosuchuser:")))
	if _, err := c.List(ctx, req); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("unknown user: %v", err)
	}

	s, err := c.Install(ctx, connect.NewRequest(&pb.InstallRequest{Manager: pb.Manager_MANAGER_PIP, Packages: []*pb.PackageSpec{{Name: "-e"}}}))
	if err == nil {
		for s.Receive() {
			t.Errorf("an event before the refusal: %v", s.Msg())
		}
		err = s.Err()
		s.Close()
	}
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "must not start with '-'") {
		t.Errorf("bad name: %v", err)
	}
}
