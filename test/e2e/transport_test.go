package e2e_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/mdlayher/vsock"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/internal/testutil"
)

// TestUnixSocket: the whole API works over the unix socket, as over TCP.
func TestUnixSocket(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{args: []string{"-access-token", "tok"}})
	c := testutil.UnixClient(t, e.sock, requestTimeout)
	resp, err := c.Get("http://envd/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("GET /health: %s", resp.Status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	pc := processClient(c, "http://envd")
	req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo over unix; exit 3"}}})
	req.Header().Set("X-Access-Token", "tok")
	stream, err := pc.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var out strings.Builder
	var end *pb.ProcessEvent_EndEvent
	for stream.Receive() {
		out.Write(stream.Msg().GetEvent().GetData().GetStdout())
		if e := stream.Msg().GetEvent().GetEnd(); e != nil {
			end = e
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if out.String() != "over unix\n" || end.GetExitCode() != 3 || end.GetStatus() != "exit status 3" {
		t.Errorf("output %q, end %v; want \"over unix\\n\" and exit status 3", out.String(), end)
	}
	// The token is checked on the unix socket too.
	if _, err := pc.List(ctx, connect.NewRequest(&pb.ListRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("List without token over the unix socket: %v, want unauthenticated", err)
	}
}

// TestVsock: envd listens on AF_VSOCK and, when the kernel lets this
// machine connect to itself (the vsock_loopback transport), serves the API
// through it. Without that transport it checks what it can: envd holds the
// port.
func TestVsock(t *testing.T) {
	t.Parallel()
	port := freeVsockPort(t)
	e := startEnvd(t, startOptions{args: []string{"-vsock-port", strconv.FormatUint(uint64(port), 10)}})
	// The log reaches the test through a pipe and a copying goroutine:
	// it may trail /health's answer.
	testutil.Poll(t, "the vsock listener in envd's log", func() bool {
		return strings.Contains(e.stderr.String(), "listening addr=vm(")
	})
	// Without the loopback transport, a connection to CID 1 (or to this
	// machine's own CID) would leave the machine for the hypervisor: only
	// dial when it stays local.
	if _, err := os.Stat("/sys/module/vsock_loopback"); err != nil {
		ln, err := vsock.Listen(port, nil)
		if err == nil {
			ln.Close()
			t.Fatalf("port %d is free: envd does not listen on it", port)
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("listen on envd's vsock port %d: %v, want address in use", port, err)
		}
		return
	}
	c := &http.Client{
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return vsock.Dial(vsock.Local, port, nil)
		}},
		Timeout: testutil.Wait,
	}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://envd/health")
	if err != nil {
		t.Fatalf("GET /health over vsock: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("GET /health over vsock: %s", resp.Status)
	}
	ctx := testutil.Context(t, testutil.Wait)
	if _, err := processClient(c, "http://envd").List(ctx, connect.NewRequest(&pb.ListRequest{})); err != nil {
		t.Fatalf("List over vsock: %v", err)
	}
}

// freeVsockPort returns an AF_VSOCK port the kernel just found free: vsock
// ports are shared by every test process on the machine, so a random pick
// may collide with another run's envd.
func freeVsockPort(t *testing.T) uint32 {
	t.Helper()
	ln, err := vsock.Listen(anyVsockPort, nil)
	if err != nil {
		t.Fatalf("listen on AF_VSOCK: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*vsock.Addr).Port
}

// anyVsockPort is VMADDR_PORT_ANY: the kernel picks the port.
const anyVsockPort = 0xFFFFFFFF

func envelope(flags byte, msg []byte) []byte {
	out := make([]byte, 5, 5+len(msg))
	out[0] = flags
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

// TestBadRequestsKeepServing: malformed bodies, wrong tokens, protocol
// garbage and clients that hang up mid-stream get an error each, and envd
// goes on serving.
func TestBadRequestsKeepServing(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{args: []string{"-access-token", "tok"}})
	c := httpClient(t)
	good := map[string]string{"X-Access-Token": "tok"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{"X-Access-Token": "tok"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name       string
		method     string
		path       string
		hdr        map[string]string
		body       []byte
		wantStatus int
		wantBody   string
	}{
		// A Connect route refuses in Connect's shape: a unary call with 401,
		// a stream with its end-of-stream error.
		{name: "wrong token", method: "POST", path: "/process.Process/List", hdr: map[string]string{"X-Access-Token": "bad", "Content-Type": "application/json"}, body: []byte(`{}`), wantStatus: 401, wantBody: `"code":"unauthenticated"`},
		{name: "wrong token on a stream", method: "POST", path: "/process.Process/Start", hdr: map[string]string{"X-Access-Token": "bad", "Content-Type": "application/connect+json"}, body: envelope(0, []byte(`{}`)), wantStatus: 200, wantBody: `"code":"unauthenticated"`},
		{name: "wrong token on the HTTP API", method: "GET", path: "/envs", hdr: map[string]string{"X-Access-Token": "bad"}, wantStatus: 401, wantBody: `"code":401`},
		{name: "malformed JSON", method: "POST", path: "/process.Process/List", hdr: with("Content-Type", "application/json"), body: []byte(`{"processes":`), wantStatus: 400, wantBody: `"code":"invalid_argument"`},
		{name: "JSON of the wrong shape", method: "POST", path: "/process.Process/SendSignal", hdr: with("Content-Type", "application/json"), body: []byte(`{"process":{"pid":"many"}}`), wantStatus: 400, wantBody: `"code":"invalid_argument"`},
		{name: "binary garbage", method: "POST", path: "/process.Process/List", hdr: with("Content-Type", "application/proto"), body: []byte{0xff, 0xff, 0xff, 0xff, 0x0f}, wantStatus: 400, wantBody: ""},
		{name: "unsupported content type", method: "POST", path: "/process.Process/List", hdr: with("Content-Type", "text/csv"), body: []byte(`a,b`), wantStatus: 415},
		{name: "stream with a malformed message", method: "POST", path: "/process.Process/Start", hdr: with("Content-Type", "application/connect+json"), body: envelope(0, []byte(`{"process":`)), wantStatus: 200, wantBody: `"code":"invalid_argument"`},
		{name: "stream with a truncated envelope", method: "POST", path: "/process.Process/Start", hdr: with("Content-Type", "application/connect+json"), body: envelope(0, []byte(`{}`))[:4], wantStatus: 200, wantBody: `"error"`},
		{name: "stream with a huge length prefix", method: "POST", path: "/process.Process/Start", hdr: with("Content-Type", "application/connect+json"), body: []byte{0, 0x7f, 0xff, 0xff, 0xff, '{', '}'}, wantStatus: 200, wantBody: `"error"`},
		{name: "stream with no body", method: "POST", path: "/process.Process/Start", hdr: with("Content-Type", "application/connect+json"), wantStatus: 200, wantBody: `"error"`},
		{name: "GET on a procedure", method: "GET", path: "/process.Process/List", hdr: good, wantStatus: 405},
		{name: "unknown procedure", method: "POST", path: "/process.Process/Explode", hdr: with("Content-Type", "application/json"), body: []byte(`{}`), wantStatus: 404},
		{name: "missing executable", method: "POST", path: "/process.Process/Start", hdr: with("Content-Type", "application/connect+json"), body: envelope(0, []byte(`{"process":{"cmd":"/no/such/program"}}`)), wantStatus: 200, wantBody: `"code":"invalid_argument"`},
		{name: "unknown user", method: "POST", path: "/process.Process/Start", hdr: with("Content-Type", "application/connect+json", "Authorization", "Basic bm9ib2R5LWF0LWFsbDo="), body: envelope(0, []byte(`{"process":{"cmd":"/bin/true"}}`)), wantStatus: 200, wantBody: `invalid username: 'nobody-at-all'`},
	}
	check := func(t *testing.T) {
		t.Helper()
		resp, err := c.Get(e.url + "/health")
		if err != nil {
			t.Fatalf("envd stopped answering: %v\n%s", err, e.stderr)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("GET /health: %s", resp.Status)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, e.url+tt.path, bytes.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.hdr {
				req.Header.Set(k, v)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", tt.method, tt.path, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus || !bytes.Contains(body, []byte(tt.wantBody)) {
				t.Errorf("%s %s: %d %q, want %d with %q", tt.method, tt.path, resp.StatusCode, body, tt.wantStatus, tt.wantBody)
			}
			check(t)
		})
	}

	t.Run("raw garbage on the socket", func(t *testing.T) {
		for _, junk := range []string{
			"\x00\x01\x02\x03garbage\r\n\r\n",
			"GET / HTTP/9.9\r\n\r\n",
			"POST /process.Process/List HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nX-Access-Token: tok\r\nContent-Type: application/json\r\n\r\n{\"trunc",
			"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x09garbage",
		} {
			conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
			io.WriteString(conn, junk)
			// Hang up without reading everything, or read until envd closes.
			buf := make([]byte, 512)
			conn.Read(buf)
			conn.Close()
		}
		check(t)
	})

	t.Run("client hangs up mid-stream", func(t *testing.T) {
		pc := processClient(streamClient(t), e.url)
		ctx, cancel := context.WithCancel(context.Background())
		req := connect.NewRequest(&pb.StartRequest{
			Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "for i in $(seq 2000); do echo line $i; done; sleep 1"}},
			Tag:     new("hangup"),
		})
		req.Header().Set("X-Access-Token", "tok")
		stream, err := pc.Start(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		stream.Receive()
		stream.Receive()
		cancel()
		stream.Close()
		check(t)
		// The process was not killed by the hang-up: it ends on its own.
		lctx, lcancel := context.WithTimeout(context.Background(), requestTimeout)
		defer lcancel()
		lreq := connect.NewRequest(&pb.ConnectRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "hangup"}}})
		lreq.Header().Set("X-Access-Token", "tok")
		cs, err := pc.Connect(lctx, lreq)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		var end *pb.ProcessEvent_EndEvent
		for cs.Receive() {
			if ev := cs.Msg().GetEvent().GetEnd(); ev != nil {
				end = ev
			}
		}
		if end == nil || end.GetExitCode() != 0 {
			t.Errorf("process after the client hung up: end %v, err %v; want exit 0", end, cs.Err())
		}
	})

	if !e.alive() {
		t.Fatalf("envd exited: %v\n%s", e.err, e.stderr)
	}
	if strings.Contains(e.stderr.String(), "panic") {
		t.Errorf("envd logged a panic:\n%s", e.stderr)
	}
}
