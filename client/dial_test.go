package client_test

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/internal/testutil"
)

// fcSocket is a stand-in for the host side of a Firecracker vsock device:
// a unix socket that reads "CONNECT <port>\n" and then does what reply
// says. It is a fake because no Firecracker host exists here; envd behind
// it is real.
func fcSocket(t *testing.T, reply func(conn net.Conn, line string)) string {
	t.Helper()
	path := filepath.Join(testutil.SharedDir(t), "v.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer conn.Close()
				// Read the line byte by byte, as Firecracker does not
				// buffer past it either.
				var line []byte
				var b [1]byte
				for {
					if _, err := conn.Read(b[:]); err != nil {
						return
					}
					if b[0] == '\n' {
						break
					}
					line = append(line, b[0])
				}
				reply(conn, string(line))
			})
		}
	})
	return path
}

// forwardTo answers OK and then pipes the connection to envd's unix socket,
// as Firecracker pipes it to the guest's vsock listener.
func forwardTo(sock string, wantPort string) func(net.Conn, string) {
	return func(conn net.Conn, line string) {
		if line != "CONNECT "+wantPort {
			return // Firecracker closes the connection: no such port
		}
		up, err := net.Dial("unix", sock)
		if err != nil {
			return
		}
		defer up.Close()
		io.WriteString(conn, "OK 1073741824\n")
		testutil.Splice(conn, up)
	}
}

func TestFirecrackerUDS(t *testing.T) {
	t.Parallel()
	path := fcSocket(t, forwardTo(envdSock, "10000"))
	c := newClient(t, client.Options{Dialer: client.FirecrackerUDS(path, 10000)})
	ctx := testContext(t, testutil.Wait)
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(ctx, sh("echo through firecracker"))
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "through firecracker\n" {
		t.Errorf("stdout %q", res.Stdout)
	}
	if got := c.Target(); got != "firecracker vsock "+path+" port 10000" {
		t.Errorf("Target() = %q", got)
	}
}

func TestFirecrackerHandshakeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		reply func(net.Conn, string)
		want  string
	}{
		{"closed at once", func(net.Conn, string) {}, "is envd listening on vsock port 52"},
		{"refused", func(c net.Conn, _ string) { io.WriteString(c, "NO\n") }, `got "NO" after CONNECT 52`},
		{"not a port", func(c net.Conn, _ string) { io.WriteString(c, "OK port\n") }, `got "OK port"`},
		{"half a line", func(c net.Conn, _ string) { io.WriteString(c, "OK 1") }, "unexpected EOF"},
		{"endless line", func(c net.Conn, _ string) { io.WriteString(c, strings.Repeat("x", 100)) }, "without a newline"},
		{"silent", silent, "timed out"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := fcSocket(t, tt.reply)
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			_, err := client.FirecrackerUDS(path, 52).Dial(ctx)
			var de *client.DialError
			if !errors.As(err, &de) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "cannot reach envd at firecracker vsock") {
				t.Errorf("Dial: %v; want a DialError with %q", err, tt.want)
			}
		})
	}
	t.Run("through the client", func(t *testing.T) {
		t.Parallel()
		path := fcSocket(t, func(net.Conn, string) {})
		c := newClient(t, client.Options{Dialer: client.FirecrackerUDS(path, 52)})
		err := c.Health(testContext(t, 5*time.Second))
		if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "health: cannot reach envd at firecracker vsock") {
			t.Errorf("Health: %v", err)
		}
		_, err = c.ListProcesses(testContext(t, 5*time.Second))
		if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "cannot reach envd at firecracker vsock") {
			t.Errorf("ListProcesses: %v", err)
		}
	})
	t.Run("no socket", func(t *testing.T) {
		t.Parallel()
		_, err := client.FirecrackerUDS("/no/such/v.sock", 52).Dial(context.Background())
		if err == nil || !strings.Contains(err.Error(), "/no/such/v.sock port 52: no such file or directory") {
			t.Errorf("Dial: %v", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		// Cancelled once the handshake is under way, waiting for a reply
		// that never comes.
		ctx, cancel := context.WithCancel(context.Background())
		path := fcSocket(t, func(c net.Conn, line string) {
			cancel()
			silent(c, line)
		})
		_, err := client.FirecrackerUDS(path, 52).Dial(ctx)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Dial cancelled mid-handshake: %v", err)
		}
	})
}

// silent answers nothing until the client hangs up.
func silent(c net.Conn, _ string) { io.Copy(io.Discard, c) }

func TestUnixDialer(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{Dialer: client.Unix(envdSock)})
	ctx := testContext(t, testutil.Wait)
	res, err := c.Run(ctx, sh("echo over unix"))
	if err != nil || string(res.Stdout) != "over unix\n" {
		t.Fatalf("Run over the unix socket: %v, %v", res, err)
	}
	// Bulk transfers take their own connections over the same dialer.
	if _, err := c.Upload(ctx, "/tmp/"+t.Name(), strings.NewReader("u")); err != nil {
		t.Fatal(err)
	}
	c.Remove(ctx, "/tmp/"+t.Name())
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx := testContext(t, 10*time.Second)
	for _, c := range []*client.Client{
		newClient(t, client.Options{Addr: "http://" + addr}),
		newClient(t, client.Options{Addr: addr}),
		newClient(t, client.Options{Dialer: client.Unix("/no/such.sock")}),
	} {
		for name, call := range map[string]func() error{
			"health":         func() error { return c.Health(ctx) },
			"list processes": func() error { _, err := c.ListProcesses(ctx); return err },
			"start":          func() error { _, err := c.Start(ctx, sh("true")); return err },
			"download":       func() error { _, err := c.Download(ctx, "/etc/hostname"); return err },
			"upload":         func() error { _, err := c.Upload(ctx, "/tmp/x", strings.NewReader("x")); return err },
			"watch":          func() error { _, err := c.Watch(ctx, "/tmp", client.WatchOptions{}); return err },
		} {
			err := call()
			if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "cannot reach envd at "+c.Target()) {
				t.Errorf("%s via %s: %v; want unavailable, cannot reach envd", name, c.Target(), err)
			}
		}
	}
}

func TestZeroClient(t *testing.T) {
	t.Parallel()
	var c client.Client
	defer c.Close()
	if got := c.Target(); got != "tcp "+client.DefaultAddr {
		t.Errorf("the zero Client goes to %q, want tcp %s", got, client.DefaultAddr)
	}
	for addr, want := range map[string]string{
		"http://10.1.2.3:1234/": "tcp 10.1.2.3:1234",
		"10.1.2.3:1234":         "tcp 10.1.2.3:1234",
		"sandbox":               "tcp sandbox:49983",
		"http://[::1]:5":        "tcp [::1]:5",
	} {
		if got := client.New(client.Options{Addr: addr}).Target(); got != want {
			t.Errorf("Addr %q: target %q, want %q", addr, got, want)
		}
	}
}

func TestVsockDialer(t *testing.T) {
	t.Parallel()
	d := client.Vsock(3, 52)
	if d.String() != "vsock 3:52" {
		t.Errorf("String() = %q", d.String())
	}
	// Dialing is tested end to end in test/e2e, where the kernel allows.
}
