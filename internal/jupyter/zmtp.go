package jupyter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// A ZeroMQ peer of the least kind the direct path needs (direct.go): ZMTP
// 3.0 over TCP with the NULL mechanism, as a DEALER (to a kernel's shell
// ROUTER) or a SUB (to its iopub PUB). One connection, no reconnecting, no
// queueing: the direct path owns those. libzmq 4 speaks 3.1 and takes a
// 3.0 peer, whose subscriptions are plain messages (0x01 then the prefix).

// zmtpGreetingLen is the size of a ZMTP 3 greeting.
const zmtpGreetingLen = 64

// Frame flags.
const (
	zmtpMore    = 0x01
	zmtpLong    = 0x02
	zmtpCommand = 0x04
)

// zmtpMaxCommand bounds a command frame (READY, ERROR) from the peer.
const zmtpMaxCommand = 4 << 10

var errZMTP = errors.New("zmtp")

// zsock is one ZMTP connection. Sends may come from any goroutine; reads
// from one.
type zsock struct {
	c   net.Conn
	br  *bufio.Reader
	wmu sync.Mutex
}

// dialZMTP connects to addr and shakes hands as a socket of type sockType
// ("DEALER", "SUB"). ctx bounds the handshake.
func dialZMTP(ctx context.Context, addr, sockType string) (*zsock, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	} else {
		c.SetDeadline(time.Now().Add(10 * time.Second))
	}
	z := &zsock{c: c, br: bufio.NewReaderSize(c, 64<<10)}
	if err := z.handshake(sockType); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %s handshake with %s: %w", errZMTP, sockType, addr, err)
	}
	c.SetDeadline(time.Time{})
	return z, nil
}

func (z *zsock) handshake(sockType string) error {
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

// send writes one message, its frames in one write.
func (z *zsock) send(frames [][]byte) error {
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
	z.c.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := z.c.Write(b)
	return err
}

// subscribe subscribes a SUB to every message.
func (z *zsock) subscribe() error { return z.send([][]byte{{0x01}}) }

// frameHeader reads a frame's flags and size.
func (z *zsock) frameHeader() (flags byte, size uint64, err error) {
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
	return flags, binary.BigEndian.Uint64(b[:]), nil
}

// zframe is a frame being read: its flags, size, and the body unread.
type zframe struct {
	more bool
	size uint64
	body io.Reader // at most size bytes; read it, or skip it, before the next frame
}

// next returns the next message frame, skipping commands (a PING, say).
func (z *zsock) next() (zframe, error) {
	for {
		flags, size, err := z.frameHeader()
		if err != nil {
			return zframe{}, err
		}
		if flags&zmtpCommand != 0 {
			if _, err := io.CopyN(io.Discard, z.br, int64(min(size, 1<<62))); err != nil {
				return zframe{}, err
			}
			continue
		}
		return zframe{more: flags&zmtpMore != 0, size: size, body: io.LimitReader(z.br, int64(min(size, 1<<62)))}, nil
	}
}

// readSmall reads a frame whole if it holds at most limit bytes; else it
// skips it and reports false.
func (f zframe) readSmall(limit int) ([]byte, bool, error) {
	if f.size > uint64(limit) {
		_, err := io.Copy(io.Discard, f.body)
		return nil, false, err
	}
	b := make([]byte, f.size)
	_, err := io.ReadFull(f.body, b)
	return b, true, err
}

// skip discards what is left of the frame.
func (f zframe) skip() error {
	_, err := io.Copy(io.Discard, f.body)
	return err
}

func (z *zsock) Close() error { return z.c.Close() }
