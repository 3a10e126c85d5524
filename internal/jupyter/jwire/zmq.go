package jwire

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
)

// Jupyter messages over ZeroMQ: what a kernel's shell and iopub sockets
// carry, as a Conn reads and writes them.

// idsMsg is the delimiter of a Jupyter message's ZeroMQ frames: the
// routing frames come before it, the signature and the message after.
var idsMsg = []byte("<IDS|MSG>")

// ZMQFrames are m's ZeroMQ frames, from the delimiter on, signed with key
// (HMAC-SHA256 of header, parent header, metadata and content; an empty
// signature if key is empty).
func (m *Message) ZMQFrames(key []byte) [][]byte {
	header, _ := json.Marshal(m.Header)
	parent := emptyObject
	if m.ParentHeader.MsgID != "" {
		parent, _ = json.Marshal(m.ParentHeader)
	}
	metadata, content := []byte(m.Metadata), []byte(m.Content)
	if len(metadata) == 0 {
		metadata = emptyObject
	}
	if len(content) == 0 {
		content = emptyObject
	}
	var sig []byte
	if len(key) > 0 {
		mac := hmac.New(sha256.New, key)
		for _, p := range [][]byte{header, parent, metadata, content} {
			mac.Write(p)
		}
		sig = hex.AppendEncode(nil, mac.Sum(nil))
	}
	frames := [][]byte{idsMsg, sig, header, parent, metadata, content}
	return append(frames, m.Buffers...)
}

// ReadMessage reads one message from z, a kernel's socket of the given
// channel, and hands what it holds to emit: up to its delimiter, the
// signature (not checked, nor kept: the kernel is the sandbox's own, and
// whoever could send in its place has its key), then header, parent
// header, metadata, content and buffers. It returns an error only when z
// fails; a message that is not a Jupyter message (no delimiter, truncated,
// a header that is not JSON) is skipped, nothing emitted.
//
// The socket bounds what one message may cost (zmtpMessageBudget: about
// wholeFrameLimit, in at most maxMessageParts frames) and fails with
// ErrMessageBound when a message goes over it. A message that fits is read
// whole, with no Channel (emit sets the one it wants); one whose content
// does not goes through ReadFrame's bounded decoding (log is ReadFrame's),
// as the JSON the WebSocket would have carried (buffers dropped, as
// there); one whose envelope does not is dropped, and so are buffers that
// do not.
func ReadMessage(z *Conn, channel string, log *slog.Logger, emit func(*Message)) error {
	var f zframe
	var err error
	for { // routing frames (iopub's topic), then the delimiter
		if f, err = z.next(); err != nil {
			return err
		}
		b, ok, err := f.readSmall(len(idsMsg)) // a longer frame is not the delimiter
		if err != nil {
			return err
		}
		if ok && bytes.Equal(b, idsMsg) {
			break
		}
		if !f.more {
			return nil // no delimiter: not a Jupyter message
		}
	}
	var parts [4][]byte // header, parent, metadata: small; content: maybe not
	whole := true
	for i := -1; i < 4; i++ { // -1: the signature
		if !f.more {
			return nil // truncated message
		}
		if f, err = z.next(); err != nil {
			return err
		}
		if i < 0 {
			if err := f.skip(); err != nil {
				return err
			}
			continue
		}
		if i == 3 && f.size > z.room() {
			whole = false
			break
		}
		limit := maxEnvelopeValue
		if i == 3 {
			limit = zmtpMessageBudget
		}
		b, ok, err := f.readSmall(limit)
		if err != nil {
			return err
		}
		if !ok {
			return skipRest(z, f) // an envelope too big to route
		}
		parts[i] = b
	}
	if !whole {
		js := io.MultiReader(
			strings.NewReader(`{"channel":"`+channel+`","header":`), bytes.NewReader(parts[0]),
			strings.NewReader(`,"parent_header":`), bytes.NewReader(parts[1]),
			strings.NewReader(`,"metadata":`), bytes.NewReader(parts[2]),
			strings.NewReader(`,"content":`), f.body, strings.NewReader(`,"buffers":[]}`))
		if err := ReadFrame(false, js, log, emit); err != nil {
			return err
		}
		if err := f.skip(); err != nil {
			return err
		}
		return skipRest(z, f)
	}
	m := &Message{Metadata: parts[2], Content: parts[3]}
	if json.Unmarshal(parts[0], &m.Header) != nil {
		return skipRest(z, f)
	}
	_ = json.Unmarshal(parts[1], &m.ParentHeader) // {} for none
	for f.more {
		if f, err = z.next(); err != nil {
			return err
		}
		b, ok, err := f.readSmall(zmtpMessageBudget)
		if err != nil {
			return err
		}
		if !ok {
			m.Buffers = nil // too big in all: dropped, as the WebSocket's reader does
			if err := skipRest(z, f); err != nil {
				return err
			}
			break
		}
		m.Buffers = append(m.Buffers, b)
	}
	emit(m)
	return nil
}

// skipRest discards the frames of the message after f.
func skipRest(z *Conn, f zframe) error {
	for f.more {
		var err error
		if f, err = z.next(); err != nil {
			return err
		}
		if err := f.skip(); err != nil {
			return err
		}
	}
	return nil
}
