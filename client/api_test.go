package client_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/client"

	"github.com/envd-dev/envd/internal/testutil"
)

func TestHealthMetricsEnvs(t *testing.T) {
	t.Parallel()
	c := newClient(t, client.Options{})
	ctx := testContext(t, testutil.Wait)
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.CPUCount < 1 || m.MemTotal == 0 || m.MemUsed == 0 || m.DiskTotal == 0 || time.Since(m.Time) > time.Minute {
		t.Errorf("Metrics: %+v", m)
	}
	envs, err := c.Envs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if envs["E2B_SANDBOX"] == "" {
		t.Errorf("Envs: %v, want E2B_SANDBOX", envs)
	}
}

// TestInit runs its own envd: /init changes it for good.
func TestInit(t *testing.T) {
	t.Parallel()
	d, err := startDaemon("", false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.stop(); err != nil {
			t.Error(err)
		}
	})
	ctx := testContext(t, testutil.Wait)
	orch := newClient(t, client.Options{Addr: d.addr})
	other := newClient(t, client.Options{Addr: d.addr})
	dir := sandboxDir(t)
	err = orch.Init(ctx, client.InitOptions{
		EnvVars:        map[string]string{"FROM_INIT": "yes"},
		AccessToken:    "s3cret",
		DefaultUser:    "root",
		DefaultWorkdir: dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The orchestrator's client now sends the token.
	res, err := orch.Run(ctx, sh("echo $FROM_INIT $(id -un) $(pwd)"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "yes root " + dir + "\n"; string(res.Stdout) != want {
		t.Errorf("after /init: %q, want %q", res.Stdout, want)
	}
	// A client without it is turned away, with a clear error, everywhere
	// but /health.
	if err := other.Health(ctx); err != nil {
		t.Errorf("Health without the token: %v", err)
	}
	if _, err := other.ListProcesses(ctx); !errors.Is(err, client.ErrUnauthenticated) {
		t.Errorf("ListProcesses without the token: %v, want unauthenticated", err)
	}
	if _, err := other.Envs(ctx); !errors.Is(err, client.ErrUnauthenticated) || !strings.Contains(err.Error(), "access token") {
		t.Errorf("Envs without the token: %v, want unauthenticated", err)
	}
	if _, err := other.Download(ctx, "/etc/hostname"); !errors.Is(err, client.ErrUnauthenticated) {
		t.Errorf("Download without the token: %v, want unauthenticated", err)
	}
	if err := other.Init(ctx, client.InitOptions{AccessToken: "another"}); !errors.Is(err, client.ErrUnauthenticated) {
		t.Errorf("Init with another token: %v, want unauthenticated", err)
	}
	withToken := newClient(t, client.Options{Addr: d.addr, Token: "s3cret"})
	if envs, err := withToken.Envs(ctx); err != nil || envs["FROM_INIT"] != "yes" {
		t.Errorf("Envs with the token: %v, %v", envs, err)
	}
}
