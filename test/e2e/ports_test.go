package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/internal/testutil"
)

// TestPortForwarding: the built envd, forwarding ports, in a network
// namespace whose external address is netnsAddr. A server that a process
// of its bound to 127.0.0.1 only is listed as forwarded from netnsAddr on
// the same port, and answers there (asked with curl run through envd: only
// the namespace has that address); once the server ends, it is no longer
// listed and the external address refuses.
func TestPortForwarding(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{netns: true, args: []string{"-forward-ports=true"}})
	c := client.New(client.Options{Dialer: client.Unix(e.sock)})
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()

	// Not t.TempDir: the server runs as envd's default user, who must
	// reach the directory.
	dir, err := os.MkdirTemp("", "envd-ports-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const body = "through the forward\n"
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	const port = 8731 // the namespace is the test's own: no other listener
	srv, err := c.Start(ctx, client.Command{
		Name: "/usr/bin/python3",
		Args: []string{"-m", "http.server", "--bind", "127.0.0.1", "--directory", dir, fmt.Sprint(port)},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	from := fmt.Sprintf("%s:%d", netnsAddr, port)
	var last []client.Port
	if !testutil.PollFor(startTimeout, func() bool {
		last, err = c.ListPorts(ctx, client.PortFilter{Ports: []int{port}})
		return err == nil && len(last) == 1 && last[0].Loopback && last[0].Forwarded && slices.Contains(last[0].ForwardedFrom, from)
	}) {
		t.Fatalf("port %d not listed as forwarded from %s: %+v, %v", port, from, last, err)
	}
	if last[0].PID != int(srv.PID) {
		t.Errorf("listed pid %d, want the server's %d", last[0].PID, srv.PID)
	}

	curl := func() (*client.RunResult, error) {
		return c.Run(ctx, client.Command{Name: "curl", Args: []string{"-sS", "--max-time", "10", "http://" + from + "/hello.txt"}})
	}
	res, err := curl()
	if err != nil {
		t.Fatal(err)
	}
	if !res.Exit.Success() || string(res.Stdout) != body {
		t.Fatalf("curl %s: %s, stdout %q, stderr %q; want %q", from, res.Exit, res.Stdout, res.Stderr, body)
	}

	if err := srv.Signal(ctx, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Wait(); err != nil {
		t.Fatal(err)
	}
	if !testutil.PollFor(startTimeout, func() bool {
		last, err = c.ListPorts(ctx, client.PortFilter{Ports: []int{port}})
		return err == nil && len(last) == 0
	}) {
		t.Fatalf("port %d still listed after its server ended: %+v, %v", port, last, err)
	}
	// curl's 7: the connection was refused (nothing listens there now).
	res, err = curl()
	if err != nil {
		t.Fatal(err)
	}
	if res.Exit.Code != 7 {
		t.Errorf("curl %s after the server ended: %s, stderr %q; want exit 7 (refused)", from, res.Exit, res.Stderr)
	}
}
