package server_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
)

// TestWriteReason: an HTTP/1 client sees the reason in the status line
// (what the code-interpreter SDK shows), with the body and headers of an
// ordinary answer, and the request log has it; HTTP/2 gets the ordinary
// answer.
func TestWriteReason(t *testing.T) {
	t.Parallel()
	ts, _ := newTestServer(t, serverOptions{})
	const want = `400 unsupported language "cobol"; available: python ?`
	for _, body := range [][]byte{nil, bytes.Repeat([]byte("x"), 10<<10)} {
		resp, got := do(t, ts.h1, http.MethodPost, ts.url+"/reason", nil, body)
		if resp.Status != want || string(got) != "the body" || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" ||
			resp.Header.Get("X-Content-Type-Options") != "nosniff" || !resp.Close {
			t.Errorf("HTTP/1.1 with a %d-byte body: %q %q %v close=%v", len(body), resp.Status, got, resp.Header, resp.Close)
		}
	}
	resp, got := do(t, ts.h2c, http.MethodPost, ts.url+"/reason", nil, nil)
	if resp.Status != "400 Bad Request" || string(got) != "the body" || resp.ProtoMajor != 2 {
		t.Errorf("HTTP/2: %q %q", resp.Status, got)
	}
	logs := ts.logs.String()
	if !strings.Contains(logs, `path=/reason status=400`) || !strings.Contains(logs, `reason="the body"`) {
		t.Errorf("request log:\n%s", logs)
	}
}
