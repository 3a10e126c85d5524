package jwire

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"time"
)

// A ZeroMQ peer of the least kind a direct connection to a kernel needs:
// ZMTP 3.0 over TCP with the NULL mechanism, as a DEALER (to a kernel's
// shell ROUTER) or a SUB (to its iopub PUB). One connection, no
// reconnecting, no queueing: the caller owns those. libzmq 4 speaks 3.1 and
// takes a 3.0 peer, whose subscriptions are plain messages (0x01 then the
// prefix).

// zmtpGreetingLen is the size of a ZMTP 3 greeting.
const zmtpGreetingLen = 64

// Timeouts of a connection's own writes and handshake.
const (
	// handshakeTimeout bounds Dial's handshake when its context has no
	// deadline.
	handshakeTimeout = 10 * time.Second
	// sendTimeout bounds one Send: a peer that stops reading fails the
	// send instead of blocking its callers.
	sendTimeout = 30 * time.Second
)

// Frame flags.
const (
	zmtpMore    = 0x01
	zmtpLong    = 0x02
	zmtpCommand = 0x04
)

// zmtpMaxCommand bounds a command frame (READY, ERROR, PING) from the
// peer; a bigger one fails the connection.
const zmtpMaxCommand = 4 << 10

// A message's budget. The peer (the kernel, so the sandbox user's code)
// decides how many frames a message has and how long each is; what envd
// may hold of one message is bounded as for the WebSocket (frame.go): one
// message costs at most wholeFrameLimit, in at most maxMessageParts
// frames. Every frame costs FrameCost (an empty one is 2 bytes on the
// wire but a slice header and more in envd), and a frame read into memory
// (readSmall) its payload too, charged before it is allocated. Frames
// skipped or streamed (an envelope too big to route; content bigger than
// what is left, which goes through ReadFrame's bounded decoding, so that a
// 50 MB print still arrives whole) cost FrameCost alone: their bytes
// are not kept.
//
// A frame whose payload does not fit is skipped, and its message's reader
// drops it as the WebSocket's reader does (readSmall reports false). A
// message whose frames alone go over the budget or the count fails the
// connection with ErrMessageBound, at that frame's header: the caller
// then reconnects, as after any other broken connection.
const (
	// FrameCost is what a frame costs besides its payload; a message's
	// buffer is charged the same wherever envd holds it.
	FrameCost = 32
	// zmtpMessageBudget is what one message may cost.
	zmtpMessageBudget = wholeFrameLimit
)

var (
	errZMTP = errors.New("zmtp")
	// ErrMessageBound is the peer's sending a message over its bound: its
	// connection is of no further use.
	ErrMessageBound = fmt.Errorf("%w: kernel message over its bound", errZMTP)
)

// Conn is one ZMTP connection. Sends may come from any goroutine; reads
// from one.
type Conn struct {
	c   net.Conn
	br  *bufio.Reader
	wmu sync.Mutex

	// The reader's state: the message being read. Only the reading
	// goroutine touches these.
	more   bool             // the last frame had MORE: the next one is of the same message
	frames int              // the message's frames so far
	cost   int              // what they cost (see zmtpMessageBudget)
	body   io.LimitedReader // the unread payload of the last frame
}

// Dial connects to addr over TCP and shakes hands as a socket of type
// sockType ("DEALER", "SUB"). ctx bounds the handshake (handshakeTimeout
// if it has no deadline).
func Dial(ctx context.Context, addr, sockType string) (*Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	} else {
		c.SetDeadline(time.Now().Add(handshakeTimeout))
	}
	z, err := Handshake(c, sockType)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %s handshake with %s: %w", errZMTP, sockType, addr, err)
	}
	c.SetDeadline(time.Time{})
	return z, nil
}

// Handshake shakes hands as a socket of type sockType over c, a connection
// to a ZMTP 3 peer, at either end of it (the NULL mechanism's handshake is
// the same both ways). c's deadlines bound it; c is not closed on failure.
func Handshake(c net.Conn, sockType string) (*Conn, error) {
	z := newConn(c)
	if err := z.handshake(sockType); err != nil {
		return nil, err
	}
	return z, nil
}

func newConn(c net.Conn) *Conn {
	return &Conn{c: c, br: bufio.NewReaderSize(c, 64<<10)}
}

// handshake sends envd's greeting and READY and reads the peer's: every
// length read is checked before anything is allocated for it (the
// greeting has a fixed size, a command at most zmtpMaxCommand).
func (z *Conn) handshake(sockType string) error {
	var g [zmtpGreetingLen]byte
	g[0], g[9] = 0xff, 0x7f
	g[10], g[11] = 3, 0 // version 3.0
	copy(g[12:32], "NULL")
	ready := append([]byte("\x05READY"), zmtpProperty("Socket-Type", sockType)...)
	out := appendZMTPFrame(g[:], zmtpCommand, ready)
	if _, err := z.c.Write(out); err != nil {
		return err
	}
	var peer [zmtpGreetingLen]byte
	if _, err := io.ReadFull(z.br, peer[:]); err != nil {
		return err
	}
	if peer[0] != 0xff || peer[9]&1 != 1 || peer[10] < 3 {
		return errors.New("the peer does not speak ZMTP 3")
	}
	if mech := string(bytes.TrimRight(peer[12:32], "\x00")); mech != "NULL" {
		return fmt.Errorf("the peer wants security mechanism %q", mech)
	}
	flags, size, err := z.frameHeader()
	if err != nil {
		return err
	}
	if flags&zmtpCommand == 0 || size > zmtpMaxCommand {
		return errors.New("the peer sent no READY")
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(z.br, body); err != nil {
		return err
	}
	if len(body) < 1 || int(body[0]) > len(body)-1 {
		return errors.New("malformed command")
	}
	switch name := string(body[1 : 1+body[0]]); name {
	case "READY":
		return nil
	case "ERROR":
		return fmt.Errorf("the peer refused: %q", body[1+body[0]:])
	default:
		return fmt.Errorf("the peer sent %q, not READY", name)
	}
}

// zmtpProperty encodes a metadata property of a READY command.
func zmtpProperty(name, value string) []byte {
	b := append([]byte{byte(len(name))}, name...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
	return append(b, value...)
}

func appendZMTPFrame(b []byte, flags byte, body []byte) []byte {
	if len(body) <= 255 {
		b = append(b, flags, byte(len(body)))
	} else {
		b = append(b, flags|zmtpLong)
		b = binary.BigEndian.AppendUint64(b, uint64(len(body)))
	}
	return append(b, body...)
}

// Send writes one message, its frames in one write.
func (z *Conn) Send(frames [][]byte) error {
	n := 0
	for _, f := range frames {
		n += 9 + len(f)
	}
	b := make([]byte, 0, n)
	for i, f := range frames {
		var flags byte
		if i < len(frames)-1 {
			flags = zmtpMore
		}
		b = appendZMTPFrame(b, flags, f)
	}
	z.wmu.Lock()
	defer z.wmu.Unlock()
	z.c.SetWriteDeadline(time.Now().Add(sendTimeout))
	_, err := z.c.Write(b)
	return err
}

// Subscribe subscribes a SUB to every message.
func (z *Conn) Subscribe() error { return z.Send([][]byte{{0x01}}) }

// frameHeader reads a frame's flags and size.
func (z *Conn) frameHeader() (flags byte, size uint64, err error) {
	flags, err = z.br.ReadByte()
	if err != nil {
		return 0, 0, err
	}
	if flags&zmtpLong == 0 {
		b, err := z.br.ReadByte()
		return flags, uint64(b), err
	}
	var b [8]byte
	if _, err := io.ReadFull(z.br, b[:]); err != nil {
		return 0, 0, err
	}
	size = binary.BigEndian.Uint64(b[:])
	if size > math.MaxInt64 { // ZMTP 3: the most significant bit is zero
		return 0, 0, fmt.Errorf("%w: a frame of %d bytes", errZMTP, size)
	}
	return flags, size, nil
}

// zframe is a frame being read: its flags, size, and the body unread.
type zframe struct {
	z    *Conn
	more bool
	size uint64
	body io.Reader // at most size bytes; read it, or skip it, before the next frame
}

// next returns the next message frame, skipping commands (a PING, say).
// It charges the frame to its message and fails once the message is over
// its bound (see zmtpMessageBudget).
func (z *Conn) next() (zframe, error) {
	if z.body.N > 0 { // what the caller left of the last frame
		if err := (zframe{z: z, body: &z.body}).skip(); err != nil {
			return zframe{}, err
		}
	}
	for {
		flags, size, err := z.frameHeader()
		if err != nil {
			return zframe{}, err
		}
		if !z.more { // the first frame of a message
			z.frames, z.cost = 0, 0
		}
		z.frames++
		z.cost += FrameCost
		if z.frames > maxMessageParts {
			return zframe{}, fmt.Errorf("%w: more than %d frames", ErrMessageBound, maxMessageParts)
		}
		if z.cost > zmtpMessageBudget {
			return zframe{}, fmt.Errorf("%w: %d frames cost more than %d bytes (%d bytes kept, %d a frame)",
				ErrMessageBound, z.frames, zmtpMessageBudget, z.cost-z.frames*FrameCost, FrameCost)
		}
		if flags&zmtpCommand != 0 {
			if size > zmtpMaxCommand {
				return zframe{}, fmt.Errorf("%w: a command of %d bytes (at most %d)", errZMTP, size, zmtpMaxCommand)
			}
			if _, err := z.br.Discard(int(size)); err != nil {
				return zframe{}, err
			}
			continue
		}
		z.more = flags&zmtpMore != 0
		z.body = io.LimitedReader{R: z.br, N: int64(size)}
		return zframe{z: z, more: z.more, size: size, body: &z.body}, nil
	}
}

// room is what the message being read may still cost.
func (z *Conn) room() uint64 { return uint64(max(zmtpMessageBudget-z.cost, 0)) }

// readSmall reads a frame whole if it holds at most limit bytes and fits
// in its message's budget, which it is charged to; else it skips it and
// reports false.
func (f zframe) readSmall(limit int) ([]byte, bool, error) {
	if f.size > uint64(limit) || f.size > f.z.room() {
		return nil, false, f.skip()
	}
	f.z.cost += int(f.size)
	b := make([]byte, f.size)
	_, err := io.ReadFull(f.body, b)
	return b, true, err
}

// skip discards what is left of the frame.
func (f zframe) skip() error {
	if _, err := io.Copy(io.Discard, f.body); err != nil {
		return err
	}
	if f.z.body.N > 0 {
		return io.ErrUnexpectedEOF
	}
	return nil
}

// Close closes the connection; a read in progress fails.
func (z *Conn) Close() error { return z.c.Close() }
