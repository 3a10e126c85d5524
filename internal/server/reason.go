package server

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
)

// maxReason bounds a reason phrase written by WriteReason.
const maxReason = 300

// WriteReason writes an error answer whose HTTP/1 status line carries
// reason as its reason phrase, "HTTP/1.1 400 unsupported language ..."
// rather than "400 Bad Request": the code-interpreter SDK shows only
// `${status} ${statusText}` of an error answer, so the phrase is the one
// place where its users see why. The body, headers and logging are as
// http.Error's would be; the connection closes after the answer (it is
// taken from net/http to write the status line).
//
// The rest of the request's body is read first (closing a connection with
// unread input resets it, and the client may lose the answer). HTTP/2 has
// no reason phrases: there, for a body too large to drain, and when the
// connection cannot be taken, the answer is written the ordinary way.
func WriteReason(w http.ResponseWriter, r *http.Request, status int, contentType string, body []byte, reason string) {
	phrase := reasonPhrase(reason)
	if r.ProtoMajor != 1 || phrase == "" || !drained(r) {
		writePlain(w, status, contentType, body)
		return
	}
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writePlain(w, status, contentType, body)
		return
	}
	defer conn.Close()
	recordError(w, status, body)
	fmt.Fprintf(rw, "HTTP/1.1 %03d %s\r\n", status, phrase)
	// Headers set before (CORS's Access-Control-Allow-Origin and Vary):
	// a browser drops an answer without them.
	keys := make([]string, 0, len(w.Header()))
	for k := range w.Header() {
		switch http.CanonicalHeaderKey(k) {
		case "Content-Type", "Content-Length", "X-Content-Type-Options", "Connection", "Transfer-Encoding":
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range w.Header()[k] {
			if strings.ContainsAny(k+v, "\r\n") {
				continue
			}
			fmt.Fprintf(rw, "%s: %s\r\n", k, v)
		}
	}
	fmt.Fprintf(rw, "Content-Type: %s\r\nX-Content-Type-Options: nosniff\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", contentType, len(body))
	_, _ = rw.Write(body)
	_ = rw.Flush()
}

// maxDrain bounds what WriteReason reads of a body left unread.
const maxDrain = 64 << 10

// drained reads what is left of r's body; false if more than maxDrain.
func drained(r *http.Request) bool {
	if r.Body == nil || r.Body == http.NoBody {
		return true
	}
	n, err := io.Copy(io.Discard, io.LimitReader(r.Body, maxDrain+1))
	return err == nil && n <= maxDrain
}

func writePlain(w http.ResponseWriter, status int, contentType string, body []byte) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// reasonPhrase makes s a valid reason phrase (RFC 9112: spaces, tabs and
// visible characters): one line, printable ASCII (others become '?'),
// at most maxReason bytes.
func reasonPhrase(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	var b strings.Builder
	for _, c := range s {
		if b.Len() >= maxReason {
			break
		}
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		b.WriteRune(c)
	}
	return b.String()
}

// recordError tells the request log (statusWriter, somewhere under w)
// what was answered, since it does not pass through it.
func recordError(w http.ResponseWriter, status int, body []byte) {
	for {
		if sw, ok := w.(*statusWriter); ok {
			sw.status = status
			sw.errBody = append(sw.errBody[:0], body[:min(len(body), errBodyMax)]...)
			return
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		w = u.Unwrap()
	}
}
