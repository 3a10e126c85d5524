package jupyter_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
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

// TestKernelSpecDirs: the server finds kernelspecs in JUPYTER_PATH and in
// IPython's directory (IPYTHONDIR), and Debian's python3 spec, as Jupyter
// does by default: envd's config computes that list without importing
// IPython, and reads python3 from disk without importing ipykernel.
func TestKernelSpecDirs(t *testing.T) {
	t.Parallel()
	ipy, jp := t.TempDir(), t.TempDir()
	for _, d := range []struct{ dir, name string }{{ipy, "envd-test-ipython-dir"}, {jp, "envd-test-jupyter-path"}} {
		spec := filepath.Join(d.dir, "kernels", d.name)
		if err := os.MkdirAll(spec, 0o755); err != nil {
			t.Fatal(err)
		}
		js := `{"argv": ["/bin/true", "{connection_file}"], "display_name": "` + d.name + `", "language": "python"}`
		if err := os.WriteFile(filepath.Join(spec, "kernel.json"), []byte(js), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := startSupervisor(t, jupyter.Options{Env: []string{"IPYTHONDIR=" + ipy, "JUPYTER_PATH=" + jp}})
	ctx := testutil.Context(t, execTimeout)
	c, err := s.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	specs, err := c.KernelSpecs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"envd-test-ipython-dir", "envd-test-jupyter-path"} {
		if sp, ok := specs.Specs[name]; !ok || sp.DisplayName != name {
			t.Errorf("kernelspec %s: %+v, %v", name, sp, ok)
		}
	}
	py := specs.Specs["python3"]
	if want := []string{"/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"}; !slices.Equal(py.Argv, want) {
		t.Errorf("python3 argv %q, want %q", py.Argv, want)
	}
}
