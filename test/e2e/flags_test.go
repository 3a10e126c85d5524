package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"connectrpc.com/connect"

	"github.com/envd-dev/envd/buildinfo"
	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/internal/testutil"
)

// semver is semver.org's own pattern for a version, with its pre-release
// (group 4) and build metadata.
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// TestVersion: -version prints a bare semver line, as upstream's (E2B's
// template builder records the whole trimmed output, and the API and SDKs
// compare it as semver), the wire version envd implements with the commit
// as build metadata; -commit the bare commit; /health's X-Envd-Version the
// same version.
func TestVersion(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, env []string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, envdBin, args...)
		cmd.Env = cleanEnv(env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("envd %v: %v", args, err)
		}
		return string(out)
	}
	commit := run(t, nil, "-commit")
	if !regexp.MustCompile(`^([0-9a-f]{12}(-dirty)?|unknown)\n$`).MatchString(commit) {
		t.Errorf("envd -commit printed %q, want the 12-digit commit alone", commit)
	}
	commit = strings.TrimSpace(commit)
	want := buildinfo.WireVersion + "+" + strings.ReplaceAll(commit, "-", ".")
	if commit == "unknown" {
		want = buildinfo.WireVersion
	}
	for _, tt := range []struct {
		name string
		args []string
		env  []string
	}{
		{name: "flag", args: []string{"-version"}},
		{name: "double dash", args: []string{"--version"}},
		{name: "upstream's command line", args: []string{"--isnotfc", "--no-cgroups", "--verbose", "--version"}},
		{name: "environment", env: []string{"ENVD_VERSION=true"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := run(t, tt.env, tt.args...)
			if out != want+"\n" {
				t.Errorf("envd %v printed %q, want %q", tt.args, out, want+"\n")
			}
			v := strings.TrimSpace(out)
			if m := semver.FindStringSubmatch(v); m == nil {
				t.Errorf("%q is not semver", v)
			} else if m[4] != "" {
				t.Errorf("%q has a pre-release: it sorts below %s, closing the SDKs' gates", v, buildinfo.WireVersion)
			}
		})
	}
	t.Run("X-Envd-Version", func(t *testing.T) {
		t.Parallel()
		e := startEnvd(t, startOptions{})
		if got := healthVersion(e); got != want {
			t.Errorf("X-Envd-Version %q, want %q", got, want)
		}
	})
}

func TestHelp(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, envdBin, "-h")
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("envd -h: %v, want exit 0", err)
	}
	for _, want := range []string{"ENVD_DEFAULT_USER", "ENVD_ACCESS_TOKEN", "a flag on the command line wins"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("usage does not mention %s:\n%s", want, out)
		}
	}
	// One short line a flag: the README's flag table has the details.
	for _, line := range strings.Split(string(out), "\n") {
		if len(line) > 120 {
			t.Errorf("a help line of %d characters (at most 120): %s", len(line), line)
		}
	}
	for _, flag := range []string{"-host", "-port", "-code-port", "-default-user", "-access-token", "-vsock-port", "-unix-socket", "-log-format", "-version", "-strict-users", "-jupyter-as-root", "-warm-kernels"} {
		if !strings.Contains(string(out), "  "+flag+" ") && !strings.Contains(string(out), "  "+flag+"\n") {
			t.Errorf("usage lacks %s:\n%s", flag, out)
		}
	}
}

// TestBadFlags: a bad value makes envd exit non-zero at once with a message
// that names the flag or variable and the value.
func TestBadFlags(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })
	busyPort := strconv.Itoa(busy.Addr().(*net.TCPAddr).Port)
	safe := []string{"-host", "127.0.0.1", "-code-port", "0", "-no-jupyter"}

	tests := []struct {
		name string
		args []string
		env  []string
		want string // in stderr
	}{
		{name: "port not a number", args: []string{"-port", "abc"}, want: `invalid value "abc" for flag -port`},
		{name: "unknown flag", args: []string{"-nope"}, want: "flag provided but not defined: -nope"},
		{name: "log format", args: append(safe, "-port", "0", "-log-format", "xml"), want: `-log-format "xml": want text or json`},
		{name: "vsock port not a number", args: []string{"-vsock-port", "-1"}, want: `invalid value "-1" for flag -vsock-port`},
		{name: "vsock port too large", args: append(safe, "-port", "0", "-vsock-port", "4294967297"), want: "-vsock-port 4294967297: want at most 4294967295"},
		{name: "env port not a number", env: []string{"ENVD_PORT=abc"}, want: `ENVD_PORT="abc": want a whole number`},
		{name: "env bool", env: []string{"ENVD_NO_JUPYTER=maybe"}, want: `ENVD_NO_JUPYTER="maybe": want true or false (or 1 or 0)`},
		{name: "env bad value wins over a good flag", args: []string{"-port", "0"}, env: []string{"ENVD_LOG_FORMAT=yaml"}, want: `ENVD_LOG_FORMAT="yaml": want text or json`},
		{name: "env log level", args: []string{"-port", "0"}, env: []string{"ENVD_LOG_LEVEL=bogus"}, want: `ENVD_LOG_LEVEL="bogus": want debug, info, warn or error`},
		{name: "flag log level", args: append(safe, "-port", "0", "-log-level", "loud"), want: `-log-level "loud": want debug, info, warn or error`},
		{name: "warm kernels count", args: append(safe, "-port", "0", "-warm-kernels", "python=x"), want: `-warm-kernels "python=x": python=x: the count must be a whole number from 0 to 8`},
		{name: "env warm kernels language", args: append(safe, "-port", "0"), env: []string{"ENVD_WARM_KERNELS=python=1,javascript=1"}, want: `ENVD_WARM_KERNELS="python=1,javascript=1": javascript=1: JavaScript and TypeScript kernels (Deno) cannot be prestarted`},
		{name: "env warm kernels unknown", args: append(safe, "-port", "0"), env: []string{"ENVD_WARM_KERNELS=julia=1"}, want: `ENVD_WARM_KERNELS="julia=1": julia=1: unknown language "julia": kernels can be prestarted for python, r and bash`},
		{name: "positional argument", args: append(safe, "-port", "0", "serve"), want: `unexpected argument "serve": envd takes only flags`},
		{name: "port is the code port", args: []string{"-host", "127.0.0.1", "-no-jupyter", "-port", "5000", "-code-port", "5000"}, want: "-port 5000 and -code-port 5000 are the same port"},
		{name: "env port is the code port", args: []string{"-host", "127.0.0.1", "-no-jupyter", "-port", "5000"}, env: []string{"ENVD_CODE_PORT=5000"}, want: "-port 5000 and ENVD_CODE_PORT=5000 are the same port"},
		{name: "unknown default user", args: append(safe, "-port", "0", "-default-user", "no-such-user-envd-test"), want: `default user: unknown user: "no-such-user-envd-test"`},
		{name: "port out of range", args: append(safe, "-port", "70000"), want: "listen on port 70000"},
		{name: "port in use", args: append(safe, "-port", busyPort), want: "listen on port " + busyPort},
		{name: "cgroup root relative", args: append(safe, "-port", "0", "-cgroup-root", "envd"), want: `-cgroup-root "envd": want the absolute path where the cgroup filesystems are mounted (envd's own tree is named by -cgroup-tree)`},
		{name: "isnotfc takes no value", args: append(safe, "-port", "0", "-isnotfc=maybe"), want: `invalid boolean value "maybe" for -isnotfc`},
		{name: "unix socket in a missing dir", args: append(safe, "-port", "0", "-unix-socket", "/no/such/dir/envd.sock"), want: "listen on unix socket /no/such/dir/envd.sock"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, envdBin, tt.args...)
			cmd.Env = cleanEnv(tt.env...)
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("envd %v did not exit: it accepted the bad value\n%s", tt.args, out)
			}
			if cmd.ProcessState.ExitCode() == 0 || err == nil {
				t.Fatalf("envd %v exited 0, want a failure\n%s", tt.args, out)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("envd %v said:\n%s\nwant it to say %q", tt.args, out, tt.want)
			}
			if !strings.Contains(string(out), "envd: ") {
				t.Errorf("the error is not prefixed with envd:\n%s", out)
			}
		})
	}
}

// TestFlagsFromEnv: every flag can come from ENVD_*; a flag on the command
// line wins over its variable.
func TestFlagsFromEnv(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	sock := socketPath(t)
	e := startEnvd(t, startOptions{
		raw:  true,
		port: port,
		sock: sock,
		env: []string{
			"ENVD_HOST=127.0.0.1",
			"ENVD_PORT=" + strconv.Itoa(port),
			"ENVD_UNIX_SOCKET=" + sock,
			"ENVD_CODE_PORT=0",
			"ENVD_NO_JUPYTER=true",
			"ENVD_ACCESS_TOKEN=env-token",
			"ENVD_DEFAULT_USER=root",
			"ENVD_LOG_FORMAT=json",
			"ENVD_LOG_LEVEL=debug",
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()

	// The token: required, and not leaked into the log.
	pc := processClient(httpClient(t), e.url)
	if _, err := pc.List(ctx, connect.NewRequest(&pb.ListRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("List without the token from ENVD_ACCESS_TOKEN: %v, want unauthenticated", err)
	}
	req := &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/usr/bin/id", Args: []string{"-un"}}}
	creq := connect.NewRequest(req)
	creq.Header().Set("X-Access-Token", "env-token")
	stream, err := pc.Start(ctx, creq)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for stream.Receive() {
		out.Write(stream.Msg().GetEvent().GetData().GetStdout())
	}
	stream.Close()
	if err := stream.Err(); err != nil || out.String() != "root\n" {
		t.Errorf("id -un as the default user from ENVD_DEFAULT_USER: %q, %v; want root", out.String(), err)
	}

	// The unix socket from ENVD_UNIX_SOCKET.
	uc := testutil.UnixClient(t, sock, requestTimeout)
	resp, err := uc.Get("http://envd/health")
	if err != nil {
		t.Fatalf("GET /health over %s: %v", sock, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("GET /health over the unix socket: %s", resp.Status)
	}

	// The log format and level: JSON lines, debug included.
	e.cmd.Process.Signal(syscall.SIGTERM)
	if code := e.wait(t, shutdownGrace+requestTimeout); code != 0 {
		t.Errorf("exit code %d", code)
	}
	logs := e.stderr.String()
	sawDebug := false
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Errorf("log line %q is not JSON: %v", sc.Text(), err)
			continue
		}
		if m["level"] == "DEBUG" {
			sawDebug = true
		}
	}
	if !sawDebug {
		t.Errorf("no debug line with ENVD_LOG_LEVEL=debug:\n%s", logs)
	}
	if strings.Contains(logs, "env-token") {
		t.Errorf("the access token is in the log:\n%s", logs)
	}
}

// TestFlagBeatsEnv: -port wins over ENVD_PORT, -log-format over
// ENVD_LOG_FORMAT.
func TestFlagBeatsEnv(t *testing.T) {
	t.Parallel()
	// ENVD_PORT names a port that is taken: envd only starts if it uses -port.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { taken.Close() })
	e := startEnvd(t, startOptions{
		env:  []string{"ENVD_PORT=" + strconv.Itoa(taken.Addr().(*net.TCPAddr).Port), "ENVD_LOG_FORMAT=json"},
		args: []string{"-log-format", "text"},
	})
	if logs := e.stderr.String(); !strings.Contains(logs, "level=INFO") || strings.HasPrefix(logs, "{") {
		t.Errorf("-log-format text did not win over ENVD_LOG_FORMAT=json:\n%s", logs)
	}
}

// TestAccessTokenOnCommandLine: a token given as -access-token, which every
// user can read in /proc/PID/cmdline, draws one warning naming
// ENVD_ACCESS_TOKEN; the same token from the environment draws none.
func TestAccessTokenOnCommandLine(t *testing.T) {
	t.Parallel()
	const token = "cmdline-token-e2e"
	tests := []struct {
		name string
		args []string
		env  []string
		warn bool
	}{
		{name: "flag", args: []string{"-access-token", token}, warn: true},
		{name: "flag beside the variable", args: []string{"-access-token", token}, env: []string{"ENVD_ACCESS_TOKEN=" + token}, warn: true},
		{name: "environment", env: []string{"ENVD_ACCESS_TOKEN=" + token}},
		{name: "no token", args: []string{"-access-token", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := startEnvd(t, startOptions{args: tt.args, env: tt.env})
			e.cmd.Process.Signal(syscall.SIGTERM)
			if code := e.wait(t, shutdownGrace+requestTimeout); code != 0 {
				t.Errorf("exit code %d", code)
			}
			logs := e.stderr.String()
			warnings := 0
			for _, line := range strings.Split(logs, "\n") {
				if strings.Contains(line, "level=WARN") && strings.Contains(line, "ENVD_ACCESS_TOKEN") {
					warnings++
					if !strings.Contains(line, "-access-token") || !strings.Contains(line, "/proc") {
						t.Errorf("the warning does not say why nor which flag: %s", line)
					}
				}
			}
			if want := map[bool]int{true: 1, false: 0}[tt.warn]; warnings != want {
				t.Errorf("%d warnings about the token on the command line, want %d:\n%s", warnings, want, logs)
			}
			if strings.Contains(logs, token) {
				t.Errorf("the access token is in the log:\n%s", logs)
			}
		})
	}
}
