package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/internal/testutil"
)

// webServer is an HTTP server "inside the sandbox" (on this machine's
// loopback, where envd runs) answering "hello PATH"; it returns its port.
func webServer(t *testing.T) int {
	t.Helper()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.URL.Path)
	}))
	t.Cleanup(web.Close)
	return web.Listener.Addr().(*net.TCPAddr).Port
}

// sink accepts one connection at a time and counts what it reads until
// EOF, then answers the count and closes; it returns its port and the
// counts.
func sink(t *testing.T) (int, <-chan int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	counts := make(chan int64, 16)
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n, _ := io.Copy(io.Discard, c)
			fmt.Fprintf(c, "%d", n)
			c.Close()
			counts <- n
		}
	})
	return ln.Addr().(*net.TCPAddr).Port, counts
}

// TestEnvctlForward: `envctl forward` serves two pairs (a chosen local
// port, and any free one), over TCP and the unix socket; HTTP gets
// through each; 100 connections at once; a port with nothing behind it
// fails that connection only.
func TestEnvctlForward(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{})
	web := webServer(t)
	local := freePort(t)
	for _, via := range []string{"--addr=" + e.url, "--unix=" + e.sock} {
		t.Run(strings.SplitN(via, "=", 2)[0][2:], func(t *testing.T) {
			args := []string{via, "forward", fmt.Sprintf(":%d", web)}
			if via[2] == 'a' {
				args = append(args, fmt.Sprintf("%d:%d", local, web))
			}
			cmd, out, errb := startCtl(t, args...)
			re := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)\n`)
			var addrs []string
			if !testutil.PollFor(requestTimeout, func() bool {
				m := re.FindAllStringSubmatch(out.String(), -1)
				if len(m) < len(args)-2 {
					return false
				}
				addrs = nil
				for _, x := range m {
					addrs = append(addrs, "127.0.0.1:"+x[1])
				}
				return true
			}) {
				t.Fatalf("envctl forward said %q, stderr %q", out.String(), errb.String())
			}
			if len(addrs) == 2 && addrs[1] != fmt.Sprintf("127.0.0.1:%d", local) {
				t.Errorf("second pair on %s, want local port %d", addrs[1], local)
			}
			hc := &http.Client{Timeout: requestTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
			defer hc.CloseIdleConnections()
			for _, a := range addrs {
				resp, err := hc.Get("http://" + a + "/x")
				if err != nil {
					t.Fatalf("GET through %s: %v", a, err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != "hello /x" {
					t.Errorf("GET through %s: %q", a, b)
				}
			}
			var wg sync.WaitGroup
			errs := make(chan error, 100)
			for i := range 100 {
				wg.Go(func() {
					resp, err := hc.Get(fmt.Sprintf("http://%s/%d", addrs[0], i))
					if err != nil {
						errs <- err
						return
					}
					defer resp.Body.Close()
					if b, _ := io.ReadAll(resp.Body); string(b) != fmt.Sprintf("hello /%d", i) {
						errs <- fmt.Errorf("request %d: %q", i, b)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			cmd.Process.Signal(syscall.SIGINT)
			if code := waitExit(t, cmd); code != 0 {
				t.Errorf("envctl forward exited %d after SIGINT; stderr %q", code, errb.String())
			}
		})
	}

	// Nothing behind the remote port: that connection closes, envctl says
	// why and goes on.
	nothing := freePort(t)
	cmd, out, errb := startCtl(t, "--addr="+e.url, "forward", fmt.Sprintf(":%d", nothing))
	var addr string
	if !testutil.PollFor(requestTimeout, func() bool {
		m := regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+)`).FindStringSubmatch(out.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}) {
		t.Fatalf("envctl forward said %q, stderr %q", out.String(), errb.String())
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(requestTimeout))
	if b, err := io.ReadAll(c); len(b) != 0 || err != nil && !strings.Contains(err.Error(), "reset") {
		t.Errorf("a connection to a port with nothing behind: read %q, %v; want it closed", b, err)
	}
	c.Close()
	if !testutil.PollFor(requestTimeout, func() bool {
		return strings.Contains(errb.String(), "nothing listens on 127.0.0.1:"+strconv.Itoa(nothing))
	}) {
		t.Errorf("envctl's stderr does not say why: %q", errb.String())
	}
	cmd.Process.Signal(syscall.SIGINT)
	waitExit(t, cmd)

	for _, bad := range [][]string{{"forward"}, {"forward", "0"}, {"forward", "80:70000"}, {"forward", "x:80"}, {"forward", "--address=nowhere", "80"}} {
		r := envctl(t, nil, nil, append([]string{"--addr=" + e.url}, bad...)...)
		if r.code == 0 || !strings.Contains(r.stderr, "forward") {
			t.Errorf("envctl %q: exit %d, stderr %q; want a usage error", bad, r.code, r.stderr)
		}
	}
}

// TestDialPortTransfer: 1 GiB through the Go client's DialPort, its
// throughput reported against a direct loopback connection in the same
// run; the far end's answer after the client's half-close comes back.
func TestDialPortTransfer(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{})
	port, counts := sink(t)
	c := client.New(client.Options{Addr: e.url})
	defer c.Close()
	const total = 1 << 30
	buf := make([]byte, 256<<10)
	send := func(conn net.Conn) time.Duration {
		t.Helper()
		began := time.Now()
		conn.SetDeadline(time.Now().Add(5 * time.Minute))
		for sent := 0; sent < total; sent += len(buf) {
			if _, err := conn.Write(buf); err != nil {
				t.Fatalf("write after %d bytes: %v", sent, err)
			}
		}
		if err := conn.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		answer, err := io.ReadAll(conn)
		if err != nil || string(answer) != strconv.Itoa(total) {
			t.Fatalf("the far end answered %q (%v), want %d", answer, err, total)
		}
		if n := <-counts; n != total {
			t.Fatalf("the far end read %d bytes", n)
		}
		return time.Since(began)
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	tun, err := c.DialPort(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	viaEnvd := send(tun)
	tun.Close()
	direct, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	viaLoopback := send(direct)
	direct.Close()
	rate := func(d time.Duration) float64 { return total / d.Seconds() / 1e6 }
	t.Logf("1 GiB through DialPort: %.0f MB/s; direct loopback: %.0f MB/s; ratio %.2f (envd's time over direct)",
		rate(viaEnvd), rate(viaLoopback), viaEnvd.Seconds()/viaLoopback.Seconds())

	// Bad ports, and nothing listening: with a context of their own, the
	// first one's time went to the transfers (they can outlast it on a
	// loaded machine).
	ctx, cancel = context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	if _, err := c.DialPort(ctx, 0); err == nil || !strings.Contains(err.Error(), "not a TCP port") {
		t.Errorf("DialPort(0): %v", err)
	}
	closed := freePort(t)
	_, err = c.DialPort(ctx, closed)
	if ce, ok := err.(*client.Error); !ok || ce.Status != http.StatusBadGateway || !strings.Contains(ce.Message, "nothing listens") {
		t.Errorf("DialPort(%d) with nothing there: %v", closed, err)
	}
}

// TestTunnelShutdown: envd shutting down in the middle of a transfer ends
// the tunnel on both sides (no hang), and envd exits cleanly.
func TestTunnelShutdown(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	farEnded := make(chan struct{})
	go func() {
		defer close(farEnded)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(io.Discard, c)
	}()
	c := client.New(client.Options{Addr: e.url})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	tun, err := c.DialPort(ctx, ln.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	defer tun.Close()
	writing := make(chan error, 1)
	first := make(chan struct{})
	go func() {
		chunk := make([]byte, 64<<10)
		for i := 0; ; i++ {
			if _, err := tun.Write(chunk); err != nil {
				writing <- err
				return
			}
			if i == 0 {
				close(first) // bytes are on their way before the shutdown
			}
		}
	}()
	select {
	case <-first:
	case err := <-writing:
		t.Fatalf("the first write failed: %v", err)
	}
	e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-writing:
	case <-time.After(requestTimeout):
		t.Fatal("the client still writes into the tunnel after envd shut down")
	}
	select {
	case <-farEnded:
	case <-time.After(requestTimeout):
		t.Fatal("the far end's connection outlived envd's shutdown")
	}
	if code := e.wait(t, requestTimeout); code != 0 {
		t.Errorf("envd exited %d after SIGTERM with a tunnel open; stderr:\n%s", code, e.stderr)
	}
}
