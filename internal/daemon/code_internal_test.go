package daemon

import (
	"os"
	"testing"

	"github.com/envd-dev/envd/internal/defaults"
)

// TestKernelsUser: with a default user that is root, whose answer needs
// no sudo, the kernels run as root in the default mode (with the shared
// environment) and with -jupyter-as-root, as root (the default user) in
// strict mode without the shared environment.
func TestKernelsUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the kernels' user is chosen only when envd is root")
	}
	defs := defaults.New("root", nil)
	tests := []struct {
		name   string
		cfg    Config
		want   string // "" for nil
		shared bool
	}{
		{name: "default", cfg: Config{}, shared: true},
		{name: "jupyter as root", cfg: Config{JupyterAsRoot: true}, shared: true},
		{name: "strict", cfg: Config{StrictUsers: true}, want: "root"},
		{name: "strict, jupyter as root", cfg: Config{StrictUsers: true, JupyterAsRoot: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, err := kernelsUser(tt.cfg, defs, defaults.Packages{})
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if a.user != nil {
				got = a.user.Name
			}
			if got != tt.want || a.shared != tt.shared {
				t.Errorf("kernels run as %q, shared %v; want %q, shared %v", got, a.shared, tt.want, tt.shared)
			}
		})
	}
}
