package jupyter_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/envd-dev/envd/internal/jupyter"
)

// shared is one supervised server for every test that does not need to
// kill or stop its own: starting Jupyter costs about half a second.
var shared struct {
	sup    *jupyter.Supervisor
	client *jupyter.Client
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(mainRunner{m})
}

// mainRunner wraps m.Run with the shared server's lifetime, so that
// goleak's check runs after the server and its goroutines are gone.
type mainRunner struct{ m *testing.M }

func (r mainRunner) Run() int {
	// A missing Jupyter must fail the run, not skip it: these tests are
	// the only ones exercising the real server.
	if out, err := exec.Command("/usr/bin/python3", "-m", "jupyter_server", "--version").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: Jupyter Server is not installed: /usr/bin/python3 -m jupyter_server --version: %v\n%s\n"+
			"Run scripts/install-deps.sh (or: apt-get install -y --no-install-recommends python3-jupyter-server python3-ipykernel).\n",
			err, out)
		return 1
	}
	shared.sup = jupyter.New(jupyter.Options{Logger: testLogger()})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := shared.sup.Start(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: start shared jupyter server: %v\n", err)
		_ = shared.sup.Stop(context.Background())
		return 1
	}
	c, err := shared.sup.Client(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: shared jupyter client: %v\n", err)
		_ = shared.sup.Stop(context.Background())
		return 1
	}
	shared.client = c
	code := r.m.Run()
	if err := shared.sup.Stop(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: stop shared jupyter server: %v\n", err)
		return 1
	}
	return code
}

// testLogger shows the supervisor's warnings (crash logs with the server's
// output) on stderr; JUPYTER_TEST_DEBUG=1 shows everything.
func testLogger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("JUPYTER_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}
