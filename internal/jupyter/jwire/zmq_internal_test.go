package jwire

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"strings"
	"testing"
)

// zmqMessage is a Jupyter message's ZeroMQ frames, as a kernel sends them.
func zmqMessage(topic, header, parent, content string, buffers ...[]byte) [][]byte {
	f := [][]byte{[]byte(topic), idsMsg, []byte("sig"), []byte(header), []byte(parent), []byte("{}"), []byte(content)}
	return append(f, buffers...)
}

// TestDirectReadBounded: the direct path's reader takes a kernel's
// messages (routing frames, signature, buffers) and keeps what a hostile
// one sends bounded: an envelope too big to route drops its message, a
// frame without the delimiter is skipped, an oversized stream message
// arrives in pieces; the messages after each still arrive.
func TestDirectReadBounded(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	z := &Conn{c: client, br: bufio.NewReaderSize(client, 64<<10)}

	parent := `{"msg_id":"p1","msg_type":"execute_request","session":"s","username":"u","version":"5.3"}`
	hdr := func(id, typ string) string {
		return `{"msg_id":"` + id + `","msg_type":"` + typ + `","session":"k","username":"k","version":"5.3","date":"2026-12-02T10:00:00.000000Z"}`
	}
	big := strings.Repeat("a", MaxMessageBytes+(3<<20))
	bigContent, _ := json.Marshal(map[string]string{"name": "stdout", "text": big})
	go func() {
		defer server.Close()
		w := &Conn{c: server}
		for _, m := range [][][]byte{
			zmqMessage("stream.stdout", hdr("m1", "stream"), parent, `{"name":"stdout","text":"one"}`, []byte("buf")),
			zmqMessage("x", `{"pad":"`+strings.Repeat("h", maxEnvelopeValue+1)+`"}`, parent, `{}`),
			{[]byte("no delimiter")},
			zmqMessage("stream.stdout", hdr("m2", "stream"), parent, `{"name":"stdout","text":"two"}`),
			zmqMessage("stream.stdout", hdr("m3", "stream"), parent, string(bigContent)),
			zmqMessage("status", hdr("m4", "status"), parent, `{"execution_state":"idle"}`),
		} {
			if err := w.Send(m); err != nil {
				return
			}
		}
	}()
	var got []*Message
	emit := func(m *Message) { m.Channel = ChannelIOPub; got = append(got, m) }
	for {
		if err := ReadMessage(z, ChannelIOPub, nil, emit); err != nil {
			if err != io.EOF && !strings.Contains(err.Error(), "closed pipe") {
				t.Fatalf("read: %v", err)
			}
			break
		}
	}
	var ids []string
	var text strings.Builder
	for _, m := range got {
		ids = append(ids, m.Header.MsgID)
		if m.ParentHeader.MsgID != "p1" {
			t.Errorf("message %s: parent %q", m.Header.MsgID, m.ParentHeader.MsgID)
		}
		if m.Header.MsgID == "m3" {
			var sc StreamContent
			if err := m.DecodeContent(&sc); err != nil {
				t.Fatal(err)
			}
			text.WriteString(sc.Text)
			if len(m.Content) > MaxMessageBytes {
				t.Errorf("a piece of %d bytes", len(m.Content))
			}
		}
	}
	if ids[0] != "m1" || ids[1] != "m2" || ids[len(ids)-1] != "m4" || len(ids) < 4 {
		t.Fatalf("messages %v: want m1, m2, m3 in pieces, m4", ids)
	}
	if !bytes.Equal(got[0].Buffers[0], []byte("buf")) || string(got[0].Content) != `{"name":"stdout","text":"one"}` {
		t.Errorf("m1: content %s, buffers %q", got[0].Content, got[0].Buffers)
	}
	if text.String() != big {
		t.Errorf("the big print: %d bytes arrived, want %d intact", text.Len(), len(big))
	}
}
