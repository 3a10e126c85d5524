package interpreter_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/envd-dev/envd/internal/interpreter"
	"github.com/envd-dev/envd/internal/interpreter/codehttp"
	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/jupyter/startup"
	"github.com/envd-dev/envd/internal/server"
	"github.com/envd-dev/envd/internal/testutil"
)

// installHint says how to install what these tests need.
const installHint = testutil.InstallHint

// shared is one Jupyter server and engine for every test that does not
// kill or stop its own: a server start costs seconds on two cores.
var shared struct {
	layout startup.Layout
	// kernels is a directory in the servers' JUPYTER_PATH (after the
	// layout's) where tests install kernelspecs: kernels/NAME/kernel.json.
	kernels string
	sup     *jupyter.Supervisor
	eng     *interpreter.Engine
	srv     *httptest.Server // the HTTP API over eng (with /health)
	env     sync.Map         // sandbox-wide env vars served by GlobalEnv
}

// testKeepalive is the HTTP API's keepalive in tests.
const testKeepalive = 300 * time.Millisecond

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(mainRunner{m},
		// net/http's idle connections of the httptest clients.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

type mainRunner struct{ m *testing.M }

func (r mainRunner) Run() int {
	if err := testutil.CheckJupyter(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "envd-interpreter-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	shared.layout, err = startup.Install(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: install startup files:", err)
		return 1
	}
	shared.kernels = filepath.Join(dir, "extra")
	if err := os.MkdirAll(filepath.Join(shared.kernels, "kernels"), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	sup, eng := newStack(shared.layout, func() map[string]string {
		out := map[string]string{}
		shared.env.Range(func(k, v any) bool {
			out[k.(string)] = v.(string)
			return true
		})
		return out
	})
	shared.sup, shared.eng = sup, eng
	shared.env.Store("ENVD_TEST_GLOBAL", "global value")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := startSupervisor(ctx, sup); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: start jupyter: %v\n%s\n", err, installHint)
		_ = sup.Stop(context.Background())
		return 1
	}
	eng.Start()
	select {
	case <-eng.Ready():
	case <-ctx.Done():
		fmt.Fprintf(os.Stderr, "FAIL: default python context not ready: %v\n", eng.Health())
		eng.Close()
		_ = sup.Stop(context.Background())
		return 1
	}
	api := codehttp.New(eng, codehttp.Options{Logger: testLogger(), Keepalive: testKeepalive})
	h, err := server.New(server.Options{Logger: testLogger(), Routes: append(api.Routes(), api.HealthRoute())})
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	shared.srv = httptest.NewServer(h)

	code := r.m.Run()

	closeServiceEngine()
	shared.srv.CloseClientConnections()
	shared.srv.Close()
	http.DefaultClient.CloseIdleConnections()
	eng.Close()
	if err := sup.Stop(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: stop jupyter:", err)
		return 1
	}
	return code
}

// newStack builds a supervisor and an engine over it, as envd does, with
// the test's timings; more (if any) changes the engine's options.
func newStack(l startup.Layout, globalEnv func() map[string]string, more ...func(*interpreter.Options)) (*jupyter.Supervisor, *interpreter.Engine) {
	return newStackZygote(l, nil, globalEnv, more...)
}

// newStackZygote is newStack with its server's zygote (nil: none, every
// kernel is started).
func newStackZygote(l startup.Layout, z *jupyter.Zygote, globalEnv func() map[string]string, more ...func(*interpreter.Options)) (*jupyter.Supervisor, *interpreter.Engine) {
	env := l.Environ([]string{"JUPYTER_PATH=" + shared.kernels})
	sup := jupyter.New(jupyter.Options{Env: env, Logger: testLogger(), Zygote: z})
	opts := interpreter.Options{
		Supervisor:     sup,
		GlobalEnv:      globalEnv,
		Logger:         testLogger(),
		InterruptGrace: 3 * time.Second, // a loaded CI machine can take over a second to raise KeyboardInterrupt
		ReaderGrace:    5 * time.Second,
		KeepFinished:   10 * time.Second,
		DefaultCwd:     func() string { return "/tmp" },
	}
	for _, f := range more {
		f(&opts)
	}
	return sup, interpreter.New(opts)
}

// ownStack is newStack started, for a test that kills or stops its own
// server: the engine started, both stopped at cleanup. ctx bounds the test.
func ownStack(t *testing.T, globalEnv func() map[string]string, more ...func(*interpreter.Options)) (*jupyter.Supervisor, *interpreter.Engine, context.Context) {
	t.Helper()
	return ownStackZygote(t, nil, globalEnv, more...)
}

// ownStackZygote is ownStack with its server's zygote (nil: none).
func ownStackZygote(t *testing.T, z *jupyter.Zygote, globalEnv func() map[string]string, more ...func(*interpreter.Options)) (*jupyter.Supervisor, *interpreter.Engine, context.Context) {
	t.Helper()
	sup, eng := newStackZygote(shared.layout, z, globalEnv, more...)
	ctx := testutil.Context(t, 3*time.Minute)
	if err := startSupervisor(ctx, sup); err != nil {
		t.Fatal(err)
	}
	eng.Start()
	t.Cleanup(func() {
		eng.Close()
		_ = sup.Stop(context.Background())
	})
	return sup, eng, ctx
}

// testLogger shows warnings; INTERPRETER_TEST_DEBUG=1 shows everything.
func testLogger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("INTERPRETER_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// Shared timeouts: generous, for two cores under -race.
const (
	kernelTimeout = 2 * time.Minute
	execTimeout   = 2 * time.Minute
)

func short(s string) string {
	s = strings.ReplaceAll(s, "\n", "\\n")
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// startSupervisor starts sup and waits until its server is up. A first
// start can fail for a reason of the moment (another process took the
// free port it picked): the supervisor retries in the background, as in
// envd, and only ctx bounds the wait.
func startSupervisor(ctx context.Context, sup *jupyter.Supervisor) error {
	if err := sup.Start(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "jupyter did not start (%v); waiting for its retries\n", err)
		return sup.Ready(ctx)
	}
	return nil
}
