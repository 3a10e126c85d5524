package jwire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/testutil"
)

// peerGreeting is what a ZMTP 3.0 peer of type sockType sends first: its
// greeting and READY.
func peerGreeting(sockType string) []byte {
	var g [zmtpGreetingLen]byte
	g[0], g[9] = 0xff, 0x7f
	g[10], g[11] = 3, 0
	copy(g[12:32], "NULL")
	ready := append([]byte("\x05READY"), zmtpProperty("Socket-Type", sockType)...)
	return appendZMTPFrame(g[:], zmtpCommand, ready)
}

// zmtpPeer listens on 127.0.0.1 as a fake kernel socket of type sockType.
// Each connection gets the peer's greeting, has envd's read, and is then
// handed to serve, which runs in its own goroutine; the listener and the
// connections are closed, and serve waited for, at cleanup.
func zmtpPeer(t *testing.T, sockType string, serve func(c net.Conn, br *bufio.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return testutil.Serve(t, ln, func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := c.Write(peerGreeting(sockType)); err != nil {
			return
		}
		// envd's greeting, then its READY (a short command frame).
		var g [zmtpGreetingLen + 2]byte
		if _, err := io.ReadFull(br, g[:]); err != nil {
			return
		}
		if _, err := br.Discard(int(g[zmtpGreetingLen+1])); err != nil {
			return
		}
		serve(c, br)
	})
}

// floodChunk is a run of empty frames, each with MORE set.
func floodChunk(frames int) []byte {
	b := make([]byte, 0, 2*frames)
	for range frames {
		b = append(b, zmtpMore, 0)
	}
	return b
}

// writeFlood sends the start of a Jupyter message (topic, delimiter,
// signature, header, parent, metadata, content), then n empty buffer
// frames (rounded up to whole chunks) and a last empty frame that ends
// the message. It stops at the first failed write: envd hung up.
func writeFlood(c net.Conn, chunk []byte, n int) {
	var head []byte
	for _, f := range zmqMessage("status", `{"msg_id":"m","msg_type":"status","session":"k","username":"k","version":"5.3"}`,
		`{}`, `{"execution_state":"idle"}`) {
		head = appendZMTPFrame(head, zmtpMore, f)
	}
	if _, err := c.Write(head); err != nil {
		return
	}
	for sent := 0; sent < n; sent += len(chunk) / 2 {
		if _, err := c.Write(chunk); err != nil {
			return
		}
	}
	_, _ = c.Write([]byte{0, 0})
}

// TestDirectReadRejectsFrameFlood: a peer that sends one message of five
// million empty frames (2 bytes each on the wire, a slice header each if
// kept) is cut off once the message is over its bound, before envd's heap
// grows past a small multiple of that bound; the error names the bound
// and nothing is kept afterwards. Before: every frame became a buffer of
// the message (700 MiB allocated reading it, and a message of 5 million
// buffers delivered: 115 MiB of slice headers).
//
// Not parallel: the heap's numbers are this test's alone.
func TestDirectReadRejectsFrameFlood(t *testing.T) {
	const flood = 5_000_000
	chunk := floodChunk(1 << 15)
	addr := zmtpPeer(t, "PUB", func(c net.Conn, br *bufio.Reader) {
		// The subscription, then the flood.
		if _, err := br.Discard(3); err != nil {
			return
		}
		writeFlood(c, chunk, flood)
	})
	z, err := Dial(testutil.Context(t, 10*time.Second), addr, "SUB")
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	if err := z.Subscribe(); err != nil {
		t.Fatal(err)
	}
	var messages, buffers int
	emit := func(m *Message) { messages++; buffers += len(m.Buffers) }

	runtime.GC()
	var before, after, kept runtime.MemStats
	runtime.ReadMemStats(&before)
	err = ReadMessage(z, ChannelIOPub, nil, emit)
	runtime.ReadMemStats(&after)
	runtime.GC()
	runtime.ReadMemStats(&kept)

	allocated := int64(after.TotalAlloc - before.TotalAlloc)
	retained := int64(kept.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("read: %v; %d messages with %d buffers; allocated %d KiB, retained %d KiB", err, messages, buffers, allocated>>10, retained>>10)
	if !errors.Is(err, ErrMessageBound) || !strings.Contains(err.Error(), strconv.Itoa(maxMessageParts)+" frames") {
		t.Errorf("read: %v, %d messages with %d buffers; want an error naming the bound of %d frames", err, messages, buffers, maxMessageParts)
	}
	if allocated > 2*zmtpMessageBudget {
		t.Errorf("the read allocated %d MiB, over twice the bound of one message (%d MiB)", allocated>>20, zmtpMessageBudget>>20)
	}
	if retained > 1<<20 {
		t.Errorf("%d KiB retained after the read", retained>>10)
	}
}

// bytesConn is a connection whose peer sent in; what envd writes is
// dropped.
type bytesConn struct{ r *bytes.Reader }

func (c bytesConn) Read(p []byte) (int, error)     { return c.r.Read(p) }
func (bytesConn) Write(p []byte) (int, error)      { return len(p), nil }
func (bytesConn) Close() error                     { return nil }
func (bytesConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (bytesConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (bytesConn) SetDeadline(time.Time) error      { return nil }
func (bytesConn) SetReadDeadline(time.Time) error  { return nil }
func (bytesConn) SetWriteDeadline(time.Time) error { return nil }

// readPeer shakes hands with a peer that sends stream, then reads its
// messages until the stream fails or ends (nil error at its end).
func readPeer(stream []byte) ([]*Message, error) {
	z := newConn(bytesConn{bytes.NewReader(stream)})
	if err := z.handshake("SUB"); err != nil {
		return nil, fmt.Errorf("handshake: %w", err)
	}
	var got []*Message
	for {
		err := ReadMessage(z, ChannelIOPub, nil, func(m *Message) { got = append(got, m) })
		if errors.Is(err, io.EOF) {
			return got, nil
		}
		if err != nil {
			return got, err
		}
	}
}

// encodeMessage encodes a Jupyter message's frames, the last without
// MORE; extra (frames already encoded, with MORE) goes before the last
// buffer.
func encodeMessage(id string, extra []byte, buffers ...[]byte) []byte {
	frames := zmqMessage("status", `{"msg_id":"`+id+`","msg_type":"status","session":"k","username":"k","version":"5.3"}`,
		`{}`, `{"execution_state":"idle"}`, buffers...)
	var b []byte
	for i, f := range frames {
		flags := byte(zmtpMore)
		if i == len(frames)-1 {
			flags = 0
			if len(buffers) > 0 {
				b = append(b, extra...)
			}
		}
		b = appendZMTPFrame(b, flags, f)
	}
	return b
}

// TestZMTPPeerLengths: every length a peer sends is bounded before envd
// allocates for it; the bounds take what a real kernel sends.
func TestZMTPPeerLengths(t *testing.T) {
	t.Parallel()
	greeting := peerGreeting("PUB")
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	ping := appendZMTPFrame(nil, zmtpCommand, []byte("\x04PING\x00\x00"))
	pings := func(n int) []byte { return bytes.Repeat(ping, n) }
	empties := func(n int) []byte { return bytes.Repeat([]byte{zmtpMore, 0}, n) }
	long := func(flags byte, size uint64) []byte {
		return binary.BigEndian.AppendUint64([]byte{flags | zmtpLong}, size)
	}
	// A message's own frames: topic, delimiter, signature, header,
	// parent, metadata, content.
	const own = 7
	budgetLeft := zmtpMessageBudget - 64<<10
	for _, tc := range []struct {
		name    string
		stream  []byte
		wantErr string   // "" for none
		want    []string // ids of the messages read
		buffers int      // of the first message
	}{
		{name: "a real message", stream: cat(greeting, encodeMessage("m1", nil, []byte("b"))), want: []string{"m1"}, buffers: 1},
		{name: "not ZMTP 3", stream: cat([]byte{0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 2}, make([]byte, 53)), wantErr: "does not speak ZMTP 3"},
		{name: "a READY over 4 KiB", stream: cat(greeting[:zmtpGreetingLen], long(zmtpCommand, zmtpMaxCommand+1)), wantErr: "sent no READY"},
		{name: "a READY of 2^64-1 bytes", stream: cat(greeting[:zmtpGreetingLen], long(zmtpCommand, 1<<64-1)), wantErr: "a frame of 18446744073709551615 bytes"},
		{name: "a frame of 2^63 bytes", stream: cat(greeting, long(zmtpMore, 1<<63)), wantErr: "a frame of 9223372036854775808 bytes"},
		{name: "a frame of 2^63-1 bytes, skipped", stream: cat(greeting, long(zmtpMore, 1<<63-1), []byte("topic")), wantErr: io.ErrUnexpectedEOF.Error()},
		{name: "a command over 4 KiB", stream: cat(greeting, long(zmtpCommand, zmtpMaxCommand+1)), wantErr: "a command of 4097 bytes"},
		{
			name:   "pings between messages are free",
			stream: cat(greeting, encodeMessage("m1", nil), pings(maxMessageParts+1), encodeMessage("m2", nil)),
			want:   []string{"m1", "m2"},
		},
		{
			name:    "pings inside a message count",
			stream:  cat(greeting, encodeMessage("m1", pings(maxMessageParts), []byte("b")), encodeMessage("m2", nil)),
			wantErr: fmt.Sprintf("more than %d frames", maxMessageParts),
		},
		{
			name:    "a message of the most frames",
			stream:  cat(greeting, encodeMessage("m1", empties(maxMessageParts-own-1), []byte{})),
			want:    []string{"m1"},
			buffers: maxMessageParts - own,
		},
		{
			name:    "a message of a frame more",
			stream:  cat(greeting, encodeMessage("m1", empties(maxMessageParts-own), []byte{})),
			wantErr: fmt.Sprintf("more than %d frames", maxMessageParts),
		},
		{
			name:    "a message too long to skip",
			stream:  cat(greeting, empties(maxMessageParts+1)),
			wantErr: fmt.Sprintf("more than %d frames", maxMessageParts),
		},
		{
			name:    "frames past what is kept",
			stream:  cat(greeting, encodeMessage("m1", nil, make([]byte, budgetLeft), make([]byte, 0)), encodeMessage("m2", nil)),
			want:    []string{"m1", "m2"},
			buffers: 2,
		},
		{
			name:    "frames past the budget",
			stream:  cat(greeting, encodeMessage("m1", empties(2048), make([]byte, budgetLeft), []byte{})),
			wantErr: fmt.Sprintf("cost more than %d bytes", zmtpMessageBudget),
		},
		{
			name:   "buffers that do not fit are dropped",
			stream: cat(greeting, encodeMessage("m1", nil, []byte("b"), make([]byte, zmtpMessageBudget)), encodeMessage("m2", nil)),
			want:   []string{"m1", "m2"},
		},
		{
			name:   "an envelope over its bound drops its message",
			stream: cat(greeting, encodeMessage("m1", nil), encodeMessage(strings.Repeat("h", maxEnvelopeValue), nil), encodeMessage("m2", nil)),
			want:   []string{"m1", "m2"},
		},
	} {
		// One at a time: some streams are 17 MiB, and the package's
		// other tests run real kernels beside these.
		t.Run(tc.name, func(t *testing.T) {
			got, err := readPeer(tc.stream)
			var ids []string
			for _, m := range got {
				ids = append(ids, m.Header.MsgID)
			}
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("read: %v, want %q", err, tc.wantErr)
			}
			if fmt.Sprint(ids) != fmt.Sprint(tc.want) {
				t.Fatalf("messages %v, want %v", ids, tc.want)
			}
			if len(got) > 0 && len(got[0].Buffers) != tc.buffers {
				t.Errorf("%d buffers, want %d", len(got[0].Buffers), tc.buffers)
			}
			if strings.Contains(tc.wantErr, "frames") || strings.Contains(tc.wantErr, "cost") {
				if !errors.Is(err, ErrMessageBound) {
					t.Errorf("%v is not ErrMessageBound", err)
				}
			}
		})
	}
}
