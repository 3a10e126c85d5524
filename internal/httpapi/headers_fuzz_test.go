package httpapi

import (
	"mime"
	"strings"
	"testing"
)

// FuzzFileHeaders: the headers GET /files reads from a client (Accept,
// Accept-Encoding) and the one it writes from a file's name, which
// sandbox code chooses (Content-Disposition). archiveKind answers one of
// the two archive types only when Accept names it; wantGzip refuses only
// when the client excluded the identity; and contentDisposition is one
// header line that reads back as inline, with the file's very name or
// none.
func FuzzFileHeaders(f *testing.F) {
	for _, s := range [][3]string{
		{"application/x-tar", "gzip", "a.txt"},
		{"application/zip;q=0.5, application/x-tar;q=0", "gzip;q=0, identity", "with space and \"quotes\""},
		{"*/*", "*;q=0", "été 漢字.txt"},
		{"application/zip;q=0.0,application/x-tar", "identity;q=0, *;q=0", "line\r\nX-Injected: 1"},
		{"text/html, application/ZIP", "x-gzip;q=0.9, identity;q=0.8", "bad\xffutf8"},
		{";;, ,", "gzip;q=nan", "nul\x00byte"},
		{"application/x-tar; q=1; q=0", "GZIP; Q=0.001", "semi;colon=equals"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, accept, acceptEncoding, name string) {
		switch kind := archiveKind(accept); kind {
		case "":
		case typeTar, typeZip:
			if !strings.Contains(strings.ToLower(accept), kind) {
				t.Fatalf("archiveKind(%q) = %q, not asked for", accept, kind)
			}
		default:
			t.Fatalf("archiveKind(%q) = %q", accept, kind)
		}

		gz, ok := wantGzip(acceptEncoding)
		if !ok && gz {
			t.Fatalf("wantGzip(%q): gzip without ok", acceptEncoding)
		}
		if strings.TrimSpace(acceptEncoding) == "" && (gz || !ok) {
			t.Fatalf("wantGzip(%q) = %v, %v, want identity", acceptEncoding, gz, ok)
		}
		if lower := strings.ToLower(acceptEncoding); gz && !strings.Contains(lower, "gzip") && !strings.Contains(lower, "*") {
			t.Fatalf("wantGzip(%q): gzip, not asked for", acceptEncoding)
		}
		if !ok && !strings.Contains(acceptEncoding, "0") {
			t.Fatalf("wantGzip(%q): refused without a q of 0", acceptEncoding)
		}

		cd := contentDisposition(name)
		if strings.ContainsAny(cd, "\r\n\x00") {
			t.Fatalf("contentDisposition(%q) = %q: not one header line", name, cd)
		}
		mt, params, err := mime.ParseMediaType(cd)
		if err != nil || mt != "inline" {
			t.Fatalf("contentDisposition(%q) = %q: reads back as %q, %v", name, cd, mt, err)
		}
		if fn, ok := params["filename"]; ok && fn != name {
			t.Fatalf("contentDisposition(%q) = %q: reads back as the name %q", name, cd, fn)
		}
	})
}
