package daemon_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/envd-dev/envd/internal/daemon"
)

// TestDebugAddrRefused: -debug-addr takes a loopback IP:PORT only; any
// other address fails envd's start before it listens on anything.
func TestDebugAddrRefused(t *testing.T) {
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0", "10.1.2.3:0", "localhost:0", "127.0.0.1", "nonsense"} {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		err := daemon.Run(ctx, daemon.Config{
			Host: "127.0.0.1", NoJupyter: true, DebugAddr: addr,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		cancel()
		if err == nil || !strings.Contains(err.Error(), "want a loopback IP:PORT") {
			t.Errorf("DebugAddr %q: Run = %v, want it refused", addr, err)
		}
	}
}

// TestDebugGoroutines: with -debug-addr, the goroutine profile answers
// (what make soak reads), and cmdline, which may hold the token, does not.
func TestDebugGoroutines(t *testing.T) {
	r := start(t, daemon.Config{DebugAddr: "127.0.0.1:0"})
	var addr string
	r.logs.mu.Lock()
	for _, l := range r.logs.lines {
		if a, ok := l["debug_addr"].(string); ok {
			addr = a
		}
	}
	r.logs.mu.Unlock()
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("no debug_addr in the log:\n%s", r.logs)
	}
	c := tcpClient(t)
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := c.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("/debug/pprof/goroutine?debug=1")
	if code != http.StatusOK || !regexp.MustCompile(`^goroutine profile: total [1-9][0-9]*\n`).MatchString(body) {
		t.Errorf("goroutine profile: %d %.200q", code, body)
	}
	if code, _ := get("/debug/pprof/cmdline"); code == http.StatusOK {
		t.Errorf("/debug/pprof/cmdline answered %d, want it not served", code)
	}
}
