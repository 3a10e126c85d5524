package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/client"
)

// TestKernelCannotTurnJupyterRestartsAgainstRoot is an attack on root
// through the real binary, in both modes: kernel code plants the Jupyter
// config's temp names as links to a root file and into a root directory,
// then kills its Jupyter server. envd restarts the server and rewrites its
// config, and must not write through the links: the root file keeps its
// owner, mode and content, and nothing appears in the root directory.
// Before the fix, envd wrote the token config through the link and gave
// the file to the kernels' user.
//
// As a user (strict mode) the kernel cannot even plant the links: the
// config directory is root's. As root (default mode, as upstream) it can,
// and the restart must still not follow them.
func TestKernelCannotTurnJupyterRestartsAgainstRoot(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name    string
		args    []string
		planted string
	}{
		{"default", nil, "planted planted"},
		{"strict", []string{"-strict-users"}, "PermissionError PermissionError"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			victimDir := t.TempDir() // root's
			victim := filepath.Join(victimDir, "victim")
			const content = "root's own\n"
			if err := os.WriteFile(victim, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			e := startEnvd(t, startOptions{jupyter: true, args: mode.args})
			c := client.New(client.Options{Addr: e.url})
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), codeTimeout)
			defer cancel()

			code := fmt.Sprintf(`import os
cfg = os.environ['JUPYTER_CONFIG_DIR']
res = []
for name, target in [('jupyter_server_config.json.tmp', %q), ('jupyter_server_config.py.tmp', %q)]:
    p = os.path.join(cfg, name)
    try:
        if os.path.lexists(p):
            os.unlink(p)
        os.symlink(target, p)
        res.append('planted')
    except OSError as e:
        res.append(type(e).__name__)
print(' '.join(res))
`, victim, filepath.Join(victimDir, "planted"))
			run, err := c.Execute(ctx, code, client.ExecOptions{})
			if err != nil {
				t.Fatalf("Execute: %v\n%s", err, e.stderr)
			}
			res, err := run.Wait()
			if err != nil {
				t.Fatalf("the planting run: %v\n%s", err, e.stderr)
			}
			if got := strings.TrimSpace(res.Stdout); got != mode.planted {
				t.Errorf("planting: %q, want %q (%+v)", got, mode.planted, res)
			}
			run, err = c.Execute(ctx, "import os\nos.kill(os.getppid(), 9)", client.ExecOptions{})
			if err != nil {
				t.Fatalf("Execute: %v\n%s", err, e.stderr)
			}
			// The run ends with the server's restart, or as the kernel
			// reported it: the kernel's own reply (the direct path) can
			// come before envd learns that the server died.
			res, err = run.Wait()
			if err != nil || (res.Reason != client.EndServerRestarted && res.Reason != client.EndOK) {
				t.Errorf("killing the server: %+v, %v; want it to end with the server's restart, or ok", res, err)
			}
			var told atomic.Bool // the restart was reported
			told.Store(err == nil && res.Reason == client.EndServerRestarted)
			// The server comes back (a fresh kernel for the default
			// context), with its config rewritten. An execution waits for
			// the server, and the first on the new kernel is told (a
			// kernel_replaced notice) unless the restart ended a run
			// already; one sent while envd is still learning of the death
			// may end with that death instead: send another.
			opts := client.ExecOptions{OnNotice: func(n client.Notice) {
				if n.Kind == client.NoticeKernelReplaced {
					told.Store(true)
				}
			}}
			// A run sent before envd learned of the death can also run on
			// the dying kernel: send more until one was told.
			var out string
			for attempt := 0; attempt < 50 && (out != "42\n" || !told.Load()); attempt++ {
				if out != "" {
					time.Sleep(20 * time.Millisecond)
				}
				r, err := c.Execute(ctx, "print(6*7)", opts)
				if err != nil {
					t.Logf("attempt %d: %v", attempt, err)
					continue
				}
				res, err := r.Wait()
				if err == nil && res.Reason == client.EndServerRestarted {
					told.Store(true)
				}
				if err != nil || res.Reason != client.EndOK {
					t.Logf("attempt %d: %v %v", attempt, res, err)
					continue
				}
				out = res.Stdout
			}
			if out != "42\n" || !told.Load() {
				t.Errorf("after the restart: %q; the restart reported: %v", out, told.Load())
			}
			fi, err := os.Lstat(victim)
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			b, _ := os.ReadFile(victim)
			if st.Uid != 0 || st.Gid != 0 || fi.Mode() != 0o600 || string(b) != content {
				t.Errorf("victim is now %d:%d %v %q; want 0:0 -rw------- %q", st.Uid, st.Gid, fi.Mode(), b, content)
			}
			if _, err := os.Lstat(filepath.Join(victimDir, "planted")); err == nil {
				t.Errorf("a file appeared in root's directory %s", victimDir)
			}
		})
	}
}
