package jwire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// frameOf encodes a message the way Jupyter Server 1.23 does: header,
// msg_id, msg_type, parent_header, metadata, content, buffers, channel.
func frameOf(t *testing.T, msgType, parent, channel string, content any) []byte {
	t.Helper()
	c, err := json.Marshal(content)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Appendf(nil, `{"header": {"msg_id": "m1", "msg_type": %q, "username": "u", "session": "s", "date": "2026-11-30T11:58:36.670725Z", "version": "5.3"}, "msg_id": "m1", "msg_type": %q, "parent_header": {"msg_id": %q, "msg_type": "execute_request"}, "metadata": {}, "content": %s, "buffers": [], "channel": %q}`,
		msgType, msgType, parent, c, channel)
}

func decodeFrame(t *testing.T, frame []byte) []*Message {
	t.Helper()
	var got []*Message
	if err := ReadFrame(false, bytes.NewReader(frame), nil, func(m *Message) { got = append(got, m) }); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestReadFrameStreamsBigPrint(t *testing.T) {
	t.Parallel()
	// Escapes and multi-byte characters across chunk boundaries.
	text := strings.Repeat("abc\"\\\n\té😀x", (wholeFrameLimit/14)+streamChunk) + "end"
	got := decodeFrame(t, frameOf(t, "stream", "p1", "iopub", StreamContent{Name: "stderr", Text: text}))
	if len(got) < 2 {
		t.Fatalf("%d messages, want the text in pieces", len(got))
	}
	var b strings.Builder
	for _, m := range got {
		var s StreamContent
		if err := m.DecodeContent(&s); err != nil {
			t.Fatal(err)
		}
		if m.Channel != ChannelIOPub || m.ParentHeader.MsgID != "p1" || m.Type() != "stream" || s.Name != "stderr" || m.Dropped != 0 {
			t.Fatalf("piece %+v name %q", m.Header, s.Name)
		}
		if len(s.Text) > streamChunk {
			t.Fatalf("piece of %d bytes", len(s.Text))
		}
		b.WriteString(s.Text)
	}
	if b.String() != text {
		t.Fatalf("text differs: %d bytes, want %d", b.Len(), len(text))
	}
}

func TestReadFrameCutsBigMessage(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("y", 2*MaxMessageBytes)
	got := decodeFrame(t, frameOf(t, "execute_reply", "p1", "shell", map[string]any{
		"status": "error", "ename": "ValueError", "evalue": big, "traceback": []string{big, "tb"},
	}))
	if len(got) != 1 {
		t.Fatalf("%d messages", len(got))
	}
	m := got[0]
	var rep ExecuteReplyContent
	if err := m.DecodeContent(&rep); err != nil {
		t.Fatal(err)
	}
	if m.Channel != ChannelShell || rep.Status != "error" || rep.EName != "ValueError" || m.ParentHeader.MsgID != "p1" || len(rep.Traceback) != 2 {
		t.Fatalf("reply on %s: status %q ename %q parent %q, %d traceback entries", m.Channel, rep.Status, rep.EName, m.ParentHeader.MsgID, len(rep.Traceback))
	}
	if len(m.Content) > MaxMessageBytes+4096 {
		t.Errorf("content of %d bytes", len(m.Content))
	}
	// Each cut string keeps a prefix of its y's and ends with a marker
	// that counts the rest.
	keptY := func(s string) int64 {
		before, _, _ := strings.Cut(s, "\n[envd: ")
		return int64(strings.Count(before, "y"))
	}
	if want := 4*int64(MaxMessageBytes) - keptY(rep.EValue) - keptY(rep.Traceback[0]); m.Dropped != want {
		t.Errorf("Dropped = %d, want %d", m.Dropped, want)
	}
	marker := fmt.Sprintf("\n[envd: %d bytes dropped: a kernel message is limited to 16 MiB]\n", 2*int64(MaxMessageBytes)-keptY(rep.EValue))
	if !strings.HasSuffix(rep.EValue, marker) {
		t.Errorf("evalue ends %q, want %q", rep.EValue[len(rep.EValue)-100:], marker)
	}
	if keptY(rep.EValue) < MaxMessageBytes-1024 {
		t.Errorf("evalue kept %d bytes", keptY(rep.EValue))
	}
	if len(rep.Traceback) != 2 || rep.Traceback[1] != "tb" {
		t.Errorf("traceback %q", rep.Traceback[1:])
	}
}

func TestReadFrameSmallIsWhole(t *testing.T) {
	t.Parallel()
	text := strings.Repeat("z", MaxMessageBytes)
	got := decodeFrame(t, frameOf(t, "stream", "p1", "iopub", StreamContent{Name: "stdout", Text: text}))
	if len(got) != 1 {
		t.Fatalf("%d messages, want 1", len(got))
	}
	var s StreamContent
	if err := got[0].DecodeContent(&s); err != nil || s.Text != text {
		t.Fatalf("text of %d bytes, err %v", len(s.Text), err)
	}
}

func TestReadFrameBigBinaryDropsBuffers(t *testing.T) {
	t.Parallel()
	m := &Message{
		Channel:      ChannelIOPub,
		Header:       Header{MsgID: "m1", MsgType: "comm_msg"},
		ParentHeader: Header{MsgID: "p1"},
		Content:      json.RawMessage(`{"comm_id": "c", "data": {"x": 1}}`),
		Buffers:      [][]byte{bytes.Repeat([]byte{7}, wholeFrameLimit)},
	}
	frame, bin, err := m.Encode()
	if err != nil || !bin {
		t.Fatal(err)
	}
	var got []*Message
	if err := ReadFrame(true, bytes.NewReader(frame), nil, func(m *Message) { got = append(got, m) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Type() != "comm_msg" || got[0].ParentHeader.MsgID != "p1" || got[0].Buffers != nil ||
		string(got[0].Content) != `{"comm_id":"c","data":{"x":1}}` {
		t.Fatalf("got %d messages, first %+v content %s", len(got), got[0].Header, got[0].Content)
	}
}

func TestReadFrameMalformed(t *testing.T) {
	t.Parallel()
	for _, frame := range [][]byte{
		append([]byte(`{"header": {"msg_type": "stream"}, "content": {"text": "`), bytes.Repeat([]byte("a"), wholeFrameLimit)...), // unterminated
		append(append([]byte(`{"header": `), bytes.Repeat([]byte("["), wholeFrameLimit)...), '}'),
	} {
		var got []*Message
		if err := ReadFrame(false, bytes.NewReader(frame), nil, func(m *Message) { got = append(got, m) }); err != nil {
			t.Fatal(err)
		}
		if len(got) != 0 {
			t.Errorf("decoded %d messages from a malformed frame", len(got))
		}
	}
}
