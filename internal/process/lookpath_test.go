package process_test

import (
	"os"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/internal/process/processtest"
)

// TestLookPathInChildsPath: a program named without a slash is looked up
// in the PATH the command runs with (the request's, or the sandbox's), as
// execvp in the child would, not in envd's own: a program only the
// command's PATH has runs; one only envd's PATH has is not found; a file the
// user may not execute (another user's shim) does not shadow one it may.
func TestLookPathInChildsPath(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	s := processtest.New(t, processtest.Options{})
	user := lookup(t, "user")
	c := s.Client(t, processtest.ClientOptions{User: "user"})

	// Not t.TempDir: the user must reach the programs.
	base, err := os.MkdirTemp("", "envd-lookpath-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	mk := func(dir, name, body string, mode os.FileMode) string {
		t.Helper()
		d := filepath.Join(base, dir)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	venv := mk("venv", "envd-lookpath-prog", `echo "from the command's PATH"`, 0o755)
	shims := mk("shims", "envd-lookpath-shim", `echo "root's shim"`, 0o700) // root's alone
	real := mk("real", "envd-lookpath-shim", `echo "the user's program"`, 0o755)

	for _, tc := range []struct {
		name, cmd, path, want string
	}{
		{"only the command's PATH has it", "envd-lookpath-prog", venv + ":/usr/bin:/bin", "from the command's PATH\n"},
		{"a file the user may not run is skipped", "envd-lookpath-shim", shims + ":" + real + ":/usr/bin:/bin", "the user's program\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := start(t, c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: tc.cmd, Envs: map[string]string{"PATH": tc.path}}})
			snap := w.End(t, waitShort)
			checkEnd(t, snap, exit0)
			if snap.Stdout != tc.want {
				t.Errorf("stdout %q, want %q", snap.Stdout, tc.want)
			}
		})
	}
	t.Run("only envd's PATH has it", func(t *testing.T) {
		t.Parallel()
		err := processtest.StartCall(c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "sh", Envs: map[string]string{"PATH": venv}}})(bounded(t))
		wantErr(t, err, connect.CodeInvalidArgument, "sh: executable not found in PATH "+venv)
	})
	t.Run("none the user may run", func(t *testing.T) {
		t.Parallel()
		err := processtest.StartCall(c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "envd-lookpath-shim", Envs: map[string]string{"PATH": shims}}})(bounded(t))
		wantErr(t, err, connect.CodeInvalidArgument, "is not executable by "+user.Name)
	})
}
