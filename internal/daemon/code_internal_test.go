package daemon

import (
	"os"
	"testing"

	"github.com/envd-dev/envd/internal/defaults"
)

// TestKernelsUser: the kernels run as root (nil: envd's own account) by
// default, as upstream's; as the default user with StrictUsers, unless
// JupyterAsRoot.
func TestKernelsUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the kernels' user is chosen only when envd is root")
	}
	defs := defaults.New("user", nil)
	tests := []struct {
		name string
		cfg  Config
		want string // "" for nil
	}{
		{name: "default", cfg: Config{}},
		{name: "jupyter as root", cfg: Config{JupyterAsRoot: true}},
		{name: "strict", cfg: Config{StrictUsers: true}, want: "user"},
		{name: "strict, jupyter as root", cfg: Config{StrictUsers: true, JupyterAsRoot: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u, err := kernelsUser(tt.cfg, defs)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if u != nil {
				got = u.Name
			}
			if got != tt.want {
				t.Errorf("kernels run as %q, want %q", got, tt.want)
			}
		})
	}
}
