package jwire

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Channel names of the Jupyter messaging protocol, as carried in the
// "channel" field of the WebSocket's legacy framing.
const (
	ChannelShell   = "shell"
	ChannelIOPub   = "iopub"
	ChannelStdin   = "stdin"
	ChannelControl = "control"
)

// ProtocolVersion is the messaging protocol version envd speaks. Kernels
// accept older and newer minor versions; 5.3 is what the E2B server sends
// too.
const ProtocolVersion = "5.3"

// Header is a Jupyter message header (and parent header).
type Header struct {
	MsgID    string `json:"msg_id"`
	MsgType  string `json:"msg_type"`
	Session  string `json:"session"`
	Username string `json:"username"`
	// Date is kept as the kernel's string (e.g. "2026-11-30T11:58:36.670725Z")
	// so that the layer above can re-render it exactly; see Time.
	Date    string `json:"date,omitempty"`
	Version string `json:"version"`
}

// Time parses Date. It returns the zero time if Date is empty or malformed.
func (h Header) Time() time.Time {
	t, err := time.Parse(time.RFC3339Nano, h.Date)
	if err != nil {
		return time.Time{}
	}
	return t
}

// Message is one Jupyter message, from the server's kernel WebSocket or
// from a kernel's own ZeroMQ sockets.
//
// Metadata and Content are kept raw: MIME bundles must be passed through
// byte for byte (a float 0.0 must stay 0.0), so decoding is left to the
// caller; see DecodeContent and the *Content types.
type Message struct {
	Channel      string
	Header       Header
	ParentHeader Header // zero if the message has no parent
	Metadata     json.RawMessage
	Content      json.RawMessage
	Buffers      [][]byte
	// Dropped counts the bytes of output envd did not deliver, where a
	// marker in the text says so too: cut from this message's strings
	// because the kernel sent more than MaxMessageBytes in one message
	// (ReadFrame), or, in a stream message the layer above inserts where
	// its reader fell behind, the output left out at that point. Zero
	// otherwise.
	Dropped int64
}

// Type returns the message type (header.msg_type).
func (m *Message) Type() string { return m.Header.MsgType }

// DecodeContent unmarshals the message content into v.
func (m *Message) DecodeContent(v any) error {
	if err := json.Unmarshal(m.Content, v); err != nil {
		return fmt.Errorf("decode %s content: %w", m.Header.MsgType, err)
	}
	return nil
}

// StreamContent is the content of a "stream" message.
type StreamContent struct {
	Name string `json:"name"` // "stdout" or "stderr"
	Text string `json:"text"`
}

// DisplayDataContent is the content of "display_data", "execute_result" and
// "update_display_data" messages. Data values stay raw for passthrough.
type DisplayDataContent struct {
	Data           map[string]json.RawMessage `json:"data"`
	Metadata       json.RawMessage            `json:"metadata,omitempty"`
	Transient      json.RawMessage            `json:"transient,omitempty"`
	ExecutionCount int                        `json:"execution_count,omitempty"` // execute_result only
}

// ErrorContent is the content of an iopub "error" message; an error
// execute_reply carries the same fields.
type ErrorContent struct {
	EName     string   `json:"ename"`
	EValue    string   `json:"evalue"`
	Traceback []string `json:"traceback"`
}

// ExecuteInputContent is the content of "execute_input".
type ExecuteInputContent struct {
	Code           string `json:"code"`
	ExecutionCount int    `json:"execution_count"`
}

// ExecuteReplyContent is the content of "execute_reply". Status is "ok",
// "error" or "aborted" (IRkernel sends "abort" after an interrupt).
type ExecuteReplyContent struct {
	Status         string `json:"status"`
	ExecutionCount int    `json:"execution_count"`
	// UserExpressions maps each requested expression's name to its result:
	// {"status": "ok", "data": {MIME: value}, "metadata": {}} or an error
	// content with "status": "error".
	UserExpressions map[string]json.RawMessage `json:"user_expressions,omitempty"`
	ErrorContent
}

// StatusContent is the content of an iopub "status" message.
type StatusContent struct {
	ExecutionState string `json:"execution_state"` // busy, idle, starting, restarting, dead
}

// ClearOutputContent is the content of "clear_output".
type ClearOutputContent struct {
	Wait bool `json:"wait"`
}

// InputRequestContent is the content of a stdin "input_request". IRkernel's
// readline() sends one even when allow_stdin is false.
type InputRequestContent struct {
	Prompt   string `json:"prompt"`
	Password bool   `json:"password"`
}

// wireMessage is the legacy JSON framing: one object per message with the
// channel inline. Incoming frames also carry top-level msg_id/msg_type copies,
// which we ignore.
type wireMessage struct {
	Header       Header          `json:"header"`
	ParentHeader json.RawMessage `json:"parent_header"`
	Metadata     json.RawMessage `json:"metadata"`
	Content      json.RawMessage `json:"content"`
	Buffers      json.RawMessage `json:"buffers"` // not decoded: buffers come in binary frames
	Channel      string          `json:"channel"`
}

var emptyObject = json.RawMessage("{}")

// decodeText decodes a legacy text frame.
func decodeText(data []byte) (*Message, error) {
	var w wireMessage
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("decode kernel message: %w", err)
	}
	return w.message()
}

func (w *wireMessage) message() (*Message, error) {
	m := &Message{
		Channel:  w.Channel,
		Header:   w.Header,
		Metadata: w.Metadata,
		Content:  w.Content,
	}
	// An empty parent is sent as {}; a null would also be tolerated.
	if len(w.ParentHeader) > 0 && string(w.ParentHeader) != "null" {
		if err := json.Unmarshal(w.ParentHeader, &m.ParentHeader); err != nil {
			return nil, fmt.Errorf("decode parent header: %w", err)
		}
	}
	return m, nil
}

// decodeBinary decodes a legacy binary frame, used by the server for messages
// that carry buffers (comms, widgets):
//
//	u32be n | n × u32be offsets | JSON message | buffer 1 ... buffer n-1
//
// offsets[0] is where the JSON starts; part i runs to offsets[i+1] (or the end).
func decodeBinary(data []byte) (*Message, error) {
	parts, err := splitBinary(data)
	if err != nil {
		return nil, err
	}
	m, err := decodeText(parts[0])
	if err != nil {
		return nil, err
	}
	if len(parts) > 1 {
		m.Buffers = parts[1:]
	}
	return m, nil
}

var errBadFrame = errors.New("malformed binary kernel frame")

func splitBinary(data []byte) ([][]byte, error) {
	if len(data) < 4 {
		return nil, errBadFrame
	}
	n := binary.BigEndian.Uint32(data)
	// Checked before allocating: each offset takes 4 bytes, so n cannot
	// exceed what the frame can hold, and a message has at most
	// maxMessageParts parts (each costs envd a slice header: 4.4 million
	// empty ones fit in a frame of wholeFrameLimit).
	if n == 0 || n > maxMessageParts || uint64(n) > uint64(len(data)-4)/4 {
		return nil, errBadFrame
	}
	offs := make([]int, n)
	for i := range offs {
		offs[i] = int(binary.BigEndian.Uint32(data[4+4*i:]))
	}
	parts := make([][]byte, n)
	for i := range offs {
		end := len(data)
		if i+1 < len(offs) {
			end = offs[i+1]
		}
		if offs[i] < 4+4*int(n) || offs[i] > end || end > len(data) {
			return nil, errBadFrame
		}
		parts[i] = data[offs[i]:end]
	}
	return parts, nil
}

// Encode returns the WebSocket frame for m: a text frame of JSON, or the
// binary layout of decodeBinary when m has buffers.
func (m *Message) Encode() (data []byte, binaryFrame bool, err error) {
	w := wireMessage{
		Header:       m.Header,
		ParentHeader: emptyObject,
		Metadata:     m.Metadata,
		Content:      m.Content,
		Buffers:      json.RawMessage("[]"),
		Channel:      m.Channel,
	}
	if m.ParentHeader.MsgID != "" {
		if w.ParentHeader, err = json.Marshal(m.ParentHeader); err != nil {
			return nil, false, err
		}
	}
	if len(w.Metadata) == 0 {
		w.Metadata = emptyObject
	}
	if len(w.Content) == 0 {
		w.Content = emptyObject
	}
	js, err := json.Marshal(&w)
	if err != nil {
		return nil, false, fmt.Errorf("encode kernel message: %w", err)
	}
	if len(m.Buffers) == 0 {
		return js, false, nil
	}
	n := 1 + len(m.Buffers)
	head := 4 + 4*n
	size := head + len(js)
	for _, b := range m.Buffers {
		size += len(b)
	}
	out := make([]byte, head, size)
	binary.BigEndian.PutUint32(out, uint32(n))
	off := head
	binary.BigEndian.PutUint32(out[4:], uint32(off))
	off += len(js)
	for i, b := range m.Buffers {
		binary.BigEndian.PutUint32(out[8+4*i:], uint32(off))
		off += len(b)
	}
	out = append(out, js...)
	for _, b := range m.Buffers {
		out = append(out, b...)
	}
	return out, true, nil
}

// NewMessage builds a request with a fresh msg_id in the given session.
func NewMessage(channel, msgType, session string, content any) (*Message, error) {
	c, err := json.Marshal(content)
	if err != nil {
		return nil, fmt.Errorf("encode %s content: %w", msgType, err)
	}
	return &Message{
		Channel: channel,
		Header: Header{
			MsgID:    NewID(),
			MsgType:  msgType,
			Session:  session,
			Username: "envd",
			Date:     time.Now().UTC().Format("2006-01-02T15:04:05.000000Z"),
			Version:  ProtocolVersion,
		},
		Content: c,
	}, nil
}

// NewID returns a random UUIDv4 string, the form Jupyter uses for ids.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux (Go ≥1.24)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
