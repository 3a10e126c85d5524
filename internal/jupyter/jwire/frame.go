package jwire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Kernel messages are read from the WebSocket as a stream, so that what a
// kernel prints cannot make envd hold more than a bounded amount of it.
//
// A frame of up to wholeFrameLimit bytes (every message of up to
// MaxMessageBytes of output, with its envelope) is read whole and becomes
// one Message, byte for byte. A bigger frame is decoded while it is read:
//   - the text of a "stream" message is delivered as consecutive stream
//     messages of about streamChunk bytes each, so a reader that keeps up
//     gets every byte of a print of any size;
//   - in any other message, strings are cut once the message holds
//     MaxMessageBytes, each cut string ending with a marker that says how
//     many bytes were dropped (Message.Dropped counts them too);
//   - binary buffers of an oversized frame are dropped.
const (
	// MaxMessageBytes is the most of one kernel message delivered whole.
	MaxMessageBytes = 16 << 20
	// wholeFrameLimit leaves room for the envelope (header, JSON escapes)
	// around MaxMessageBytes of output.
	wholeFrameLimit = MaxMessageBytes + 1<<20
	// streamChunk is the size of the pieces a big print is delivered in.
	streamChunk = 1 << 20
	// maxEnvelopeValue bounds a header, parent header, metadata or any
	// other field but content of an oversized frame. A message with a
	// bigger one is dropped: it cannot be routed safely.
	maxEnvelopeValue = 1 << 20
	// structSlack is how far non-string JSON (numbers, punctuation) may
	// take an oversized message past MaxMessageBytes before its content is
	// given up on.
	structSlack = 1 << 20
	// shortString is what any string of an oversized message may keep.
	shortString = 1 << 10
	// maxMessageParts bounds the parts of one message, checked before
	// anything is allocated for them: the JSON and buffers of a binary
	// WebSocket frame, the ZeroMQ frames (routing identities, delimiter,
	// signature, header, parent header, metadata, content, buffers) of one
	// read from a kernel's own socket (zmtp.go). A real kernel sends a
	// handful.
	maxMessageParts = 1 << 16
)

var (
	errTooLarge   = errors.New("kernel message too large")
	errBadMessage = errors.New("malformed kernel message")
)

// ReadFrame reads one WebSocket message from r, a binary frame if
// binaryFrame, and hands the Messages it holds to emit. It returns an
// error only if r fails (the connection is broken); an undecodable message
// is dropped, and logged to log (nil: not logged), as is an oversized one
// decoded as a stream.
func ReadFrame(binaryFrame bool, r io.Reader, log *slog.Logger, emit func(*Message)) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	head, err := io.ReadAll(io.LimitReader(r, wholeFrameLimit+1))
	if err != nil {
		return err
	}
	if len(head) <= wholeFrameLimit {
		var m *Message
		if binaryFrame {
			m, err = decodeBinary(head)
		} else {
			m, err = decodeText(head)
		}
		if err != nil {
			log.Debug("dropping undecodable kernel message", "error", err)
			return nil
		}
		emit(m)
		return nil
	}
	cr := &countingReader{r: io.MultiReader(bytes.NewReader(head), r)}
	d := &bigDecoder{br: bufio.NewReaderSize(cr, 64<<10), emit: emit}
	if binaryFrame {
		err = d.decodeBinary()
	} else {
		err = d.decodeObject()
	}
	// Read the rest, so the connection moves on to the next message.
	if _, cerr := io.Copy(io.Discard, cr); cerr != nil {
		return cerr
	}
	if err != nil {
		if cr.err != nil {
			return cr.err
		}
		log.Warn("dropping undecodable oversized kernel message", "error", err, "bytes", cr.n)
		return nil
	}
	log.Debug("decoded an oversized kernel message as a stream", "bytes", cr.n)
	return nil
}

// countingReader counts bytes and remembers the underlying read error, to
// tell a broken connection from a malformed message.
type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && !errors.Is(err, io.EOF) {
		c.err = err
	}
	return n, err
}

// bigDecoder decodes one oversized frame while reading it.
type bigDecoder struct {
	br   *bufio.Reader
	emit func(*Message)
}

// decodeBinary decodes the binary layout of decodeBinary (message.go):
// the JSON part is decoded as a stream, the buffers are dropped.
func (d *bigDecoder) decodeBinary() error {
	var hdr [4]byte
	if _, err := io.ReadFull(d.br, hdr[:]); err != nil {
		return errBadFrame
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > maxMessageParts {
		return errBadFrame
	}
	offs := make([]uint32, n)
	for i := range offs {
		if _, err := io.ReadFull(d.br, hdr[:]); err != nil {
			return errBadFrame
		}
		offs[i] = binary.BigEndian.Uint32(hdr[:])
	}
	start := uint32(4 + 4*n)
	if offs[0] < start {
		return errBadFrame
	}
	if _, err := d.br.Discard(int(offs[0] - start)); err != nil {
		return errBadFrame
	}
	jsonPart := io.Reader(d.br)
	if n > 1 {
		if offs[1] < offs[0] {
			return errBadFrame
		}
		jsonPart = io.LimitReader(d.br, int64(offs[1]-offs[0]))
	}
	// The buffers come after the JSON part; they are not kept (Buffers is
	// nil): a message that big has lost its meaning anyway.
	inner := &bigDecoder{br: bufio.NewReaderSize(jsonPart, 64<<10), emit: d.emit}
	return inner.decodeObject()
}

// decodeObject decodes one message object and emits it (or, for a big
// stream message, its pieces).
func (d *bigDecoder) decodeObject() error {
	var (
		w          wireMessage
		parent     Header
		parentSeen bool
		dropped    int64
		streamed   bool
		unroutable bool
	)
	if err := d.skipWS(); err != nil { // as encoding/json allows
		return err
	}
	if err := d.expect('{'); err != nil {
		return err
	}
	for first := true; ; first = false {
		key, end, err := d.nextKey(first)
		if err != nil {
			return err
		}
		if end {
			break
		}
		switch key {
		case "content":
			if p, _ := d.br.Peek(1); w.Header.MsgType == "stream" && parentSeen && string(p) == "{" {
				if err := d.streamContent(&w, parent); err != nil {
					return err
				}
				streamed = true
				continue
			}
			var buf bytes.Buffer
			n, err := d.copyValue(&buf, MaxMessageBytes, rawMarker)
			switch {
			case errors.Is(err, errTooLarge):
				w.Content, dropped = emptyObject, dropped+n
			case err != nil:
				return err
			default:
				w.Content, dropped = buf.Bytes(), dropped+n
			}
		default:
			var buf bytes.Buffer
			_, err := d.copyValue(&buf, maxEnvelopeValue, rawMarker)
			if errors.Is(err, errTooLarge) {
				unroutable = true
				continue
			}
			if err != nil {
				return err
			}
			raw := buf.Bytes()
			switch key {
			case "header":
				if json.Unmarshal(raw, &w.Header) != nil {
					unroutable = true
				}
			case "parent_header":
				w.ParentHeader = raw
				if len(raw) > 0 && string(raw) != "null" && json.Unmarshal(raw, &parent) != nil {
					unroutable = true
				}
				parentSeen = true
			case "metadata":
				w.Metadata = raw
			case "channel":
				if json.Unmarshal(raw, &w.Channel) != nil {
					unroutable = true
				}
			}
		}
	}
	if unroutable {
		return fmt.Errorf("%w: a header field over %d bytes", errBadMessage, maxEnvelopeValue)
	}
	if streamed {
		return nil
	}
	m, err := w.message()
	if err != nil {
		return err
	}
	m.Dropped = dropped
	d.emit(m)
	return nil
}

// nextKey reads, inside a JSON object whose '{' was read, up to the next
// member's value: its key, or end at the object's '}'. first tells whether
// a member came before (a ',' must separate them).
func (d *bigDecoder) nextKey(first bool) (key string, end bool, err error) {
	if err := d.skipWS(); err != nil {
		return "", false, err
	}
	c, err := d.br.ReadByte()
	if err != nil {
		return "", false, errBadMessage
	}
	if c == '}' {
		return "", true, nil
	}
	if !first {
		if c != ',' {
			return "", false, errBadMessage
		}
		if err := d.skipWS(); err != nil {
			return "", false, err
		}
		if c, err = d.br.ReadByte(); err != nil {
			return "", false, errBadMessage
		}
	}
	if c != '"' {
		return "", false, errBadMessage
	}
	if key, err = d.readKey(); err != nil {
		return "", false, err
	}
	if err := d.skipWS(); err != nil {
		return "", false, err
	}
	if err := d.expect(':'); err != nil {
		return "", false, err
	}
	return key, false, d.skipWS()
}

// streamContent decodes a stream message's content, emitting its text in
// pieces of streamChunk bytes. If the stream's name comes after the text,
// the text is kept up to MaxMessageBytes and the rest dropped.
func (d *bigDecoder) streamContent(w *wireMessage, parent Header) error {
	var (
		name       string
		pending    []byte // decoded text, when the name came after it
		pendingRaw []byte // escaped text, when the name came first
		dropped    int64
		emitted    bool
	)
	emitContent := func(content []byte) {
		d.emit(&Message{
			Channel:      ChannelIOPub, // the protocol's only channel for streams
			Header:       w.Header,
			ParentHeader: parent,
			Metadata:     w.Metadata,
			Content:      content,
		})
		emitted = true
	}
	send := func(text []byte) {
		content, _ := json.Marshal(StreamContent{Name: name, Text: string(text)})
		emitContent(content)
	}
	sendRaw := func(raw []byte) {
		qname, _ := json.Marshal(name)
		content := make([]byte, 0, len(raw)+len(qname)+20)
		content = append(content, `{"name": `...)
		content = append(content, qname...)
		content = append(content, `, "text": "`...)
		content = append(content, raw...)
		content = append(content, `"}`...)
		emitContent(content)
	}
	if err := d.expect('{'); err != nil {
		return err
	}
	for first := true; ; first = false {
		key, end, err := d.nextKey(first)
		if err != nil {
			return err
		}
		if end {
			break
		}
		if key != "text" {
			var buf bytes.Buffer
			if _, err := d.copyValue(&buf, maxEnvelopeValue, rawMarker); err != nil {
				return err
			}
			if key == "name" {
				_ = json.Unmarshal(buf.Bytes(), &name)
			}
			continue
		}
		if err := d.expect('"'); err != nil {
			return err
		}
		if name != "" {
			// The usual order (ipykernel, IRkernel): the name is known, so
			// the text passes through still escaped, in pieces.
			err = d.scanString(func(raw, text []byte) {
				if text != nil { // one escape: never split
					pendingRaw = append(pendingRaw, raw...)
				}
				for text == nil && len(raw) > 0 {
					n := len(raw)
					if room := streamChunk - len(pendingRaw); n > room {
						n = max(runeCut(raw, max(room, 0)), 0)
					}
					pendingRaw = append(pendingRaw, raw[:n]...)
					raw = raw[n:]
					if len(raw) > 0 || len(pendingRaw) >= streamChunk {
						sendRaw(pendingRaw)
						pendingRaw = pendingRaw[:0]
					}
				}
				if len(pendingRaw) >= streamChunk {
					sendRaw(pendingRaw)
					pendingRaw = pendingRaw[:0]
				}
			})
		} else {
			err = d.scanString(func(raw, text []byte) {
				if text == nil {
					text = raw
				}
				room := max(MaxMessageBytes-len(pending), 0)
				if len(text) > room {
					keep := runeCut(text, room)
					dropped += int64(len(text) - keep)
					text = text[:keep]
				}
				pending = append(pending, text...)
			})
		}
		if err != nil {
			return err
		}
	}
	if name == "" {
		name = "stdout"
	}
	if len(pendingRaw) > 0 {
		sendRaw(pendingRaw)
	}
	if dropped > 0 {
		pending = append(pending, textMarker(dropped)...)
	}
	if len(pending) > 0 || !emitted {
		send(pending)
	}
	return nil
}

func rawMarker(n int64) string {
	return `\n[envd: ` + strconv.FormatInt(n, 10) + ` bytes dropped: a kernel message is limited to ` +
		strconv.Itoa(MaxMessageBytes>>20) + ` MiB]\n`
}

func textMarker(n int64) string {
	return "\n[envd: " + strconv.FormatInt(n, 10) + " bytes dropped: a kernel message is limited to " +
		strconv.Itoa(MaxMessageBytes>>20) + " MiB]\n"
}

// runeCut returns the largest n <= limit such that b[:n] does not end
// inside a UTF-8 sequence.
func runeCut(b []byte, limit int) int {
	if limit >= len(b) {
		return len(b)
	}
	n := limit
	for n > 0 && n > limit-utf8.UTFMax && !utf8.RuneStart(b[n]) {
		n--
	}
	if !utf8.RuneStart(b[n]) {
		return limit // not UTF-8 anyway
	}
	return n
}

// readKey reads the rest of an object key (its opening quote was read).
// Keys we know are short; a longer one is cut, it matches nothing anyway.
func (d *bigDecoder) readKey() (string, error) {
	var key []byte
	err := d.scanString(func(raw, text []byte) {
		if text == nil {
			text = raw
		}
		if len(key) < 64 {
			key = append(key, text[:min(len(text), 64-len(key))]...)
		}
	})
	return string(key), err
}

func (d *bigDecoder) expect(c byte) error {
	b, err := d.br.ReadByte()
	if err != nil || b != c {
		return errBadMessage
	}
	return nil
}

func (d *bigDecoder) skipWS() error {
	for {
		b, err := d.br.ReadByte()
		if err != nil {
			return errBadMessage
		}
		switch b {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return d.br.UnreadByte()
	}
}

// copyValue copies one JSON value (after any whitespace) to out. A string
// that would take out past budget is cut at a character boundary and ends
// with marker(n), n being the bytes cut. If non-string bytes take out past
// budget+structSlack, the rest of the value is read but not kept and
// errTooLarge is returned. It returns the bytes cut from strings.
func (d *bigDecoder) copyValue(out *bytes.Buffer, budget int, marker func(int64) string) (int64, error) {
	var dropped int64
	skip := false
	depth := 0
	for {
		c, err := d.br.ReadByte()
		if err != nil {
			return dropped, errBadMessage
		}
		switch c {
		case '"':
			n, err := d.copyString(out, budget, marker, skip)
			if err != nil {
				return dropped, err
			}
			dropped += n
		case '{', '[':
			depth++
			if !skip {
				out.WriteByte(c)
			}
		case '}', ']':
			depth--
			if !skip {
				out.WriteByte(c)
			}
		default:
			if !skip {
				out.WriteByte(c)
			}
			if depth == 0 { // a scalar: read to its end
				for {
					b, err := d.br.ReadByte()
					if err != nil {
						return dropped, errBadMessage
					}
					if bytes.IndexByte([]byte(",}] \t\r\n"), b) >= 0 {
						_ = d.br.UnreadByte()
						break
					}
					if !skip {
						out.WriteByte(b)
					}
				}
			}
		}
		if !skip && out.Len() > budget+structSlack {
			skip = true
		}
		if depth < 0 {
			return dropped, errBadMessage
		}
		if depth == 0 {
			if skip {
				return dropped, errTooLarge
			}
			return dropped, nil
		}
	}
}

// copyString copies the rest of a string (its opening quote was read) to
// out, quotes included, as raw JSON. Once out would pass budget, the rest
// is not kept: the string ends with marker(n) instead, n being the number
// of (decoded) bytes cut, which is returned. With skip, nothing is written.
func (d *bigDecoder) copyString(out *bytes.Buffer, budget int, marker func(int64) string, skip bool) (int64, error) {
	if !skip {
		out.WriteByte('"')
	}
	cut := false
	var dropped int64
	// Every string may keep shortString bytes, so that the short fields
	// after a long one ("status" after "evalue") survive.
	limit := max(budget, out.Len()+shortString)
	err := d.scanString(func(raw, text []byte) {
		decoded := len(raw)
		if text != nil {
			decoded = len(text)
		}
		switch {
		case skip:
		case cut:
			dropped += int64(decoded)
		case out.Len()+len(raw) <= limit:
			out.Write(raw)
		case text != nil: // an escape does not fit
			cut = true
			dropped += int64(decoded)
		default:
			keep := runeCut(raw, max(limit-out.Len(), 0))
			out.Write(raw[:keep])
			cut = true
			dropped += int64(len(raw) - keep)
		}
	})
	if err != nil {
		return 0, err
	}
	if !skip {
		if cut && marker != nil {
			out.WriteString(marker(dropped))
		}
		out.WriteByte('"')
	}
	return dropped, nil
}

// scanString reads the rest of a JSON string (its opening quote was read)
// through its closing quote. It calls f with each piece in order: a run of
// plain bytes (text nil: they are the string's bytes), or one escape
// sequence (raw) with its decoded UTF-8 (text).
func (d *bigDecoder) scanString(f func(raw, text []byte)) error {
	var esc [12]byte
	var dec [utf8.UTFMax]byte
	for {
		if _, err := d.br.Peek(1); err != nil {
			return errBadMessage
		}
		buf, _ := d.br.Peek(d.br.Buffered())
		i := bytes.IndexAny(buf, "\"\\")
		plain := buf
		if i >= 0 {
			plain = buf[:i]
		}
		if len(plain) > 0 {
			f(plain, nil)
			_, _ = d.br.Discard(len(plain))
		}
		if i < 0 {
			continue
		}
		c, _ := d.br.ReadByte()
		if c == '"' {
			return nil
		}
		e, err := d.br.ReadByte()
		if err != nil {
			return errBadMessage
		}
		esc[0], esc[1] = '\\', e
		var r rune
		n := 2
		switch e {
		case '"', '\\', '/':
			r = rune(e)
		case 'b':
			r = '\b'
		case 'f':
			r = '\f'
		case 'n':
			r = '\n'
		case 'r':
			r = '\r'
		case 't':
			r = '\t'
		case 'u':
			h, err := d.hex4(esc[2:6])
			if err != nil {
				return err
			}
			n, r = 6, h
			if utf16.IsSurrogate(r) {
				r = utf8.RuneError
				if p, err := d.br.Peek(6); err == nil && p[0] == '\\' && p[1] == 'u' {
					if lo, err := parseHex4(p[2:6]); err == nil {
						if pair := utf16.DecodeRune(h, lo); pair != utf8.RuneError {
							copy(esc[6:12], p)
							_, _ = d.br.Discard(6)
							n, r = 12, pair
						}
					}
				}
			}
		default:
			return errBadMessage
		}
		m := utf8.EncodeRune(dec[:], r)
		f(esc[:n], dec[:m])
	}
}

func (d *bigDecoder) hex4(dst []byte) (rune, error) {
	if _, err := io.ReadFull(d.br, dst); err != nil {
		return 0, errBadMessage
	}
	return parseHex4(dst)
}

func parseHex4(b []byte) (rune, error) {
	v, err := strconv.ParseUint(string(b), 16, 32)
	if err != nil {
		return 0, errBadMessage
	}
	return rune(v), nil
}
