package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"
)

// DialPort opens a TCP connection to port on the sandbox's loopback
// address (127.0.0.1), tunnelled through envd over the client's own
// transport (TCP, unix socket, vsock, Firecracker's socket): what
// `envctl forward` does for each connection it accepts. ctx bounds the
// set-up only, as with net.Dialer. The connection passes half-closes on
// (CloseWrite) where the transport can. An error is an *Error: Status 502
// when nothing listens on the port, 403 for a strict-mode user's refused
// address, and so on.
func (c *Client) DialPort(ctx context.Context, port int) (net.Conn, error) {
	const op = "dial port"
	if port < 1 || port > 65535 {
		return nil, &Error{Op: op, Code: codeOfStatus(http.StatusBadRequest), Status: http.StatusBadRequest,
			Message: fmt.Sprintf("port %d is not a TCP port (1-65535)", port)}
	}
	c.init()
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, transportError(op, err)
	}
	// The set-up ends with ctx; the tunnel does not.
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	req, err := http.NewRequest(http.MethodGet, c.base+"/tunnel?port="+strconv.Itoa(port), nil)
	if err != nil {
		stop()
		conn.Close()
		return nil, &Error{Op: op, Message: err.Error(), Err: err}
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", tunnelProtocol)
	c.setHeaders(req.Header, "")
	br := bufio.NewReader(conn)
	var resp *http.Response
	if err = req.Write(conn); err == nil {
		resp, err = http.ReadResponse(br, req)
	}
	if !stop() || ctx.Err() != nil {
		conn.Close()
		return nil, transportError(op, ctx.Err())
	}
	if err != nil {
		conn.Close()
		return nil, transportError(op, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		err := httpError(op, resp)
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return &tunnelConn{Conn: conn, r: br}, nil
}

// tunnelProtocol is envd's Upgrade token for a tunnel.
const tunnelProtocol = "envd-tunnel"

// tunnelConn is a tunnel: reads go through the reader that read envd's
// answer (it may hold the first bytes of the far end's).
type tunnelConn struct {
	net.Conn
	r *bufio.Reader
}

func (t *tunnelConn) Read(p []byte) (int, error) { return t.r.Read(p) }

// CloseWrite shuts down the tunnel's sending side: the far end reads EOF
// and may still answer.
func (t *tunnelConn) CloseWrite() error {
	if cw, ok := t.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("this transport cannot shut down its writing side alone")
}
