package jwire

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// Fuzz targets for what a kernel (the sandbox user's code) sends envd:
// ZMTP frames (zmtp.go), the Jupyter messages they carry (zmq.go), and
// the JSON of the messages ReadFrame decodes as it reads them (frame.go).
// Seeds: f.Add below and testdata/fuzz/<target>.

// zmtpStream is a peer's greeting and READY followed by frames, each
// given as flags and payload.
func zmtpStream(frames ...any) []byte {
	b := peerGreeting("PUB")
	for i := 0; i < len(frames); i += 2 {
		b = appendZMTPFrame(b, frames[i].(byte), frames[i+1].([]byte))
	}
	return b
}

// FuzzZMTPReader: any bytes from a peer, greeting included, are read or
// refused within the bounds: no message goes over its frame count or its
// budget, and a frame is read whole only if it fits.
func FuzzZMTPReader(f *testing.F) {
	f.Add(zmtpStream())
	f.Add(zmtpStream(byte(zmtpMore), []byte("topic"), byte(zmtpMore), idsMsg, byte(0), []byte("{}")))
	f.Add(zmtpStream(byte(zmtpCommand), []byte("\x04PING\x00\x00"), byte(0), []byte("x")))
	f.Add(append(zmtpStream(), zmtpLong|zmtpMore, 0x80, 0, 0, 0, 0, 0, 0, 0))
	f.Add(append(zmtpStream(), zmtpLong, 0, 0, 0, 0, 0, 0x10, 0, 0, 'a'))
	f.Add(append(zmtpStream(), bytes.Repeat([]byte{zmtpMore, 0}, 100)...))
	f.Add(peerGreeting("PUB")[:zmtpGreetingLen])
	f.Add([]byte("\xff\x00\x00\x00\x00\x00\x00\x00\x00\x7f\x03\x00CURVE"))
	f.Fuzz(func(t *testing.T, data []byte) {
		z := newConn(bytesConn{bytes.NewReader(data)})
		if err := z.handshake("SUB"); err != nil {
			return
		}
		for i := 0; ; i++ {
			fr, err := z.next()
			if z.frames > maxMessageParts+1 || z.cost > zmtpMessageBudget+FrameCost {
				t.Fatalf("a message of %d frames costing %d got through", z.frames, z.cost)
			}
			if err != nil {
				if errors.Is(err, ErrMessageBound) && z.frames <= maxMessageParts && z.cost <= zmtpMessageBudget {
					t.Fatalf("%v at %d frames costing %d", err, z.frames, z.cost)
				}
				return
			}
			// Read some frames whole, skip the others.
			if i%3 == 2 {
				if err := fr.skip(); err != nil {
					return
				}
				continue
			}
			before := z.cost
			b, ok, err := fr.readSmall(1 << 10)
			switch {
			case err != nil:
				return
			case ok && (uint64(len(b)) != fr.size || z.cost != before+len(b) || z.cost > zmtpMessageBudget):
				t.Fatalf("read %d bytes of a frame of %d; cost %d to %d", len(b), fr.size, before, z.cost)
			case !ok && fr.size <= 1<<10 && fr.size <= uint64(zmtpMessageBudget-before):
				t.Fatalf("a frame of %d bytes not read, %d left", fr.size, zmtpMessageBudget-before)
			}
		}
	})
}

// directFrames is a Jupyter message's frames on the wire, after the peer's
// greeting.
func directFrames(frames [][]byte) []byte {
	var b []byte
	for i, fr := range frames {
		var flags byte
		if i < len(frames)-1 {
			flags = zmtpMore
		}
		b = appendZMTPFrame(b, flags, fr)
	}
	return b
}

// FuzzDirectMessage: any frames after a good handshake decode into
// messages within the bounds, and each message decoded whole comes back
// the same through envd's own ZeroMQ encoding (ZMQFrames), whose
// signature is the HMAC-SHA256 of its four parts.
func FuzzDirectMessage(f *testing.F) {
	hdr := `{"msg_id":"m1","msg_type":"stream","session":"k","username":"k","version":"5.3","date":"2026-12-02T10:00:00.000000Z"}`
	parent := `{"msg_id":"p1","msg_type":"execute_request","session":"s","username":"u","version":"5.3"}`
	for _, frames := range [][][]byte{
		zmqMessage("stream.stdout", hdr, parent, `{"name":"stdout","text":"hi\n"}`),
		zmqMessage("comm", hdr, `{}`, `{"comm_id":"c","data":{}}`, []byte("buf1"), []byte{}, []byte("buf3")),
		{idsMsg, []byte("sig"), []byte(hdr), []byte(parent), []byte("{}"), []byte("{}")},
		{[]byte("id1"), []byte("id2"), idsMsg, []byte("sig"), []byte(hdr)}, // truncated
		{[]byte("no delimiter")},
		zmqMessage("x", `{"msg_id":`, parent, `{}`), // a header that is not JSON
		zmqMessage("x", hdr, `null`, ``),
	} {
		f.Add(directFrames(frames))
	}
	f.Add(append(directFrames(zmqMessage("s", hdr, parent, `{}`)), bytes.Repeat([]byte{zmtpMore, 0}, 200)...))
	key := []byte("fuzz-key")
	f.Fuzz(func(t *testing.T, data []byte) {
		got, _ := readPeer(append(peerGreeting("PUB"), data...))
		for _, m := range got {
			if len(m.Buffers) > maxMessageParts {
				t.Fatalf("a message with %d buffers", len(m.Buffers))
			}
			kept := len(m.Content) + len(m.Metadata)
			for _, b := range m.Buffers {
				kept += len(b)
			}
			if kept > zmtpMessageBudget {
				t.Fatalf("a message of %d bytes", kept)
			}
			// Back through envd's encoding.
			frames := m.ZMQFrames(key)
			mac := hmac.New(sha256.New, key)
			for _, p := range frames[2:6] {
				mac.Write(p)
			}
			if sig := hex.EncodeToString(mac.Sum(nil)); string(frames[1]) != sig {
				t.Fatalf("signature %q, want %q", frames[1], sig)
			}
			again, err := readPeer(append(peerGreeting("PUB"), directFrames(frames)...))
			if err != nil || len(again) != 1 {
				t.Fatalf("re-encoded %+v: %d messages, %v", m, len(again), err)
			}
			want := *m
			if want.ParentHeader.MsgID == "" {
				want.ParentHeader = Header{} // zmqFrames sends {} for no parent
			}
			if len(want.Metadata) == 0 {
				want.Metadata = emptyObject
			}
			if len(want.Content) == 0 {
				want.Content = emptyObject
			}
			if len(want.Buffers) == 0 {
				want.Buffers = nil
			}
			if !reflect.DeepEqual(*again[0], want) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", *again[0], want)
			}
		}
	})
}

// canonicalKeys reports whether data's top-level keys, and those of its
// content, are each either exactly a key the decoders know or none that
// encoding/json would match to one (it matches case-insensitively), with
// no key twice. Between such inputs the decoders must agree; for the
// others they pick different members, both defensibly.
func canonicalKeys(data []byte) bool {
	known := []string{"header", "parent_header", "metadata", "content", "buffers", "channel", "name", "text"}
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return false
	}
	check := func(raw []byte) bool {
		dec := json.NewDecoder(bytes.NewReader(raw))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			return true // not an object: nothing to check
		}
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return false
			}
			k := tok.(string)
			if seen[k] {
				return false
			}
			seen[k] = true
			for _, kk := range known {
				if k != kk && strings.EqualFold(k, kk) {
					return false
				}
			}
			var v json.RawMessage
			if dec.Decode(&v) != nil {
				return false
			}
		}
		return true
	}
	return check(data) && check(top["content"])
}

// FuzzBigDecoder: the hand-written decoder ReadFrame uses for a message
// too big to hold (bigDecoder), given any JSON at all, against
// encoding/json (decodeText, for messages that are held whole). Where
// encoding/json decodes a message, bigDecoder decodes the same one (a
// stream message's text may come in pieces, on iopub); it may accept some
// JSON encoding/json refuses (it does not check numbers and literals it
// copies raw), never panics, and keeps to its budgets.
func FuzzBigDecoder(f *testing.F) {
	for _, s := range []string{
		`{"header": {"msg_id": "m1", "msg_type": "stream", "username": "u", "session": "s", "date": "2026-11-30T11:58:36.670725Z", "version": "5.3"}, "msg_id": "m1", "msg_type": "stream", "parent_header": {"msg_id": "p1", "msg_type": "execute_request"}, "metadata": {}, "content": {"name": "stdout", "text": "hello\n"}, "buffers": [], "channel": "iopub"}`,
		`{"header":{"msg_id":"m2","msg_type":"execute_reply"},"parent_header":{"msg_id":"p1"},"metadata":{"a":[1,2.5e3,null,true]},"content":{"status":"error","ename":"E","evalue":"\u00e9\ud83d\ude00\"\\\/\b\f\n\r\t","traceback":["a","b"]},"channel":"shell"}`,
		`{"header":{"msg_type":"stream"},"parent_header":{"msg_id":"p"},"content":{"text":"no name first","name":"stderr"}}`,
		`{"header":{"msg_type":"stream"},"parent_header":null,"content":{"name":"stdout","text":"\ud800 lone"}}`,
		`{"header":{"msg_type":"display_data"},"parent_header":{},"content":{"data":{"text/plain":"0.0"},"metadata":{}},"channel":"iopub"}`,
		` { "header" : { } , "content" : 1 } `,
		`{"header":{},"content":"unterminated`,
		`{"header":[[[[[[[[[[]]]]]]]]]],"content":{}}`,
		`{"Header":{"msg_id":"folded"},"content":{}}`,
		`{"header":{},"header":{"msg_id":"twice"},"content":{}}`,
	} {
		f.Add(uint8(0), []byte(s))
		f.Add(uint8(7), []byte(s))
	}
	f.Fuzz(func(t *testing.T, bufSize uint8, data []byte) {
		var big []*Message
		d := &bigDecoder{br: bufio.NewReaderSize(bytes.NewReader(data), 16+int(bufSize)%64), emit: func(m *Message) { big = append(big, m) }}
		bigErr := d.decodeObject()
		for _, m := range big {
			if len(m.Content) > MaxMessageBytes+structSlack+shortString || len(m.Metadata) > maxEnvelopeValue+structSlack+shortString {
				t.Fatalf("a message of %d+%d bytes", len(m.Content), len(m.Metadata))
			}
		}
		std, err := decodeText(data)
		if err != nil || !canonicalKeys(data) {
			return
		}
		var sc StreamContent
		if std.Type() == "stream" && std.DecodeContent(&sc) != nil && bigErr != nil {
			return // no use to anyone (its text is not a string): bigDecoder may drop it
		}
		if bigErr != nil || len(big) == 0 {
			t.Fatalf("encoding/json decodes %+v; bigDecoder: %v, %d messages", std, bigErr, len(big))
		}
		if std.Type() == "stream" && isStreamPieces(std, big) {
			return
		}
		if len(big) != 1 {
			t.Fatalf("%d messages, want 1 like encoding/json's %+v", len(big), std)
		}
		if !reflect.DeepEqual(big[0], std) {
			t.Fatalf("bigDecoder\n %+v\nencoding/json\n %+v", big[0], std)
		}
	})
}

// isStreamPieces reports whether big is std, a stream message, as
// ReadFrame delivers a big print: in pieces, each with std's header and
// parent, on iopub, whose texts make std's text, with std's name
// ("stdout" if none). Other members of its content are not kept.
func isStreamPieces(std *Message, big []*Message) bool {
	var want StreamContent
	if std.DecodeContent(&want) != nil {
		return false
	}
	if want.Name == "" {
		want.Name = "stdout"
	}
	var text strings.Builder
	for _, m := range big {
		var s StreamContent
		if m.Header != std.Header || m.ParentHeader != std.ParentHeader || m.Channel != ChannelIOPub ||
			m.DecodeContent(&s) != nil || s.Name != want.Name {
			return false
		}
		text.WriteString(s.Text)
	}
	return text.String() == want.Text
}
