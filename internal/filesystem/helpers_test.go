package filesystem_test

import (
	"log/slog"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/envd-dev/envd/internal/filesystem"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitLong bounds a wait, generously: the suite runs with -race on two
// cores shared with other work. It is a limit, never the expected time.
const waitLong = 60 * time.Second

// env is a real Files, closed when the test ends. The Connect service over
// it is tested in internal/filesystem/fsconnect.
type env struct {
	files *filesystem.Files
}

func newEnv(t *testing.T, o filesystem.Options) *env {
	t.Helper()
	requireRoot(t)
	o.Logger = slog.New(slog.DiscardHandler)
	files := filesystem.New(o)
	t.Cleanup(func() { files.Close() })
	return &env{files: files}
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("these tests act as other users: run them as root")
	}
}
