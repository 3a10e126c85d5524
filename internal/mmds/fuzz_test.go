package mmds_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/envd-dev/envd/internal/mmds"
)

// fakeMMDS answers the token request with token and the document request
// with doc, as Content-Type ct; it keeps the token the client sent back.
type fakeMMDS struct {
	token, doc []byte
	ct         string
	sent       []string // the X-metadata-token of each document request
}

func (f *fakeMMDS) RoundTrip(req *http.Request) (*http.Response, error) {
	body := f.token
	h := http.Header{}
	if req.Method == http.MethodGet {
		body = f.doc
		f.sent = append(f.sent, req.Header.Get("X-metadata-token"))
		if f.ct != "" {
			h.Set("Content-Type", f.ct)
		}
	}
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Header: h, ContentLength: -1,
		Body: io.NopCloser(bytes.NewReader(body)), Request: req}, nil
}

// checkField fails t unless s can be an environment variable's value and
// a log attribute, within max bytes (0: any).
func checkField(t *testing.T, name, s string, max int) {
	t.Helper()
	if max > 0 && len(s) > max {
		t.Fatalf("%s of %d bytes", name, len(s))
	}
	if !utf8.ValidString(s) || strings.ContainsFunc(s, unicode.IsControl) {
		t.Fatalf("%s %q", name, s)
	}
}

// FuzzGet: whatever the MMDS answers (it is the host's, but a guest's
// network can be made to answer in its place), a session token goes back
// only when it is one printable header value, and the metadata, when it
// is read, holds ids within MaxIDBytes and values without control
// characters or invalid UTF-8; served again as JSON, it reads the same.
func FuzzGet(f *testing.F) {
	hash := mmds.HashToken("secret")
	for _, s := range [][3]string{
		{"tok", `{"instanceID":"sbx-1","envID":"tpl","address":"http://logs:8080","accessTokenHash":"` + hash + `"}`, "application/json"},
		{" tok\n", `{"instanceID":null,"envID":"","extra":{"x":[1,2]}}`, ""},
		{"t\x00k", `{"instanceID":"a"}`, "application/json"},
		{"tok", `{"instanceID":"a\nb"}`, "application/json; charset=utf-8"},
		{"tok", `{"instanceID":"` + strings.Repeat("x", 300) + `"}`, "application/json"},
		{"tok", `{"instanceID":1}`, "application/json"},
		{"tok", `{"instanceID":"\ud800"}`, "application/json"},
		{"tok", `{"instanceID":"é","InstanceID":"x","instanceID":"last"}`, "application/json"},
		{"tok", `<html>not json</html>`, "text/html"},
		{"tok", `{"instanceID":"a"}`, "application/json;;"},
		{"", `{}`, "application/json"},
		{"tok", strings.Repeat(" ", 70<<10) + "{}", "application/json"},
	} {
		f.Add([]byte(s[0]), []byte(s[1]), s[2])
	}
	f.Fuzz(func(t *testing.T, token, doc []byte, ct string) {
		fake := &fakeMMDS{token: token, doc: doc, ct: ct}
		c, err := mmds.New(mmds.DefaultURL, mmds.Options{Transport: fake})
		if err != nil {
			t.Fatal(err)
		}
		m, err := c.Get(context.Background())
		for _, sent := range fake.sent {
			if sent == "" || strings.ContainsFunc(sent, func(r rune) bool { return r < 0x21 || r > 0x7e }) || sent != strings.TrimSpace(string(token)) {
				t.Fatalf("token %q sent back as %q", token, sent)
			}
		}
		if err != nil {
			return
		}
		if len(fake.sent) != 1 || len(doc) > mmds.MaxMetadataBytes {
			t.Fatalf("metadata of %d bytes read, %d requests", len(doc), len(fake.sent))
		}
		checkField(t, "instanceID", m.SandboxID, mmds.MaxIDBytes)
		checkField(t, "envID", m.TemplateID, mmds.MaxIDBytes)
		checkField(t, "address", m.LogsAddress, 0)
		checkField(t, "accessTokenHash", m.AccessTokenHash, 0)
		again, _ := json.Marshal(m)
		fake.doc, fake.ct = again, "application/json"
		if back, err := c.Get(context.Background()); err != nil || back != m {
			t.Fatalf("metadata %+v served again as %s: %+v, %v", m, again, back, err)
		}
		if ok, err := mmds.MatchToken(m.AccessTokenHash, "secret"); ok != (err == nil && strings.EqualFold(m.AccessTokenHash, hash)) {
			t.Fatalf("MatchToken(%q, secret) = %v, %v", m.AccessTokenHash, ok, err)
		}
	})
}
