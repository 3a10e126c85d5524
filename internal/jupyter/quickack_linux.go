package jupyter

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// quickAckConn sets TCP_QUICKACK around every Read.
//
// Linux clears TCP_QUICKACK on its own after a while, so it has to be set
// again before each read (so the ACK for what arrives is sent at once) and
// after it (for the next segment). Without it, the server's small frames
// meet our delayed ACK and Nagle on its side, costing a delayed-ACK timeout per
// round trip when the server-side TCP_NODELAY patch is missing (an external
// server).
type quickAckConn struct {
	net.Conn
	raw syscall.RawConn
}

func withQuickAck(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	return &quickAckConn{Conn: c, raw: raw}
}

func (c *quickAckConn) Read(p []byte) (int, error) {
	c.quickAck()
	n, err := c.Conn.Read(p)
	c.quickAck()
	return n, err
}

func (c *quickAckConn) quickAck() {
	// Best effort: a failure only costs latency.
	_ = c.raw.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, 1)
	})
}
