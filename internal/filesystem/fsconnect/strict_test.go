package fsconnect_test

import (
	"fmt"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/filesystem"
	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/testutil"
)

// TestStrictModeOverConnect: what strict mode refuses (filesystem's
// TestStrictModeRootProcess and TestStrictOwnProc) reaches the client as
// permission_denied with the domain's message; the default mode reads as
// root, as upstream.
func TestStrictModeOverConnect(t *testing.T) {
	t.Parallel()
	strict := newEnv(t, filesystem.Options{StrictUsers: true})
	def := newEnv(t, filesystem.Options{})
	pid := testutil.Sleeper(t, nil)
	cwd := fmt.Sprintf("/proc/%d/cwd", pid)

	_, err := strict.user.ListDir(testutil.Context(t, waitLong), connect.NewRequest(&pb.ListDirRequest{Path: cwd}))
	wantErr(t, err, connect.CodePermissionDenied, "user 'user' may not access "+cwd)
	_, err = strict.user.ListDir(testutil.Context(t, waitLong), connect.NewRequest(&pb.ListDirRequest{Path: fmt.Sprintf("/proc/%d/root/root", pid)}))
	wantErr(t, err, connect.CodePermissionDenied, "user 'user'")
	_, err = strict.user.ListDir(testutil.Context(t, waitLong), connect.NewRequest(&pb.ListDirRequest{Path: "/proc/self/fd"}))
	wantErr(t, err, connect.CodePermissionDenied, "user 'user' may not read /proc/self/fd: it is envd's own process", "read /proc/<pid> of a process of your own instead")

	if _, err := def.user.ListDir(testutil.Context(t, waitLong), connect.NewRequest(&pb.ListDirRequest{Path: cwd})); err != nil {
		t.Errorf("default mode: %v", err)
	}
}
