// Package client is the Go client of envd, the agent inside a sandbox: it
// starts processes and streams their output, runs commands in persistent
// shell sessions, moves files in and out, runs code in stateful contexts,
// manages the sandbox's packages (pip, npm, R, apt), lists the sandbox's
// TCP listeners and how they are forwarded, and reads the health and
// metrics of the sandbox.
//
// A Client reaches envd over TCP, a unix socket, AF_VSOCK, or the host side
// of a Firecracker vsock device (see Dialer). The zero Client talks to
// http://127.0.0.1:49983; New takes Options for anything else:
//
//	c := client.New(client.Options{Dialer: client.FirecrackerUDS("/srv/vm1/v.sock", 49983)})
//	defer c.Close()
//	res, err := c.Run(ctx, client.Command{Name: "uname", Args: []string{"-a"}})
//
// Connect RPCs use the binary protobuf codec over HTTP/2 without TLS (h2c),
// which multiplexes every stream on one connection; file transfers use
// their own HTTP/1.1 connections, which move bulk data faster. Errors are
// *Error values that carry a Connect code; match them with errors.Is and
// the sentinels (ErrNotFound, ...).
//
// A Client is safe for concurrent use.
package client

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/envd-dev/envd/gen/envd/interpreter/v1/interpreterv1connect"
	"github.com/envd-dev/envd/gen/envd/packages/v1/packagesv1connect"
	"github.com/envd-dev/envd/gen/envd/ports/v1/portsv1connect"
	"github.com/envd-dev/envd/gen/envd/shell/v1/shellv1connect"
	"github.com/envd-dev/envd/gen/filesystem/filesystemconnect"
	"github.com/envd-dev/envd/gen/process/processconnect"
	"github.com/envd-dev/envd/wirecodec"
)

// DefaultAddr is where the zero Client finds envd.
const DefaultAddr = "127.0.0.1:49983"

// Options configures a Client. The zero value talks to DefaultAddr over
// TCP, with no token, as envd's default user.
type Options struct {
	// Addr is envd's address: "host:port", "http://host:port", or
	// "https://host:port" for envd behind a TLS proxy (verified with the
	// system's roots unless InsecureSkipVerify). Zero: DefaultAddr. Any
	// other scheme fails every call. It is ignored when Dialer is set.
	Addr string
	// InsecureSkipVerify accepts any certificate from an https Addr: for
	// a test proxy with a self-signed certificate, never in production.
	InsecureSkipVerify bool
	// Dialer opens the connections; use it for a unix socket, vsock or a
	// Firecracker vsock socket. Zero: TCP to Addr.
	Dialer Dialer
	// Token is sent as X-Access-Token on every request. Zero: none, which
	// envd accepts until an access token is set (by -access-token or /init).
	Token string
	// User is who processes run as and whose home relative paths start
	// from. Zero: envd's default user.
	User string
	// HTTP1 makes RPCs use HTTP/1.1 instead of h2c, for a proxy or an envd
	// that does not speak h2c. Each stream then holds a connection.
	HTTP1 bool
	// OutputHTTP1 follows process output (Start, Connect) over HTTP/1.1,
	// a connection per stream, while other RPCs share h2c's one: bulk
	// output comes faster (no HTTP/2 framing and windows on either side;
	// bench/stream.sh measures both), at the cost of a connection (and,
	// over vsock, a handshake) for each process followed at once, and
	// without HTTP/2's pings a peer that vanishes without closing is found
	// by TCP keepalives only. envctl sets it; a client following many
	// processes at once is better off without.
	OutputHTTP1 bool
}

// Client talks to one envd. Create it with New, or use the zero value for
// DefaultAddr; call Close when done with it.
type Client struct {
	opts Options

	once   sync.Once
	token  atomic.Pointer[string] // sent as X-Access-Token; Init may set it
	base   string                 // http(s)://host[:port], no trailing slash
	tls    bool                   // Addr was https://
	target string                 // where the dialer goes, for messages
	rpcHC  *http.Client           // Connect RPCs
	bulkHC *http.Client           // /files and the small HTTP API
	proc   processconnect.ProcessClient
	output processconnect.ProcessClient // Start and Connect: proc, or over bulkHC (OutputHTTP1)
	fs     filesystemconnect.FilesystemClient
	code   interpreterv1connect.InterpreterServiceClient
	pkgs   packagesv1connect.PackageServiceClient
	ports  portsv1connect.PortServiceClient
	shell  shellv1connect.ShellServiceClient
	// shellOut: Run and Connect of shell commands: shell, or over bulkHC
	// (OutputHTTP1).
	shellOut shellv1connect.ShellServiceClient
	// dial opens a tracked connection to envd, TLS included when tls
	// (DialPort's own connections).
	dial func(ctx context.Context) (net.Conn, error)

	connsMu sync.Mutex
	conns   map[*trackedConn]struct{} // guarded by connsMu: open connections
}

// New returns a client configured by o. It does not connect: the first
// call does.
func New(o Options) *Client {
	return &Client{opts: o}
}

func (c *Client) init() {
	c.once.Do(func() {
		d := c.opts.Dialer
		c.base = "http://envd"
		if d == nil {
			addr := c.opts.Addr
			if addr == "" {
				addr = DefaultAddr
			}
			addr = strings.TrimSuffix(addr, "/")
			hostport, scheme := addr, "http"
			if i := strings.Index(addr, "://"); i >= 0 {
				scheme, hostport = strings.ToLower(addr[:i]), addr[i+3:]
			}
			if _, _, err := net.SplitHostPort(hostport); err != nil {
				hostport = net.JoinHostPort(hostport, "49983")
			}
			switch scheme {
			case "http":
				d = TCP(hostport)
			case "https":
				d, c.tls = TCP(hostport), true
			default:
				// Never fall back to plain HTTP: a token would go in clear.
				d = failDialer{target: addr, err: fmt.Errorf("address %q: unsupported scheme %q: use http:// or https://", addr, scheme)}
			}
			c.base = "http://" + hostport
			if c.tls {
				c.base = "https://" + hostport
			}
		}
		c.target = d.String()
		tok := c.opts.Token
		c.token.Store(&tok)

		dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
			conn, err := d.Dial(ctx)
			if err != nil {
				return nil, err
			}
			return c.track(conn), nil
		}
		// RPCs: h2c multiplexes every stream on one connection, so a
		// hundred Connect streams cost one dial (and one Firecracker
		// handshake).
		var rpcProtos http.Protocols
		switch {
		case c.opts.HTTP1:
			rpcProtos.SetHTTP1(true)
		case c.tls:
			rpcProtos.SetHTTP2(true)
			rpcProtos.SetHTTP1(true) // a proxy without h2
		default:
			rpcProtos.SetUnencryptedHTTP2(true)
		}
		var tlsConf *tls.Config
		if c.tls {
			tlsConf = &tls.Config{InsecureSkipVerify: c.opts.InsecureSkipVerify} //nolint:gosec // the caller's explicit choice
		}
		c.dial = func(ctx context.Context) (net.Conn, error) {
			conn, err := dial(ctx, "", "")
			if err != nil || tlsConf == nil {
				return conn, err
			}
			host, _, _ := net.SplitHostPort(strings.TrimPrefix(c.base, "https://"))
			conf := tlsConf.Clone()
			conf.ServerName = host
			tc := tls.Client(conn, conf)
			if err := tc.HandshakeContext(ctx); err != nil {
				conn.Close()
				return nil, err
			}
			return tc, nil
		}
		c.rpcHC = &http.Client{Transport: &http.Transport{
			DialContext:         dial,
			TLSClientConfig:     tlsConf,
			Protocols:           &rpcProtos,
			DisableCompression:  true,
			MaxIdleConnsPerHost: 16,
			IdleConnTimeout:     90 * time.Second,
			HTTP2: &http.HTTP2Config{
				// Keep quiet streams alive and find dead peers.
				PingTimeout:     15 * time.Second,
				SendPingTimeout: 30 * time.Second,
				// Output streams in frames of up to 1 MiB instead of
				// 16 KiB, through windows that a fast reader does not
				// wait on: fewer frames and window updates, a faster
				// stream (internal/process's BenchmarkStreamThroughput
				// measures it).
				MaxReadFrameSize:              1 << 20,
				MaxReceiveBufferPerStream:     8 << 20,
				MaxReceiveBufferPerConnection: 16 << 20,
			},
		}}
		// Bulk: HTTP/1.1, one connection per transfer, no flow-control
		// windows between the bytes and the wire.
		var bulkProtos http.Protocols
		bulkProtos.SetHTTP1(true)
		c.bulkHC = &http.Client{Transport: &http.Transport{
			DialContext:         dial,
			TLSClientConfig:     tlsConf.Clone(),
			Protocols:           &bulkProtos,
			DisableCompression:  true, // a file is served as it is, never gzipped
			MaxIdleConnsPerHost: 4,
			IdleConnTimeout:     90 * time.Second,
			WriteBufferSize:     256 << 10,
			ReadBufferSize:      256 << 10,
		}}

		opts := []connect.ClientOption{
			// Compressing on a local link costs more than it saves.
			connect.WithAcceptCompression("gzip", nil, nil),
		}
		// Process output is decoded into buffers that Wait gives back.
		procOpts := append(opts, connect.WithCodec(wirecodec.Codec{}))
		c.proc = processconnect.NewProcessClient(c.rpcHC, c.base, procOpts...)
		c.output = c.proc
		if c.opts.OutputHTTP1 {
			c.output = processconnect.NewProcessClient(c.bulkHC, c.base, procOpts...)
		}
		c.fs = filesystemconnect.NewFilesystemClient(c.rpcHC, c.base, opts...)
		c.code = interpreterv1connect.NewInterpreterServiceClient(c.rpcHC, c.base, opts...)
		c.pkgs = packagesv1connect.NewPackageServiceClient(c.rpcHC, c.base, opts...)
		c.ports = portsv1connect.NewPortServiceClient(c.rpcHC, c.base, opts...)
		c.shell = shellv1connect.NewShellServiceClient(c.rpcHC, c.base, opts...)
		c.shellOut = c.shell
		if c.opts.OutputHTTP1 {
			c.shellOut = shellv1connect.NewShellServiceClient(c.bulkHC, c.base, opts...)
		}
	})
}

// Close closes every connection of the client: streams still open (of
// processes, executions, watches, downloads) fail with ErrUnavailable; the
// processes and code go on in the sandbox. The client may be used again
// after Close: it then opens new connections.
func (c *Client) Close() error {
	c.init()
	c.rpcHC.CloseIdleConnections()
	c.bulkHC.CloseIdleConnections()
	c.connsMu.Lock()
	conns := c.conns
	c.conns = nil
	c.connsMu.Unlock()
	for conn := range conns {
		conn.Close()
	}
	return nil
}

// track registers conn for Close.
func (c *Client) track(conn net.Conn) net.Conn {
	tc := &trackedConn{Conn: conn, c: c}
	c.connsMu.Lock()
	if c.conns == nil {
		c.conns = map[*trackedConn]struct{}{}
	}
	c.conns[tc] = struct{}{}
	c.connsMu.Unlock()
	return tc
}

// trackedConn forgets itself when closed.
type trackedConn struct {
	net.Conn
	c    *Client
	once sync.Once
}

// CloseWrite shuts down the writing side of a connection that can (TCP,
// unix, vsock): a tunnel passes the half-close on.
func (t *trackedConn) CloseWrite() error {
	if cw, ok := t.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("this connection cannot shut down its writing side alone")
}

func (t *trackedConn) Close() error {
	t.once.Do(func() {
		t.c.connsMu.Lock()
		delete(t.c.conns, t)
		t.c.connsMu.Unlock()
	})
	return t.Conn.Close()
}

// Target says where the client connects: "tcp 127.0.0.1:49983", "unix
// /run/envd.sock", ...
func (c *Client) Target() string {
	c.init()
	return c.target
}

// setHeaders adds the access token and the run-as user (user, else the
// client's) to a request.
func (c *Client) setHeaders(h http.Header, user string) {
	c.setToken(h)
	if user == "" {
		user = c.opts.User
	}
	if user != "" {
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
}

// setToken adds the access token to a request.
func (c *Client) setToken(h http.Header) {
	if tok := *c.token.Load(); tok != "" {
		h.Set("X-Access-Token", tok)
	}
}

// request builds a Connect request with the client's headers.
func request[T any](c *Client, msg *T, user string) *connect.Request[T] {
	r := connect.NewRequest(msg)
	c.setHeaders(r.Header(), user)
	return r
}

// streamContext returns the context of a stream that follows something
// long-lived (a process, an execution, a watch). It is cancelled with ctx,
// and when ctx's deadline passes, but carries no deadline to envd: for
// process.Start, envd takes a request deadline as the process's lifetime.
// timeout, when positive, is put back as an explicit deadline.
func streamContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	if timeout > 0 {
		var cancelT context.CancelFunc
		sctx, cancelT = context.WithTimeout(sctx, timeout)
		return sctx, func() { stop(); cancelT(); cancel() }
	}
	return sctx, func() { stop(); cancel() }
}

// streamError is rpcError for a stream that followed ctx (streamContext):
// the stream carries no deadline (envd would take it for the process's
// own timeout), so the caller's deadline ends it as a cancellation, which
// is reported as what it was: context.DeadlineExceeded.
func streamError(ctx context.Context, op string, err error) error {
	out := rpcError(op, err)
	if e, ok := errors.AsType[*Error](out); ok && e.Code == connect.CodeCanceled && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		e.Code, e.Message, e.Err = connect.CodeDeadlineExceeded, "deadline exceeded", context.Cause(ctx)
	}
	return out
}

// failDialer fails every dial with err: an Addr the client cannot use.
type failDialer struct {
	target string
	err    error
}

func (d failDialer) String() string { return d.target }

func (d failDialer) Dial(context.Context) (net.Conn, error) {
	return nil, &DialError{Target: d.target, Err: d.err}
}
