package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/client"

	"github.com/envd-dev/envd/internal/testutil"
)

// repoFile is the path of a file at the root of the repository.
func repoFile(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestStartupScript boots envd the way the sandbox image does, through
// start-up.sh (Jupyter included), on free ports given as ENVD_*
// variables; drives it through the client, then stops it with SIGTERM,
// which must end it with exit 0.
func TestStartupScript(t *testing.T) {
	t.Parallel()
	port, codePort := freePort(t), freePort(t)
	sock := socketPath(t)
	// start-up.sh execs envd: the process the test signals is envd.
	e := &envd{
		url:    "http://127.0.0.1:" + strconv.Itoa(port),
		sock:   sock,
		stderr: &syncBuffer{},
		exited: make(chan struct{}),
	}
	e.cmd = exec.Command(repoFile(t, "start-up.sh"))
	e.cmd.Env = cleanEnv(
		"STARTUP_ENVD_BIN="+envdBin,
		"ENVD_HOST=127.0.0.1",
		"ENVD_PORT="+strconv.Itoa(port),
		"ENVD_CODE_PORT="+strconv.Itoa(codePort),
		"ENVD_UNIX_SOCKET="+sock,
		"ENVD_DEFAULT_USER=root",
		// A poor PATH, with ".": start-up.sh repairs it.
		"PATH=.:/usr/local/go/bin",
	)
	e.cmd.Stdout, e.cmd.Stderr = e.stderr, e.stderr
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		e.err = e.cmd.Wait()
		close(e.exited)
	}()
	t.Cleanup(func() { e.kill(t) })
	if err := e.waitHealthy(startTimeout); err != nil {
		t.Fatalf("envd through start-up.sh: %v\n%s", err, e.stderr)
	}
	// /health answers as soon as the port listens, a moment before the
	// start is logged.
	testutil.Poll(t, "the start in envd's log", func() bool { return strings.Contains(e.stderr.String(), "envd started") })
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	for _, c := range []*client.Client{
		client.New(client.Options{Addr: e.url}),
		client.New(client.Options{Dialer: client.Unix(sock)}),
	} {
		res, err := c.Run(ctx, client.Command{Name: "/bin/sh", Args: []string{"-c", "echo hello from $(id -un); echo $PATH"}})
		c.Close()
		if err != nil {
			t.Fatalf("run through %s: %v", c.Target(), err)
		}
		lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
		if len(lines) != 2 || lines[0] != "hello from root" || !res.Exit.Success() {
			t.Fatalf("run: %q, %v", res.Stdout, res.Exit)
		}
		// The shared Python environment (install-deps.sh) comes first when
		// the machine has it; then what start-up.sh was given.
		path := strings.Split(lines[1], ":")
		if len(path) > 0 && path[0] == "/opt/envd-python/bin" {
			path = path[1:]
		}
		if slices.Contains(path, ".") || !slices.Contains(path, "/usr/bin") || !slices.Contains(path, "/usr/local/go/bin") || path[0] != "/usr/local/go/bin" {
			t.Errorf("PATH of a process: %s; want the given one, without \".\", plus the standard directories", lines[1])
		}
	}
	// Jupyter came up with envd: code runs through the code-interpreter
	// API on the code port, as the E2B SDK calls it.
	if _, err := exec.LookPath("python3"); err == nil {
		if out := executeCode(t, "http://127.0.0.1:"+strconv.Itoa(codePort), "print(6*7)"); !strings.Contains(out, `"text": "42\n"`) {
			t.Errorf("POST /execute print(6*7):\n%s\nenvd's log:\n%s", out, e.stderr)
		}
		// The default context's kernel is the one the server launched
		// before its own start (its connection file names it): envd's
		// environment for kernels made the start identical to the early
		// launch (else the early kernel is discarded, and the start is slow).
		code := "import sys; print('early' if '/kernel-envd-early-' in sys.argv[-1] else sys.argv)"
		if out := executeCode(t, "http://127.0.0.1:"+strconv.Itoa(codePort), code); !strings.Contains(out, `"text": "early\n"`) {
			t.Errorf("the default context's kernel is not the early one:\n%s\nenvd's log:\n%s", out, e.stderr)
		}
	}
	if fi, err := os.Stat("/home/user"); err == nil && !fi.IsDir() {
		t.Errorf("/home/user is not a directory")
	}
	// SIGTERM ends envd (and Jupyter) cleanly.
	start := time.Now()
	e.cmd.Process.Signal(syscall.SIGTERM)
	if code := e.wait(t, 30*time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0\n%s", code, e.stderr)
	}
	t.Logf("stopped %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	if _, err := os.Stat(sock); err == nil {
		t.Errorf("the unix socket %s is left behind", sock)
	}
}

// TestStartupScriptFlags checks what start-up.sh passes to envd, with a
// stand-in for envd that prints its arguments and environment.
func TestStartupScriptFlags(t *testing.T) {
	t.Parallel()
	fake := filepath.Join(t.TempDir(), "envd")
	os.WriteFile(fake, []byte("#!/bin/sh\necho \"args=$*\"\necho \"port=$ENVD_PORT vsock=$ENVD_VSOCK_PORT lang=$LANG\"\n"+
		"[ -z \"$ENVD_ACCESS_TOKEN\" ] || echo \"token=$ENVD_ACCESS_TOKEN\"\n"), 0o755)
	tests := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"defaults", nil, nil, "args=-host 0.0.0.0\nport= vsock= lang=C.UTF-8\n"},
		{"host from the environment", []string{"ENVD_HOST=127.0.0.1"}, nil, "args=\nport= vsock= lang=C.UTF-8\n"},
		{"variables pass through", []string{"ENVD_PORT=1234", "ENVD_VSOCK_PORT=5678", "LANG=de_DE.UTF-8"}, nil, "args=-host 0.0.0.0\nport=1234 vsock=5678 lang=de_DE.UTF-8\n"},
		{"arguments pass through", nil, []string{"-log-level", "debug"}, "args=-host 0.0.0.0 -log-level debug\nport= vsock= lang=C.UTF-8\n"},
		// The token never reaches envd's command line, which every user can read.
		{"token from the environment", []string{"ENVD_ACCESS_TOKEN=s3cret"}, nil, "args=-host 0.0.0.0\nport= vsock= lang=C.UTF-8\ntoken=s3cret\n"},
		{"token argument moved to the environment", nil, []string{"-log-level", "debug", "-access-token", "s3 cret", "-no-jupyter"}, "args=-host 0.0.0.0 -log-level debug -no-jupyter\nport= vsock= lang=C.UTF-8\ntoken=s3 cret\n"},
		{"token argument with =", nil, []string{"--access-token=a=b"}, "args=-host 0.0.0.0\nport= vsock= lang=C.UTF-8\ntoken=a=b\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(repoFile(t, "start-up.sh"), tt.args...)
			env := []string{"STARTUP_ENVD_BIN=" + fake}
			for _, kv := range cleanEnv() {
				if !strings.HasPrefix(kv, "LANG=") {
					env = append(env, kv)
				}
			}
			cmd.Env = append(env, tt.env...)
			out, err := cmd.CombinedOutput()
			if err != nil || string(out) != tt.want {
				t.Errorf("%q, %v; want %q", out, err, tt.want)
			}
		})
	}
	t.Run("no envd", func(t *testing.T) {
		t.Parallel()
		cmd := exec.Command(repoFile(t, "start-up.sh"))
		cmd.Env = cleanEnv("STARTUP_ENVD_BIN=/no/such/envd")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "no envd binary found") {
			t.Errorf("%q, %v; want a clear failure", out, err)
		}
	})
}

// parseDockerfile reads the Dockerfile at path.
func parseDockerfile(t *testing.T, path string) []testutil.DockerInstr {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return testutil.ParseDockerfile(string(b))
}

// TestDockerfile checks the image's recipe without a Docker engine: a Go
// stage that builds a static envd, a Debian bookworm stage that runs the
// same scripts/install-deps.sh as CI (with the full stack, without the test
// suite's npm packages), and start-up.sh as what the image starts.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	instrs := parseDockerfile(t, repoFile(t, "Dockerfile"))
	var froms []string
	var stage int
	var (
		staticBuild, installRun bool
		installCopied           string
		startupCopied, envdCopy bool
		startCmd                string
	)
	for _, in := range instrs {
		switch in.Cmd {
		case "FROM":
			froms = append(froms, in.Args)
			stage = len(froms)
		case "RUN":
			// Static and stripped, with the commit the binary reports
			// stamped (the build context has no .git).
			if stage == 1 && strings.Contains(in.Args, "CGO_ENABLED=0 go build") && strings.Contains(in.Args, "-trimpath") &&
				strings.Contains(in.Args, `-s -w -X github.com/envd-dev/envd/buildinfo.commit=${ENVD_COMMIT}`) && strings.Contains(in.Args, "./cmd/envd") {
				staticBuild = true
			}
			if stage == 2 && installCopied != "" {
				if m := regexp.MustCompile(`(^|&& |; )((?:\w+=\S+ )*)(?:bash )?` + regexp.QuoteMeta(installCopied) + `($| )`).FindStringSubmatch(in.Args); m != nil {
					vars := strings.Fields(m[2])
					if slices.Contains(vars, "ENVD_INSTALL_FULL=1") && slices.Contains(vars, "ENVD_SKIP_COMPAT=1") {
						installRun = true
					}
				}
			}
		case "COPY":
			f := strings.Fields(in.Args)
			if len(f) >= 2 && stage == 2 {
				if f[0] == "scripts/install-deps.sh" {
					installCopied = f[len(f)-1]
				}
				if slices.Contains(f[:len(f)-1], "start-up.sh") {
					startupCopied = true
				}
				if f[0] == "--from=build" && slices.Contains(f, "/out/envd") {
					envdCopy = true
				}
			}
		case "CMD", "ENTRYPOINT":
			startCmd = in.Args
		}
	}
	if len(froms) != 2 || froms[0] != "golang:1.26-bookworm AS build" || froms[1] != "debian:bookworm" {
		t.Errorf("stages %q; want golang:1.26-bookworm AS build, then debian:bookworm", froms)
	}
	if !staticBuild {
		t.Error("the build stage does not build a static envd with its commit stamped (CGO_ENABLED=0 go build -trimpath -ldflags \"-s -w -X .../buildinfo.commit=${ENVD_COMMIT}\" ./cmd/envd)")
	}
	if installCopied == "" || !installRun {
		t.Errorf("the image does not run scripts/install-deps.sh (copied to %q) with ENVD_INSTALL_FULL=1 ENVD_SKIP_COMPAT=1", installCopied)
	}
	if !envdCopy || !startupCopied || !strings.Contains(startCmd, "start-up.sh") {
		t.Errorf("envd copied %v, start-up.sh copied %v, started with %q; want start-up.sh", envdCopy, startupCopied, startCmd)
	}
	// CI installs with the same script: `make test` runs it through `deps`.
	mk, err := os.ReadFile(repoFile(t, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^deps:.*\n\tscripts/install-deps.sh`).Match(mk) || !regexp.MustCompile(`(?m)^test: deps`).Match(mk) {
		t.Error("make test no longer installs with scripts/install-deps.sh: the image and CI would differ")
	}
	// What the Dockerfile copies exists and is not excluded by .dockerignore.
	ignore, err := os.ReadFile(repoFile(t, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(ignore), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	for _, in := range instrs {
		f := strings.Fields(in.Args)
		if in.Cmd != "COPY" || len(f) < 2 || strings.HasPrefix(f[0], "--from") {
			continue
		}
		for _, src := range f[:len(f)-1] {
			src = strings.TrimSuffix(src, "/")
			repoFile(t, src)
			for _, p := range patterns {
				if ok, _ := filepath.Match(strings.TrimPrefix(p, "**/"), filepath.Base(src)); ok || p == src {
					t.Errorf(".dockerignore pattern %q excludes %s, which the Dockerfile copies", p, src)
				}
			}
		}
	}
}

// executeCode runs code through POST /execute (the E2B code-interpreter API)
// and returns the NDJSON answer. The first execution starts a kernel: it
// may take a while.
func executeCode(t *testing.T, base, code string) string {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Minute}
	defer c.CloseIdleConnections()
	body, _ := json.Marshal(map[string]string{"code": code})
	resp, err := c.Post(base+"/execute", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST /execute: %v", err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /execute: %s %s", resp.Status, out)
	}
	return string(out)
}
