package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mdlayher/vsock"
)

// A Dialer opens one connection to envd. The client speaks HTTP over it.
// TCP, Unix, Vsock and FirecrackerUDS return the dialers this package has;
// any other implementation works too.
type Dialer interface {
	// Dial opens a connection; it honours ctx's deadline and cancellation.
	Dial(ctx context.Context) (net.Conn, error)
	// String says where the dialer connects, for error messages:
	// "tcp 127.0.0.1:49983", "unix /run/envd.sock", "vsock 3:49983".
	String() string
}

// DialError is the error of a connection that could not be opened: envd is
// not reachable where the dialer looks for it.
type DialError struct {
	Target string // the dialer's String()
	Err    error
}

func (e *DialError) Error() string {
	return "cannot reach envd at " + e.Target + ": " + causeText(e.Err)
}

func (e *DialError) Unwrap() error { return e.Err }

// causeText is err's text without the address net.OpError repeats.
func causeText(err error) string {
	if op, ok := err.(*net.OpError); ok && op.Err != nil {
		var sys *os.SyscallError
		if errors.As(op.Err, &sys) {
			return sys.Err.Error()
		}
		return op.Err.Error()
	}
	return err.Error()
}

// DefaultDialTimeout bounds how long a dial, and the Firecracker handshake,
// may take when ctx has no earlier deadline.
const DefaultDialTimeout = 10 * time.Second

// TCP dials envd at a TCP address, "host:port".
func TCP(addr string) Dialer { return tcpDialer(addr) }

type tcpDialer string

func (d tcpDialer) String() string { return "tcp " + string(d) }

func (d tcpDialer) Dial(ctx context.Context) (net.Conn, error) {
	nd := net.Dialer{Timeout: DefaultDialTimeout, KeepAlive: 30 * time.Second}
	c, err := nd.DialContext(ctx, "tcp", string(d))
	if err != nil {
		return nil, &DialError{Target: d.String(), Err: err}
	}
	return c, nil
}

// Unix dials envd's unix socket (envd -unix-socket PATH).
func Unix(path string) Dialer { return unixDialer(path) }

type unixDialer string

func (d unixDialer) String() string { return "unix " + string(d) }

func (d unixDialer) Dial(ctx context.Context) (net.Conn, error) {
	nd := net.Dialer{Timeout: DefaultDialTimeout}
	c, err := nd.DialContext(ctx, "unix", string(d))
	if err != nil {
		return nil, &DialError{Target: d.String(), Err: err}
	}
	return c, nil
}

// Vsock dials envd over AF_VSOCK (envd -vsock-port PORT) at a context id:
// the guest's CID from the host, 2 (the host) from a guest, or 1 (local)
// through the kernel's loopback transport.
func Vsock(cid, port uint32) Dialer { return vsockDialer{cid: cid, port: port} }

type vsockDialer struct{ cid, port uint32 }

func (d vsockDialer) String() string { return fmt.Sprintf("vsock %d:%d", d.cid, d.port) }

func (d vsockDialer) Dial(ctx context.Context) (net.Conn, error) {
	// vsock.Dial takes no context: dial in the background and give up on
	// it when ctx ends (the connection, if it comes, is closed).
	type result struct {
		c   net.Conn
		err error
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	ch := make(chan result, 1)
	go func() {
		c, err := vsock.Dial(d.cid, d.port, nil)
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, &DialError{Target: d.String(), Err: r.err}
		}
		return r.c, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, &DialError{Target: d.String(), Err: ctx.Err()}
	}
}

// FirecrackerUDS dials envd inside a Firecracker microVM through the host
// side of its vsock device: the unix socket given as the device's uds_path.
// On each connection it writes "CONNECT <port>\n", waits for "OK <n>\n",
// then speaks HTTP as on any other connection.
func FirecrackerUDS(path string, port uint32) Dialer { return fcDialer{path: path, port: port} }

type fcDialer struct {
	path string
	port uint32
}

func (d fcDialer) String() string { return fmt.Sprintf("firecracker vsock %s port %d", d.path, d.port) }

// fcMaxLine bounds the handshake reply: "OK " and a port number.
const fcMaxLine = 64

func (d fcDialer) Dial(ctx context.Context) (net.Conn, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "unix", d.path)
	if err != nil {
		return nil, &DialError{Target: d.String(), Err: err}
	}
	if err := d.handshake(ctx, c); err != nil {
		c.Close()
		return nil, &DialError{Target: d.String(), Err: err}
	}
	return c, nil
}

func (d fcDialer) handshake(ctx context.Context, c net.Conn) error {
	dl, _ := ctx.Deadline()
	c.SetDeadline(dl)
	// A context cancelled mid-handshake unblocks the read.
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := io.WriteString(c, "CONNECT "+strconv.FormatUint(uint64(d.port), 10)+"\n"); err != nil {
		return fmt.Errorf("handshake: send CONNECT: %w", ctxErr(ctx, err))
	}
	// Read byte by byte: whatever follows the newline is HTTP, and belongs
	// to the HTTP client.
	line, err := readLine(c, fcMaxLine)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("handshake: the socket closed the connection after CONNECT %d: is envd listening on vsock port %d in the guest?", d.port, d.port)
		}
		return fmt.Errorf("handshake: waiting for OK: %w", ctxErr(ctx, err))
	}
	n, ok := strings.CutPrefix(line, "OK ")
	if !ok {
		return fmt.Errorf("handshake: got %q after CONNECT %d, want \"OK <port>\"", line, d.port)
	}
	if _, err := strconv.ParseUint(n, 10, 32); err != nil {
		return fmt.Errorf("handshake: got %q after CONNECT %d, want \"OK <port>\"", line, d.port)
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("handshake: %w", ctx.Err())
	}
	return nil
}

// readLine reads up to and including '\n', at most max bytes, and returns
// the line without it.
func readLine(r io.Reader, max int) (string, error) {
	var b strings.Builder
	var one [1]byte
	for b.Len() < max {
		n, err := r.Read(one[:])
		if n == 1 {
			if one[0] == '\n' {
				return b.String(), nil
			}
			b.WriteByte(one[0])
			continue
		}
		if err != nil {
			if errors.Is(err, io.EOF) && b.Len() > 0 {
				return "", fmt.Errorf("connection closed after %q: %w", b.String(), io.ErrUnexpectedEOF)
			}
			return "", err
		}
	}
	return "", fmt.Errorf("reply longer than %d bytes without a newline: %q", max, b.String())
}

// ctxErr prefers the context's reason over the i/o timeout it caused.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("timed out: %w", ctx.Err())
		}
		return ctx.Err()
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("timed out: %w", err)
	}
	return err
}

func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, DefaultDialTimeout)
}
