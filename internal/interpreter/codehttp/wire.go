package codehttp

import (
	"strconv"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/envd-dev/envd/internal/interpreter"
)

// The /execute stream is NDJSON as E2B's server writes it with Python's
// json.dumps defaults: ", " and ": " separators and ensure_ascii, every
// rune >= U+0080 escaped as \uXXXX (surrogate pairs above U+FFFF). The
// ASCII-only output is load-bearing: the JS SDK decodes each network chunk
// on its own, so a UTF-8 sequence split across chunks would be corrupted.
// Raw MIME values are escaped the same way, byte-wise: in valid JSON,
// non-ASCII can only occur inside strings.

// appendEvent appends ev as one line (with its "\n").
func appendEvent(b []byte, ev interpreter.Event) []byte {
	switch ev.Kind {
	case interpreter.EventStarted:
		if !ev.Started.Counted {
			return b // made up: the count, if it comes, follows
		}
		b = append(b, `{"type": "number_of_executions", "execution_count": `...)
		b = strconv.AppendInt(b, int64(ev.Started.ExecutionCount), 10)
		b = append(b, '}')
	case interpreter.EventExecutionCount:
		b = append(b, `{"type": "number_of_executions", "execution_count": `...)
		b = strconv.AppendInt(b, int64(ev.ExecutionCount), 10)
		b = append(b, '}')
	case interpreter.EventStdout, interpreter.EventStderr:
		b = append(b, `{"type": "`...)
		b = append(b, ev.Kind.String()...)
		b = append(b, `", "text": `...)
		b = appendString(b, ev.Text)
		b = append(b, `, "timestamp": `...)
		b = appendString(b, ev.Timestamp)
		b = append(b, '}')
	case interpreter.EventResult:
		b = append(b, `{"type": "result"`...)
		fields, extra := ev.Result.Fields()
		for _, f := range fields {
			b = append(b, ", "...)
			b = appendString(b, f.Name)
			b = append(b, ": "...)
			b = appendRaw(b, f.Value)
		}
		b = append(b, `, "extra": {`...)
		for i, f := range extra {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendString(b, f.Name)
			b = append(b, ": "...)
			b = appendRaw(b, f.Value)
		}
		b = append(b, `}, "is_main_result": `...)
		b = strconv.AppendBool(b, ev.Result.IsMain)
		b = append(b, '}')
	case interpreter.EventError:
		b = append(b, `{"type": "error", "name": `...)
		b = appendString(b, ev.Error.Name)
		b = append(b, `, "value": `...)
		b = appendString(b, ev.Error.Value)
		b = append(b, `, "traceback": `...)
		b = appendString(b, ev.Error.Traceback)
		b = append(b, '}')
	case interpreter.EventNotice:
		// E2B's stream has no such event: a line on stderr, which the SDKs
		// show with the code's own (logs.stderr, onStderr).
		b = append(b, `{"type": "stderr", "text": `...)
		b = appendString(b, "[envd: "+ev.Notice.Text+"]\n")
		b = append(b, `, "timestamp": `...)
		b = appendString(b, interpreter.FormatTimestamp(ev.Notice.At.UTC().Format(time.RFC3339Nano)))
		b = append(b, '}')
	case interpreter.EventLost:
		// Not an error: the code's own outcome is still to come.
		b = append(b, `{"type": "stderr", "text": `...)
		b = appendString(b, "[envd: "+strconv.FormatInt(ev.Lost, 10)+
			" bytes of output were dropped because the client read too slowly]\n")
		b = append(b, `, "timestamp": `...)
		b = appendString(b, interpreter.FormatTimestamp(time.Now().UTC().Format(time.RFC3339Nano)))
		b = append(b, '}')
	case interpreter.EventEnd:
		// The caller writes end_of_execution; the reason was told by an
		// error event before.
		return b
	default:
		return b
	}
	return append(b, '\n')
}

const hex = "0123456789abcdef"

// appendString appends s as an ASCII-only JSON string.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < utf8.RuneSelf && c != '"' && c != '\\' {
			i++
			continue
		}
		b = append(b, s[start:i]...)
		if c < utf8.RuneSelf {
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = appendU(b, rune(c))
			}
			i++
		} else {
			r, size := utf8.DecodeRuneInString(s[i:])
			b = appendRune(b, r) // an invalid byte decodes as U+FFFD
			i += size
		}
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendRaw appends a raw JSON value with every non-ASCII rune escaped and
// any raw line break (whitespace between tokens) dropped, so the value
// cannot break the line.
func appendRaw(b []byte, raw []byte) []byte {
	start := 0
	for i := 0; i < len(raw); {
		c := raw[i]
		if c < utf8.RuneSelf && c != '\n' && c != '\r' {
			i++
			continue
		}
		b = append(b, raw[start:i]...)
		if c < utf8.RuneSelf {
			i++ // a line break between tokens
		} else {
			r, size := utf8.DecodeRune(raw[i:])
			b = appendRune(b, r)
			i += size
		}
		start = i
	}
	return append(b, raw[start:]...)
}

func appendRune(b []byte, r rune) []byte {
	if r >= 0x10000 {
		r1, r2 := utf16.EncodeRune(r)
		return appendU(appendU(b, r1), r2)
	}
	return appendU(b, r)
}

func appendU(b []byte, r rune) []byte {
	return append(b, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
}
