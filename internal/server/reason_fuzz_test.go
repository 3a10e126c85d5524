package server

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
)

// FuzzReasonPhrase: whatever a reason says (the code-interpreter API puts
// a client's own field names and values in it), its phrase is one line
// of printable ASCII within maxReason bytes, and the status line
// WriteReason writes with it is read by net/http as that status and
// phrase, the headers after it as written: no line break, no header of
// the client's making.
func FuzzReasonPhrase(f *testing.F) {
	for _, s := range []string{
		`unsupported language "cobol"; available: python é`,
		"invalid request: body.env_vars.k\r\nX-Injected: 1\r\n\r\n: Input should be a valid string",
		"  spaces\tand\ttabs\v\f \u0085 \u00a0 ",
		strings.Repeat("é", 400),
		"\x00\x7f\xff",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, reason string) {
		p := reasonPhrase(reason)
		if len(p) > maxReason || strings.HasPrefix(p, " ") || strings.Contains(p, "  ") {
			t.Fatalf("reasonPhrase(%q) = %q", reason, p)
		}
		for i := 0; i < len(p); i++ {
			if p[i] < 0x20 || p[i] > 0x7e {
				t.Fatalf("reasonPhrase(%q) = %q: byte %#x", reason, p, p[i])
			}
		}
		if p == "" {
			return
		}
		wire := "HTTP/1.1 400 " + p + "\r\nContent-Type: text/plain\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
		res, err := http.ReadResponse(bufio.NewReader(strings.NewReader(wire)), nil)
		if err != nil {
			t.Fatalf("status line %q: %v", wire, err)
		}
		res.Body.Close()
		if res.StatusCode != 400 || res.Status != "400 "+p || len(res.Header) != 2 {
			t.Fatalf("status line of %q read as %q, headers %v", p, res.Status, res.Header)
		}
	})
}
