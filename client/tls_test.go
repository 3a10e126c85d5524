package client_test

import (
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/internal/testutil"
)

// TestTLS: an https Addr speaks TLS (here to a TLS proxy in front of envd,
// with HTTP/2 for the RPCs), verifies the certificate unless told not to,
// and an unknown scheme fails instead of speaking plain HTTP.
func TestTLS(t *testing.T) {
	t.Parallel()
	target, err := url.Parse(envdAddr)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1 // streams
	var mu sync.Mutex
	var protos []string // guarded by mu
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		protos = append(protos, r.Proto)
		mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake below
	ts.EnableHTTP2 = true
	ts.StartTLS()
	t.Cleanup(ts.Close)
	ctx := testContext(t, testutil.Wait)

	c := client.New(client.Options{Addr: ts.URL, InsecureSkipVerify: true})
	defer c.Close()
	if err := c.Health(ctx); err != nil {
		t.Fatalf("Health over TLS: %v", err)
	}
	res, err := c.Run(ctx, client.Command{Name: "echo", Args: []string{"over tls"}})
	if err != nil || string(res.Stdout) != "over tls\n" {
		t.Fatalf("Run over TLS: %v, %v", res, err)
	}
	mu.Lock()
	sawH2 := slices.Contains(protos, "HTTP/2.0")
	mu.Unlock()
	if !sawH2 {
		t.Errorf("the proxy saw %v: the RPCs did not use HTTP/2 over TLS", protos)
	}

	verified := client.New(client.Options{Addr: ts.URL})
	defer verified.Close()
	if err := verified.Health(ctx); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("Health with a self-signed certificate: %v, want a certificate error", err)
	}

	bad := client.New(client.Options{Addr: "ftp://" + target.Host})
	defer bad.Close()
	if err := bad.Health(ctx); !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), `unsupported scheme "ftp"`) {
		t.Errorf("Health at an ftp:// address: %v", err)
	}
}
