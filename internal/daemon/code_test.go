package daemon_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"

	ipb "github.com/envd-dev/envd/gen/envd/interpreter/v1"
	"github.com/envd-dev/envd/gen/envd/interpreter/v1/interpreterv1connect"
	"github.com/envd-dev/envd/internal/daemon"
)

// With -no-jupyter the code API is still routed on the main port, and
// answers 503 saying why; envd's own /health is untouched.
func TestCodeRoutesWithoutJupyter(t *testing.T) {
	r := start(t, daemon.Config{})
	c := tcpClient(t)
	for _, rt := range [][2]string{
		{"POST", "/execute"}, {"GET", "/contexts"}, {"POST", "/contexts"},
		{"DELETE", "/contexts/x"}, {"POST", "/contexts/x/restart"},
	} {
		req, _ := http.NewRequest(rt[0], "http://"+r.tcp+rt[1], strings.NewReader(`{"code": "1"}`))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "-no-jupyter") {
			t.Errorf("%s %s: %d %s", rt[0], rt[1], resp.StatusCode, b)
		}
	}
	if status, err := getHealth(c, "http://"+r.tcp); err != nil || status != http.StatusNoContent {
		t.Errorf("GET /health: %d %v", status, err)
	}
	checkCodeServiceOff(t, c, "http://"+r.tcp)
}

// The native code service is routed on the main port and the code port;
// with -no-jupyter its procedures answer unavailable, saying why.
func TestCodeServiceWithoutJupyter(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	r := start(t, daemon.Config{CodePort: port})
	c := tcpClient(t)
	checkCodeServiceOff(t, c, "http://"+r.tcp)
	checkCodeServiceOff(t, c, "http://127.0.0.1:"+strconv.Itoa(port))
}

func checkCodeServiceOff(t *testing.T, hc *http.Client, base string) {
	t.Helper()
	c := interpreterv1connect.NewInterpreterServiceClient(hc, base)
	ctx := context.Background()
	_, err := c.ListContexts(ctx, connect.NewRequest(&ipb.ListContextsRequest{}))
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "code execution is off") {
		t.Errorf("%s ListContexts: %v", base, err)
	}
	s, err := c.Execute(ctx, connect.NewRequest(&ipb.ExecuteRequest{Code: "1"}))
	if err == nil {
		for s.Receive() {
		}
		err = s.Err()
		s.Close()
	}
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "-no-jupyter") {
		t.Errorf("%s Execute: %v", base, err)
	}
}
