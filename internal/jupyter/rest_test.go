package jupyter_test

import (
	"errors"
	"testing"

	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/testutil"
)

func TestKernelSpecs(t *testing.T) {
	t.Parallel()
	specs, err := shared.client.KernelSpecs(testutil.Context(t, execTimeout))
	if err != nil {
		t.Fatal(err)
	}
	py, ok := specs.Specs["python3"]
	if !ok || specs.Default != "python3" {
		t.Fatalf("specs = %+v", specs)
	}
	if py.Name != "python3" || py.Language != "python" || len(py.Argv) == 0 || py.Argv[0] != "/usr/bin/python3" {
		t.Errorf("python3 spec = %+v", py)
	}
}

func TestRESTErrors(t *testing.T) {
	t.Parallel()
	const unknown = "00000000-0000-0000-0000-000000000000"
	c := shared.client
	ctx := testutil.Context(t, execTimeout)
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"start unknown spec", func() error { _, err := c.StartKernel(ctx, "no-such-kernel", "/tmp"); return err }, jupyter.ErrNoSuchKernelSpec},
		{"get unknown", func() error { _, err := c.Kernel(ctx, unknown); return err }, jupyter.ErrKernelNotFound},
		{"delete unknown", func() error { return c.DeleteKernel(ctx, unknown) }, jupyter.ErrKernelNotFound},
		{"interrupt unknown", func() error { return c.InterruptKernel(ctx, unknown) }, jupyter.ErrKernelNotFound},
		// The server answers 500 here; the body says it is a 404.
		{"restart unknown", func() error { _, err := c.RestartKernel(ctx, unknown); return err }, jupyter.ErrKernelNotFound},
		{"connect unknown", func() error { _, err := c.Connect(ctx, unknown, jupyter.KernelOptions{}); return err }, jupyter.ErrKernelNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
	if _, err := c.StartKernel(ctx, "python3", "relative/dir"); err == nil {
		t.Error("relative kernel directory accepted")
	}
}

func TestListKernels(t *testing.T) {
	t.Parallel()
	// Listing while a kernel starts: jupyter_server 1.x answers 500 for a
	// kernel that is in its map but not yet ready, unless the client waits.
	ctx := testutil.Context(t, execTimeout)
	started := make(chan struct{})
	listErr := make(chan error, 1)
	go func() {
		for {
			if _, err := shared.client.Kernels(ctx); err != nil {
				listErr <- err
				return
			}
			select {
			case <-started:
				listErr <- nil
				return
			default:
			}
		}
	}()
	k, _ := startKernel(t, shared.client, "python3", jupyter.KernelOptions{})
	close(started)
	if err := <-listErr; err != nil {
		t.Fatalf("list while a kernel starts: %v", err)
	}
	ms, err := shared.client.Kernels(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.ID == k.ID() {
			if m.Name != "python3" || m.Connections < 1 {
				t.Errorf("kernel model = %+v", m)
			}
			return
		}
	}
	t.Errorf("kernel %s not listed in %+v", k.ID(), ms)
}
