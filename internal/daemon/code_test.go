package daemon_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/envd-dev/envd/internal/daemon"
)

// With -no-jupyter the code API is still routed on the main port, and
// answers 503 saying why; envd's own /health is untouched.
func TestCodeRoutesWithoutJupyter(t *testing.T) {
	t.Parallel()
	r := start(t, daemon.Config{})
	c := tcpClient(t)
	for _, rt := range [][2]string{
		{"POST", "/execute"}, {"GET", "/contexts"}, {"POST", "/contexts"},
		{"DELETE", "/contexts/x"}, {"POST", "/contexts/x/restart"},
	} {
		req, _ := http.NewRequest(rt[0], "http://"+r.tcp+rt[1], strings.NewReader(`{"code": "1"}`))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "-no-jupyter") {
			t.Errorf("%s %s: %d %s", rt[0], rt[1], resp.StatusCode, b)
		}
	}
	if status, err := getHealth(c, "http://"+r.tcp); err != nil || status != http.StatusNoContent {
		t.Errorf("GET /health: %d %v", status, err)
	}
}
