package e2e_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mdlayher/vsock"

	"github.com/envd-dev/envd/client"

	"github.com/envd-dev/envd/internal/testutil"
)

// fcListener stands in for the host side of a Firecracker vsock device,
// which cannot be had here: a unix socket that reads "CONNECT <port>\n",
// answers "OK <n>\n" and pipes the connection to dial (envd's unix socket or
// TCP port, as Firecracker pipes it to the guest's vsock listener). A wrong
// port gets the connection closed, as Firecracker does. Only this listener
// is a fake; envd behind it is the real binary.
func fcListener(t *testing.T, port uint32, dial func() (net.Conn, error)) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "envd-fc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "v.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	// Closing conn at cleanup ends the copies, and with them up.
	testutil.Serve(t, ln, func(conn net.Conn) {
		var line []byte
		var b [1]byte
		for len(line) < 64 {
			if _, err := conn.Read(b[:]); err != nil {
				return
			}
			if b[0] == '\n' {
				break
			}
			line = append(line, b[0])
		}
		if string(line) != "CONNECT "+strconv.FormatUint(uint64(port), 10) {
			return
		}
		up, err := dial()
		if err != nil {
			return
		}
		defer up.Close()
		io.WriteString(conn, "OK 1073741823\n")
		testutil.Splice(conn, up)
	})
	return path
}

// exercise drives the main parts of the API through c: a process with
// stdin, a file both ways, a listing, a watch, health and metrics.
func exercise(t *testing.T, c *client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	p, err := c.Start(ctx, client.Command{Name: "/bin/sh", Args: []string{"-c", "read x; echo got $x; exit 3"}, Stdin: true, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SendStdin(ctx, []byte("it\n")); err != nil {
		t.Fatal(err)
	}
	exit, err := p.Wait()
	if err != nil || exit.Code != 3 || out.String() != "got it\n" {
		t.Errorf("process: %q, %v, %v; want \"got it\", exit 3", out.String(), exit, err)
	}
	dir := "/tmp/envd-e2e-client-" + strconv.Itoa(rand.Int())
	defer c.Remove(context.Background(), dir)
	w, err := c.Watch(ctx, "/tmp", client.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	data := strings.Repeat("0123456789", 100_000)
	if _, err := c.Upload(ctx, dir+"/f", strings.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	for ev, err := range w.Events() {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Op == client.OpCreate && ev.Name == filepath.Base(dir) {
			break
		}
	}
	r, err := c.Download(ctx, dir+"/f")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || string(got) != data {
		t.Errorf("download: %d bytes, %v; want %d", len(got), err, len(data))
	}
	list, err := c.ListDir(ctx, dir, 1)
	if err != nil || len(list) != 1 || list[0].Name != "f" || list[0].Size != int64(len(data)) {
		t.Errorf("ListDir: %+v, %v", list, err)
	}
	if _, err := c.Metrics(ctx); err != nil {
		t.Error(err)
	}
}

// TestClientTransports drives one envd through every way the client has to
// reach it.
func TestClientTransports(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{args: []string{"-default-user", "root"}})
	hostport := strings.TrimPrefix(e.url, "http://")
	tests := []struct {
		name string
		opts client.Options
	}{
		{"TCP URL", client.Options{Addr: e.url}},
		{"TCP host:port", client.Options{Addr: hostport}},
		{"TCP dialer", client.Options{Dialer: client.TCP(hostport)}},
		{"TCP over HTTP/1.1", client.Options{Addr: e.url, HTTP1: true}},
		{"unix socket", client.Options{Dialer: client.Unix(e.sock)}},
		{"Firecracker handshake to the unix socket", client.Options{Dialer: client.FirecrackerUDS(
			fcListener(t, 1024, func() (net.Conn, error) { return net.Dial("unix", e.sock) }), 1024)}},
		{"Firecracker handshake to TCP", client.Options{Dialer: client.FirecrackerUDS(
			fcListener(t, 49983, func() (net.Conn, error) { return net.Dial("tcp", hostport) }), 49983)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := client.New(tt.opts)
			defer c.Close()
			exercise(t, c)
		})
	}
	t.Run("Firecracker handshake to a port nobody serves", func(t *testing.T) {
		t.Parallel()
		path := fcListener(t, 1024, func() (net.Conn, error) { return net.Dial("unix", e.sock) })
		c := client.New(client.Options{Dialer: client.FirecrackerUDS(path, 2048)})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		err := c.Health(ctx)
		if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "is envd listening on vsock port 2048") {
			t.Errorf("Health: %v", err)
		}
	})
}

// TestClientVsock serves envd on AF_VSOCK and dials it at this machine's own
// context id. Listening works on any kernel with AF_VSOCK; dialing oneself
// needs the loopback transport, which some kernels lack: there the client
// must say precisely that it cannot reach envd.
func TestClientVsock(t *testing.T) {
	t.Parallel()
	port := freeVsockPort(t)
	startEnvd(t, startOptions{args: []string{"-default-user", "root", "-vsock-port", strconv.FormatUint(uint64(port), 10)}})
	cid, err := vsock.ContextID()
	if err != nil {
		t.Fatalf("AF_VSOCK: no local context id: %v", err)
	}
	t.Logf("envd listens on AF_VSOCK %d:%d", cid, port)
	c := client.New(client.Options{Dialer: client.Vsock(cid, port)})
	defer c.Close()
	ctx := testutil.Context(t, testutil.Wait)
	if _, err := os.Stat("/sys/module/vsock_loopback"); err != nil {
		err := c.Health(ctx)
		if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "cannot reach envd at vsock") {
			t.Fatalf("Health over vsock without a loopback transport: %v; want unavailable, cannot reach envd", err)
		}
		return
	}
	if err := c.Health(ctx); err != nil {
		t.Fatalf("Health over vsock: %v", err)
	}
	exercise(t, c)
}
