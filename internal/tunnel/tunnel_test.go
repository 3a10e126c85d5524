package tunnel_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/testutil"
	"github.com/envd-dev/envd/internal/tunnel"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every wait of these tests: it only turns a hang into a failure.
const wait = 2 * time.Minute

// serve runs a tunnel server behind an httptest server and returns its
// address; both are closed at cleanup.
func serve(t *testing.T, o tunnel.Options) (*tunnel.Server, string) {
	t.Helper()
	if o.Defaults == nil {
		u, err := identity.Current()
		if err != nil {
			t.Fatal(err)
		}
		o.Defaults = defaults.New(u.Name, nil)
	}
	s := tunnel.New(o)
	hs := httptest.NewServer(s.Route().Handler)
	t.Cleanup(func() {
		hs.Close()
		s.Close()
	})
	return s, hs.Listener.Addr().String()
}

// open asks for a tunnel with query q and returns the connection and the
// status; on anything but 101 it returns the error message too.
func open(t *testing.T, addr, q string, header http.Header) (net.Conn, *bufio.Reader, int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(wait))
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/tunnel?"+q, nil)
	if header == nil {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", tunnel.Protocol)
	} else {
		req.Header = header
	}
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		conn.SetDeadline(time.Time{})
		return conn, br, resp.StatusCode, ""
	}
	defer resp.Body.Close()
	var body struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &body); err != nil || body.Code != resp.StatusCode {
		t.Errorf("error body %q is not {code, message} with code %d", b, resp.StatusCode)
	}
	return nil, nil, resp.StatusCode, body.Message
}

// echo is a TCP server on 127.0.0.1 that answers each connection with
// "echo:" and what it read until EOF, then closes.
func echo(t *testing.T) (port string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				b, _ := io.ReadAll(c)
				c.Write(append([]byte("echo:"), b...))
			})
		}
	})
	_, port, _ = net.SplitHostPort(ln.Addr().String())
	return port
}

// roundTrip sends msg through a tunnel, half-closes, and reads the answer.
func roundTrip(conn net.Conn, r io.Reader, msg string) (string, error) {
	if _, err := io.WriteString(conn, msg); err != nil {
		return "", err
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		return "", err
	}
	b, err := io.ReadAll(r)
	return string(b), err
}

// TestHTTPThroughTunnel: an HTTP server inside the sandbox answers
// through a tunnel, several requests on one connection.
func TestHTTPThroughTunnel(t *testing.T) {
	t.Parallel()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.URL.Path)
	}))
	defer web.Close()
	_, port, _ := net.SplitHostPort(web.Listener.Addr().String())
	_, addr := serve(t, tunnel.Options{})
	conn, br, status, msg := open(t, addr, "port="+port, nil)
	if status != http.StatusSwitchingProtocols {
		t.Fatalf("status %d: %s", status, msg)
	}
	for _, p := range []string{"/a", "/b"} {
		req, _ := http.NewRequest(http.MethodGet, "http://sandbox"+p, nil)
		if err := req.Write(conn); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "hello "+p {
			t.Errorf("GET %s through the tunnel: %q", p, b)
		}
	}
}

// TestHalfCloseAndEarlyBytes: bytes sent right behind the request (before
// the 101 arrived) get through, a half-close reaches the server, and its
// answer after EOF comes back; a server that closes first ends the tunnel.
func TestHalfCloseAndEarlyBytes(t *testing.T) {
	t.Parallel()
	port := echo(t)
	_, addr := serve(t, tunnel.Options{})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(wait))
	fmt.Fprintf(conn, "GET /tunnel?port=%s HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\nearly+late", port, tunnel.Protocol)
	conn.(*net.TCPConn).CloseWrite()
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("answer %v, %v", resp, err)
	}
	b, err := io.ReadAll(br)
	if err != nil || string(b) != "echo:early+late" {
		t.Fatalf("through the tunnel: %q, %v", b, err)
	}
}

// TestConcurrentTunnels: 100 tunnels at once, each its own answer.
func TestConcurrentTunnels(t *testing.T) {
	t.Parallel()
	port := echo(t)
	s, addr := serve(t, tunnel.Options{})
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		conn, br, status, msg := open(t, addr, "port="+port, nil)
		if status != http.StatusSwitchingProtocols {
			t.Fatalf("tunnel %d: %d %s", i, status, msg)
		}
		wg.Go(func() {
			want := fmt.Sprintf("tunnel %d ", i) + strings.Repeat("x", i*1000)
			got, err := roundTrip(conn, br, want)
			if err != nil || got != "echo:"+want {
				errs <- fmt.Errorf("tunnel %d: %d bytes back (%v), want %d", i, len(got), err, len(want)+5)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if !testutil.PollFor(wait, func() bool { return s.Open() == 0 }) {
		t.Errorf("%d tunnels still open after every connection ended", s.Open())
	}
}

// TestCloseEndsTunnels: Close (envd's shutdown) ends a tunnel in the
// middle of a transfer, on both sides, and refuses new ones.
func TestCloseEndsTunnels(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	targetEnded := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			targetEnded <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(io.Discard, c) // reads for as long as the tunnel lives
		targetEnded <- err
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	s, addr := serve(t, tunnel.Options{})
	conn, _, status, msg := open(t, addr, "port="+port, nil)
	if status != http.StatusSwitchingProtocols {
		t.Fatalf("%d %s", status, msg)
	}
	writing := make(chan error, 1)
	go func() {
		chunk := make([]byte, 64<<10)
		for {
			if _, err := conn.Write(chunk); err != nil {
				writing <- err
				return
			}
		}
	}()
	s.Close()
	select {
	case <-writing:
	case <-time.After(wait):
		t.Fatal("the client still writes into a closed tunnel")
	}
	select {
	case <-targetEnded:
	case <-time.After(wait):
		t.Fatal("the target's connection outlived Close")
	}
	if s.Open() != 0 {
		t.Errorf("%d tunnels open after Close", s.Open())
	}
}

// TestMaxTunnels: past MaxTunnels, 503; a slot frees when a tunnel ends.
func TestMaxTunnels(t *testing.T) {
	t.Parallel()
	port := echo(t)
	s, addr := serve(t, tunnel.Options{MaxTunnels: 2})
	var conns []net.Conn
	var readers []*bufio.Reader
	for range 2 {
		c, br, status, msg := open(t, addr, "port="+port, nil)
		if status != http.StatusSwitchingProtocols {
			t.Fatalf("%d %s", status, msg)
		}
		conns, readers = append(conns, c), append(readers, br)
	}
	if _, _, status, msg := open(t, addr, "port="+port, nil); status != http.StatusServiceUnavailable || !strings.Contains(msg, "2 tunnels are open") {
		t.Errorf("third tunnel: %d %q, want 503", status, msg)
	}
	if got, err := roundTrip(conns[0], readers[0], "one"); err != nil || got != "echo:one" {
		t.Fatalf("first tunnel: %q %v", got, err)
	}
	if !testutil.PollFor(wait, func() bool { return s.Open() == 1 }) {
		t.Fatalf("%d tunnels open after one ended", s.Open())
	}
	if _, _, status, msg := open(t, addr, "port="+port, nil); status != http.StatusSwitchingProtocols {
		t.Errorf("a tunnel once a slot is free: %d %s", status, msg)
	}
}

// TestBadRequests: every refused tunnel gets a precise status and message.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, closedPort, _ := net.SplitHostPort(closed.Addr().String())
	closed.Close() // nothing listens there now
	_, addr := serve(t, tunnel.Options{})
	upgrade := func(conn, up string) http.Header {
		h := http.Header{}
		if conn != "" {
			h.Set("Connection", conn)
		}
		if up != "" {
			h.Set("Upgrade", up)
		}
		return h
	}
	for _, tc := range []struct {
		name   string
		q      string
		header http.Header
		status int
		msg    string
	}{
		{"no port", "", nil, 400, "port is required"},
		{"port 0", "port=0", nil, 400, `port "0" is not a TCP port`},
		{"port too big", "port=65536", nil, 400, `port "65536" is not a TCP port`},
		{"port not a number", "port=http", nil, 400, `port "http" is not a TCP port`},
		{"host a name", "port=80&host=example.com", nil, 400, `host "example.com" is not an address`},
		{"host unspecified", "port=80&host=0.0.0.0", nil, 400, `host "0.0.0.0" is not an address`},
		{"host with a zone", "port=80&host=" + url.QueryEscape("fe80::1%lo"), nil, 400, "is not an address"},
		{"no upgrade", "port=80", upgrade("", ""), 426, "send Connection: Upgrade and Upgrade: envd-tunnel"},
		{"another upgrade", "port=80", upgrade("Upgrade", "websocket"), 426, "Upgrade: envd-tunnel"},
		{"nothing listens", "port=" + closedPort, nil, 502, "nothing listens on 127.0.0.1:" + closedPort},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, status, msg := open(t, addr, tc.q, tc.header)
			if status != tc.status || !strings.Contains(msg, tc.msg) {
				t.Errorf("%d %q, want %d with %q", status, msg, tc.status, tc.msg)
			}
		})
	}
}

// TestStrictUsers: in strict mode a user other than root reaches loopback
// addresses only; root reaches any.
func TestStrictUsers(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test acts as another user")
	}
	nobody, err := identity.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	port := echo(t)
	_, addr := serve(t, tunnel.Options{StrictUsers: true, Defaults: defaults.New("root", nil)})
	as := func(user string) http.Header {
		h := http.Header{}
		h.Set("Connection", "Upgrade")
		h.Set("Upgrade", tunnel.Protocol)
		if user != "" {
			h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
		}
		return h
	}
	// 192.0.2.1 (a documentation address): nobody's tunnel is refused
	// before any connection (403).
	other := "192.0.2.1"
	if _, _, status, msg := open(t, addr, "port="+port+"&host="+other, as(nobody.Name)); status != http.StatusForbidden || !strings.Contains(msg, "loopback addresses only") {
		t.Errorf("nobody to %s: %d %q, want 403", other, status, msg)
	}
	if _, _, status, msg := open(t, addr, "port="+port, as(nobody.Name)); status != http.StatusSwitchingProtocols {
		t.Errorf("nobody to loopback: %d %q, want 101", status, msg)
	}
	if _, _, status, msg := open(t, addr, "port=1&host=::1", as(nobody.Name)); status != http.StatusBadGateway {
		t.Errorf("nobody to ::1: %d %q, want it let through (and find nothing: 502)", status, msg)
	}
	if _, _, status, msg := open(t, addr, "port=80&host="+other, as("no-such-user-xyz")); status != http.StatusUnauthorized || !strings.Contains(msg, "invalid username") {
		t.Errorf("an unknown user: %d %q, want 401", status, msg)
	}
	// Root is let through to any address. A server whose connections time
	// out at once shows it without a packet leaving the machine: 504, not
	// 403.
	_, quick := serve(t, tunnel.Options{StrictUsers: true, Defaults: defaults.New("root", nil), DialTimeout: time.Nanosecond})
	if _, _, status, msg := open(t, quick, "port="+port+"&host="+other, as("root")); status != http.StatusGatewayTimeout {
		t.Errorf("root to %s: %d %q, want it let through (and time out: 504)", other, status, msg)
	}
}

// TestHTTP2Refused: a tunnel request over HTTP/2 is told to use HTTP/1.1.
func TestHTTP2Refused(t *testing.T) {
	t.Parallel()
	u, err := identity.Current()
	if err != nil {
		t.Fatal(err)
	}
	s := tunnel.New(tunnel.Options{Defaults: defaults.New(u.Name, nil)})
	defer s.Close()
	hs := httptest.NewUnstartedServer(s.Route().Handler)
	hs.EnableHTTP2 = true
	hs.StartTLS()
	defer hs.Close()
	c := hs.Client()
	req, _ := http.NewRequest(http.MethodGet, hs.URL+"/tunnel?port=80", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusUpgradeRequired || !bytes.Contains(b, []byte("needs HTTP/1.1")) {
		t.Errorf("over %s: %d %s", resp.Proto, resp.StatusCode, b)
	}
	c.CloseIdleConnections()
}
