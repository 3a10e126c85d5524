package deploy_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/internal/testutil"
)

// The E2B template: E2B's CLI reads e2b.toml and builds its Dockerfile.
const (
	templateDir  = "deploy/e2b-template"
	templateTOML = templateDir + "/e2b.toml"
)

// parseTOML reads the flat key = value file E2B's CLI writes: strings in
// double quotes, integers (with _ separators), # comments. Anything else
// (tables, arrays) fails the test: the CLI writes none.
func parseTOML(t *testing.T, rel string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for n, line := range strings.Split(readRepoFile(t, rel), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || !regexp.MustCompile(`^[A-Za-z0-9_-]+$`).MatchString(k) {
			t.Fatalf("%s:%d: not a key = value line: %q", rel, n+1, line)
		}
		if _, dup := out[k]; dup {
			t.Fatalf("%s:%d: %s given twice", rel, n+1, k)
		}
		rest := ""
		if strings.HasPrefix(v, `"`) {
			q, err := strconv.QuotedPrefix(v)
			if err != nil {
				t.Fatalf("%s:%d: %s: %v", rel, n+1, k, err)
			}
			out[k], _ = strconv.Unquote(q)
			rest = v[len(q):]
		} else {
			num, tail, _ := strings.Cut(v, "#")
			num = strings.TrimSpace(num)
			if !regexp.MustCompile(`^[0-9]+(_[0-9]+)*$`).MatchString(num) {
				t.Fatalf("%s:%d: %s = %s: want a string or an integer", rel, n+1, k, num)
			}
			out[k] = strings.ReplaceAll(num, "_", "")
			if tail != "" {
				rest = "#" + tail
			}
		}
		if rest = strings.TrimSpace(rest); rest != "" && rest[0] != '#' {
			t.Fatalf("%s:%d: %q after %s's value", rel, n+1, rest, k)
		}
	}
	return out
}

// TestE2BTemplateFiles checks the template as E2B's CLI and template
// builder take it: e2b.toml names its Dockerfile and a ready command and no
// start command (envd serves the code-interpreter API itself); the
// Dockerfile starts from the sandbox image and puts envd at /usr/bin/envd
// too; the memory it asks for is the GOMEMLIMIT of envd's unit; and the
// version the builder records (`envd -version`, trimmed) is a semver (build
// metadata allowed) of at least 0.6.4, the newest version the SDKs gate a
// feature on.
func TestE2BTemplateFiles(t *testing.T) {
	t.Parallel()
	cfg := parseTOML(t, templateTOML)
	for _, k := range []string{"template_name", "dockerfile", "ready_cmd", "memory_mb", "cpu_count"} {
		if cfg[k] == "" {
			t.Errorf("%s: no %s", templateTOML, k)
		}
	}
	if _, ok := cfg["start_cmd"]; ok {
		t.Errorf("%s: start_cmd %q: the template needs none (envd serves port %d itself); if one is wanted, run it in TestE2BTemplateRuns", templateTOML, cfg["start_cmd"], codePort)
	}
	if mb, _ := strconv.Atoi(cfg["memory_mb"]); mb%2 != 0 {
		t.Errorf("%s: memory_mb %s: E2B wants an even number", templateTOML, cfg["memory_mb"])
	}

	dockerfile := templateDir + "/" + cfg["dockerfile"]
	instrs := parseDockerfile(t, dockerfile)
	var from, image string
	linked := false
	for _, in := range instrs {
		switch in.Cmd {
		case "ARG":
			if v, ok := strings.CutPrefix(in.Args, "ENVD_IMAGE="); ok {
				image = v
			}
		case "FROM":
			from = in.Args
		case "RUN":
			if regexp.MustCompile(`\b(ln -sf|cp)( -\S+)* /usr/local/bin/envd /usr/bin/envd\b`).MatchString(in.Args) {
				linked = true
			}
		}
	}
	if from != "${ENVD_IMAGE}" || image == "" {
		t.Errorf("%s: FROM %q with ARG ENVD_IMAGE=%q; want FROM ${ENVD_IMAGE}, the sandbox image", dockerfile, from, image)
	}
	if !linked {
		t.Errorf("%s: no RUN puts /usr/local/bin/envd at /usr/bin/envd, where E2B's guest starts it", dockerfile)
	}
	// The image has envd in /usr/local/bin, where the link points.
	copied := false
	for _, in := range parseDockerfile(t, "Dockerfile") {
		f := strings.Fields(in.Args)
		if in.Cmd == "COPY" && len(f) > 2 && f[0] == "--from=build" && slices.Contains(f, "/out/envd") && f[len(f)-1] == "/usr/local/bin/" {
			copied = true
		}
	}
	if !copied {
		t.Errorf("the repository's Dockerfile no longer copies envd into /usr/local/bin/, where %s links /usr/bin/envd to", dockerfile)
	}

	lim, _ := lookupEnv(unitEntrypoint(t).env, "GOMEMLIMIT")
	if n, ok := goMemLimit(lim); !ok || strconv.FormatInt(n>>20, 10) != cfg["memory_mb"] {
		t.Errorf("%s's GOMEMLIMIT=%s is not the template's memory_mb = %s MiB", unitFile, lim, cfg["memory_mb"])
	}

	out, err := exec.Command(envdBin, "-version").Output()
	v := strings.TrimSpace(string(out))
	m := regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)(\+[0-9A-Za-z.-]+)?$`).FindStringSubmatch(v)
	if err != nil || m == nil {
		t.Fatalf("envd -version: %q, %v; want a semver, which E2B's builder records", out, err)
	}
	var ver [3]int
	for i := range ver {
		ver[i], _ = strconv.Atoi(m[i+1])
	}
	if slices.Compare(ver[:], []int{0, 6, 4}) < 0 {
		t.Errorf("envd -version: %s; the SDKs turn features off below 0.6.4", v)
	}
}

// TestE2BTemplateRuns starts envd as the template's guest does (the unit's
// command line: E2B's own unit has the same), with code execution, then
// does what E2B's builder does before it snapshots the guest: runs the
// template's ready_cmd through envd until it exits 0. Code then runs
// through the code-interpreter API on port 49999.
func TestE2BTemplateRuns(t *testing.T) {
	t.Parallel()
	testutil.RequireJupyter(t)
	requireTool(t, "curl", "curl") // the ready command's
	ready := parseTOML(t, templateTOML)["ready_cmd"]
	if ready == "" {
		t.Fatalf("%s: no ready_cmd", templateTOML)
	}
	ep := unitEntrypoint(t)
	s := startSandbox(t, ep, runOptions{jupyter: true})
	s.checkServes(t)

	// E2B's builder runs the ready command every 2 s, as a login shell
	// command, until it exits 0 (for 5 minutes at most).
	ctx := testutil.Context(t, testutil.Program)
	var last *client.RunResult
	var lastErr error
	ok := testutil.PollFor(testutil.Program, func() bool {
		last, lastErr = s.client.Run(ctx, client.Command{Name: "/bin/bash", Args: []string{"-l", "-c", ready}})
		if lastErr == nil && last.Exit.Success() {
			return true
		}
		time.Sleep(500 * time.Millisecond)
		return false
	})
	if !ok {
		if lastErr != nil {
			t.Fatalf("%s: ready_cmd %q: %v\n%s", templateTOML, ready, lastErr, s.out)
		}
		t.Fatalf("%s: ready_cmd %q never exited 0: %v, stdout %q, stderr %q\n%s", templateTOML, ready, last.Exit, last.Stdout, last.Stderr, s.out)
	}

	hc := s.httpClient(codePort)
	defer hc.CloseIdleConnections()
	body, _ := json.Marshal(map[string]string{"code": "print(6 * 7)"})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://envd/execute", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("POST /execute on port %d: %v", codePort, err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(out, []byte(`"text": "42\n"`)) {
		t.Errorf("POST /execute print(6 * 7): %s\n%s\nenvd's log:\n%s", resp.Status, out, s.out)
	}
	s.stop(t)
}
