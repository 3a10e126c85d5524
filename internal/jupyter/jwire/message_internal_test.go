package jwire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"testing"
)

func TestBinaryFrameRoundTrip(t *testing.T) {
	t.Parallel()
	m, err := NewMessage(ChannelShell, "comm_msg", "sess", map[string]any{"comm_id": "c1", "data": map[string]int{"x": 1}})
	if err != nil {
		t.Fatal(err)
	}
	m.ParentHeader = Header{MsgID: "parent", MsgType: "execute_request"}
	m.Buffers = [][]byte{[]byte("first"), {}, {0, 1, 2, 255}}
	data, bin, err := m.Encode()
	if err != nil || !bin {
		t.Fatalf("encode: bin=%v err=%v", bin, err)
	}
	if n := binary.BigEndian.Uint32(data); n != 4 {
		t.Fatalf("nbufs = %d, want 4 (JSON + 3 buffers)", n)
	}
	got, err := decodeBinary(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Header != m.Header || got.ParentHeader != m.ParentHeader || got.Channel != ChannelShell {
		t.Errorf("headers: got %+v / %+v", got.Header, got.ParentHeader)
	}
	if !bytes.Equal(got.Content, m.Content) {
		t.Errorf("content %s, want %s", got.Content, m.Content)
	}
	if len(got.Buffers) != 3 || string(got.Buffers[0]) != "first" || len(got.Buffers[1]) != 0 || !bytes.Equal(got.Buffers[2], []byte{0, 1, 2, 255}) {
		t.Errorf("buffers %q", got.Buffers)
	}
}

func TestTextFrame(t *testing.T) {
	t.Parallel()
	m, err := NewMessage(ChannelShell, "execute_request", "sess", map[string]any{"code": "1"})
	if err != nil {
		t.Fatal(err)
	}
	data, bin, err := m.Encode()
	if err != nil || bin {
		t.Fatalf("encode: bin=%v err=%v", bin, err)
	}
	// Jupyter wants an empty parent as {}, and the channel inline.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	if string(raw["parent_header"]) != "{}" || string(raw["channel"]) != `"shell"` || string(raw["metadata"]) != "{}" {
		t.Errorf("frame %s", data)
	}

	// What the server sends: top-level copies of msg_id/msg_type, a float
	// that must survive as written.
	in := `{"header":{"msg_id":"a","msg_type":"execute_result","session":"s","username":"u","date":"2026-11-30T11:58:36.670725Z","version":"5.3"},
	"msg_id":"a","msg_type":"execute_result","parent_header":{"msg_id":"p"},"metadata":{},
	"content":{"data":{"e2b/chart":{"x":0.0}},"execution_count":3},"buffers":[],"channel":"iopub"}`
	got, err := decodeText([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	var dd DisplayDataContent
	if err := got.DecodeContent(&dd); err != nil {
		t.Fatal(err)
	}
	if string(dd.Data["e2b/chart"]) != `{"x":0.0}` || dd.ExecutionCount != 3 || got.ParentHeader.MsgID != "p" {
		t.Errorf("decoded %+v %s", got, dd.Data["e2b/chart"])
	}
	if got.Header.Time().Nanosecond() != 670725000 {
		t.Errorf("date %v", got.Header.Time())
	}
}

func TestMalformedBinaryFrames(t *testing.T) {
	t.Parallel()
	for _, data := range [][]byte{
		nil,
		{0, 0, 0},
		{0, 0, 0, 0},                         // no parts
		{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 8}, // count larger than the frame
		{0, 0, 0, 1, 0, 0, 0, 100},           // offset past the end
		{0, 0, 0, 1, 0, 0, 0, 2},             // offset inside the header
		{0, 0, 0, 2, 0, 0, 0, 14, 0, 0, 0, 12, 'x', 'x'}, // offsets going back
	} {
		if _, err := decodeBinary(data); err == nil {
			t.Errorf("decodeBinary(%v) accepted", data)
		}
	}
}

func FuzzDecodeBinary(f *testing.F) {
	m, _ := NewMessage(ChannelIOPub, "comm_msg", "s", map[string]int{"a": 1})
	m.Buffers = [][]byte{[]byte("buf")}
	data, _, _ := m.Encode()
	f.Add(data)
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 8, '{', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = decodeBinary(data) // must not panic or over-allocate
	})
}

func TestNewIDIsUUIDv4(t *testing.T) {
	t.Parallel()
	id := NewID()
	if len(id) != 36 || id[14] != '4' || !bytes.ContainsAny([]byte{id[19]}, "89ab") {
		t.Errorf("id %q", id)
	}
	if NewID() == id {
		t.Error("ids repeat")
	}
}
