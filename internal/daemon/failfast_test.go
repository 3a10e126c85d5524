package daemon_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/gen/process/processconnect"
	"github.com/envd-dev/envd/internal/daemon"
)

// runCommand runs cmd through the API to its end and returns what it
// printed and its exit code.
func runCommand(t *testing.T, pc processconnect.ProcessClient, envs map[string]string, cmd string, args ...string) (stdout, stderr string, code int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	stream, err := pc.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: cmd, Args: args, Envs: envs, Cwd: new("/tmp")}}))
	if err != nil {
		t.Fatalf("Start %s: %v", cmd, err)
	}
	defer stream.Close()
	var out, errOut strings.Builder
	code = -1
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			out.Write(d.GetStdout())
			errOut.Write(d.GetStderr())
		}
		if e := ev.GetEnd(); e != nil {
			code = e.GetExitCode()
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	return out.String(), errOut.String(), code
}

// TestPackageManagersFailFast: commands get pip's and npm's settings for
// giving up soon when no index answers: pip retries once (not five times),
// npm once after 2 s; a value the request sets wins.
func TestPackageManagersFailFast(t *testing.T) {
	pip := "/opt/envd-python/bin/pip"
	if _, err := os.Stat(pip); err != nil {
		t.Fatalf("no shared Python environment (scripts/install-deps.sh makes it): %v", err)
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Fatalf("npm is not installed (scripts/install-deps.sh installs it): %v", err)
	}
	r := start(t, daemon.Config{})
	pc := processconnect.NewProcessClient(tcpClient(t), "http://"+r.tcp)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	index := "http://" + ln.Addr().String() + "/simple"
	ln.Close() // nothing answers there

	offline := map[string]string{"PIP_INDEX_URL": index}
	_, stderr, code := runCommand(t, pc, offline, "pip", "install", "--no-cache-dir", "envd-offline-absent")
	if code == 0 || !strings.Contains(stderr, "No matching distribution found for envd-offline-absent") {
		t.Fatalf("pip install offline: exit %d\n%s", code, stderr)
	}
	if n := strings.Count(stderr, "WARNING: Retrying"); n != 1 {
		t.Errorf("pip retried %d times, want once:\n%s", n, stderr)
	}
	offline["PIP_RETRIES"] = "2"
	_, stderr, _ = runCommand(t, pc, offline, "pip", "install", "--no-cache-dir", "envd-offline-absent")
	if n := strings.Count(stderr, "WARNING: Retrying"); n != 2 {
		t.Errorf("with PIP_RETRIES=2 from the request, pip retried %d times:\n%s", n, stderr)
	}

	for key, want := range map[string]string{"fetch-retries": "1", "fetch-retry-mintimeout": "2000", "fetch-retry-maxtimeout": "10000"} {
		stdout, stderr, code := runCommand(t, pc, nil, "npm", "config", "get", key)
		if code != 0 || strings.TrimSpace(stdout) != want {
			t.Errorf("npm config get %s: %q (exit %d, %s), want %s", key, stdout, code, stderr, want)
		}
	}
	stdout, _, _ := runCommand(t, pc, map[string]string{"npm_config_fetch_retries": "4"}, "npm", "config", "get", "fetch-retries")
	if strings.TrimSpace(stdout) != "4" {
		t.Errorf("npm's fetch-retries with the request's 4: %q", stdout)
	}
}
