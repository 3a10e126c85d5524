package e2e_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/internal/testutil"
)

// TestUpstreamFlags: upstream's command line means what it means upstream.
// kubernetes-sigs/agent-sandbox runs `envd --isnotfc --no-cgroups --port
// 49983 --verbose`: not a Firecracker guest (no MMDS read, E2B_SANDBOX=false
// for processes), no cgroups (/freeze answers 501), the log on stdout.
func TestUpstreamFlags(t *testing.T) {
	t.Parallel()
	var mmdsHits atomic.Int64
	mmds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mmdsHits.Add(1)
		http.Error(w, "not here", http.StatusNotFound)
	}))
	t.Cleanup(mmds.Close)

	tests := []struct {
		name        string
		args        []string
		sandbox     string // E2B_SANDBOX a process sees
		freeze      int    // POST /freeze's status
		logToStdout bool
		readsMMDS   bool
	}{
		{name: "upstream's agent-sandbox line", args: []string{"--isnotfc", "--no-cgroups", "--verbose"}, sandbox: "false", freeze: http.StatusNotImplemented, logToStdout: true},
		{name: "a Firecracker guest's (no flags)", args: nil, sandbox: "true", freeze: http.StatusNoContent, readsMMDS: true},
		{name: "cgroups under another root", args: []string{"-cgroup-root", "/no/such/cgroupfs"}, sandbox: "true", freeze: http.StatusNotImplemented, readsMMDS: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := mmdsHits.Load()
			stdout := &syncBuffer{}
			// The MMDS is a fake on loopback: -mmds-url after the flags
			// under test, which -isnotfc must still turn off.
			e := startEnvd(t, startOptions{stdout: stdout, args: append(append([]string{}, tt.args...), "-mmds-url", mmds.URL)})
			ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
			defer cancel()

			out, end, err := run(ctx, processClient(httpClient(t), e.url), &pb.StartRequest{Process: &pb.ProcessConfig{
				Cmd: "/bin/sh", Args: []string{"-c", `printf %s "$E2B_SANDBOX"`},
			}})
			if err != nil || end.GetExitCode() != 0 {
				t.Fatalf("run: %v, end %v\n%s", err, end, e.stderr)
			}
			if out != tt.sandbox {
				t.Errorf("E2B_SANDBOX=%q, want %q", out, tt.sandbox)
			}

			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/freeze", nil)
			resp, err := httpClient(t).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.freeze {
				t.Errorf("POST /freeze: %d, want %d", resp.StatusCode, tt.freeze)
			}
			if resp.StatusCode == http.StatusNoContent {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/unfreeze", nil)
				if resp, err := httpClient(t).Do(req); err != nil {
					t.Fatal(err)
				} else if resp.Body.Close(); resp.StatusCode != http.StatusNoContent {
					t.Errorf("POST /unfreeze: %d", resp.StatusCode)
				}
			}

			logged := func(s string) bool { return strings.Contains(s, "envd started") }
			if tt.logToStdout {
				if !logged(stdout.String()) || logged(e.stderr.String()) {
					t.Errorf("the log is not on stdout alone:\nstdout:\n%s\nstderr:\n%s", stdout, e.stderr)
				}
			} else if !logged(e.stderr.String()) || stdout.String() != "" {
				t.Errorf("the log is not on stderr alone:\nstdout:\n%s\nstderr:\n%s", stdout, e.stderr)
			}
			if tt.readsMMDS {
				if !testutil.PollFor(requestTimeout, func() bool { return mmdsHits.Load() > before }) {
					t.Errorf("envd never asked the MMDS")
				}
			}
			if strings.Contains(tt.name, "another root") && !strings.Contains(e.stderr.String(), "/no/such/cgroupfs") {
				t.Errorf("envd does not say why it runs without cgroups:\n%s", e.stderr)
			}
		})
	}
	// -isnotfc's envd against a fake MMDS of its own, which it must never
	// ask (the parallel cases above share theirs).
	t.Run("isnotfc reads no MMDS", func(t *testing.T) {
		var hits atomic.Int64
		alone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			http.Error(w, "not here", http.StatusNotFound)
		}))
		defer alone.Close()
		e := startEnvd(t, startOptions{args: []string{"--isnotfc", "-mmds-url", alone.URL}})
		// A command round trip: envd has been up past its first MMDS read.
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		if _, _, err := run(ctx, processClient(httpClient(t), e.url), &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/true"}}); err != nil {
			t.Fatal(err)
		}
		if n := hits.Load(); n != 0 {
			t.Errorf("envd -isnotfc asked the MMDS %d times", n)
		}
	})
}
