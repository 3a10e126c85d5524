package defaults_test

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/envd-dev/envd/internal/defaults"
)

// TestFailFastEnv: pip's and npm's settings are given, but a manager's are
// left out when one of its configuration files sets one of them, and only
// that manager's.
func TestFailFastEnv(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pipConf := write("pip.conf", "[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n# retries = 9\n")
	npmrc := write("npmrc", "fund=false\nfetch-retry-factor=3\n")
	missing := filepath.Join(dir, "missing")
	all := map[string]string{}
	for _, vars := range defaults.FailFastVars {
		maps.Copy(all, vars)
	}

	env, kept := defaults.FailFastEnv(defaults.FailFastFiles{"pip": {missing, pipConf}, "npm": {npmrc}})
	if !maps.Equal(env, all) || len(kept) != 0 {
		t.Errorf("no setting in the files: %v, kept %v; want %v", env, kept, all)
	}
	if env["PIP_RETRIES"] != "1" || env["npm_config_fetch_retries"] != "1" {
		t.Errorf("a retry is kept on a flaky network: %v", env)
	}

	userPip := write("user-pip.conf", "[install]\n  Retries: 10\n")
	userNpmrc := write("user-npmrc", "fetch_retry_mintimeout=30000\n")
	env, kept = defaults.FailFastEnv(defaults.FailFastFiles{"pip": {pipConf, userPip}, "npm": {npmrc}})
	if _, ok := env["PIP_RETRIES"]; ok || env["npm_config_fetch_retries"] != "1" {
		t.Errorf("pip's retries in %s: %v", userPip, env)
	}
	if !slices.Equal(kept, []string{"pip: its retries are set in " + userPip}) {
		t.Errorf("kept %q", kept)
	}
	env, _ = defaults.FailFastEnv(defaults.FailFastFiles{"pip": {pipConf}, "npm": {npmrc, userNpmrc}})
	for k := range defaults.FailFastVars["npm"] {
		if _, ok := env[k]; ok {
			t.Errorf("npm's retries in %s, yet %s is set", userNpmrc, k)
		}
	}
	if env["PIP_RETRIES"] != "1" {
		t.Errorf("pip's left out with npm's: %v", env)
	}
}

// TestFindFailFastFiles names the files pip and npm read for root and the
// virtual environment.
func TestFindFailFastFiles(t *testing.T) {
	t.Parallel()
	f := defaults.FindFailFastFiles("/opt/venv")
	for _, want := range []string{"/etc/pip.conf", "/opt/venv/pip.conf", "/root/.config/pip/pip.conf", "/root/.pip/pip.conf"} {
		if !slices.Contains(f["pip"], want) {
			t.Errorf("pip files %v lack %s", f["pip"], want)
		}
	}
	if !slices.Contains(f["npm"], "/root/.npmrc") || !slices.ContainsFunc(f["npm"], func(s string) bool { return strings.HasSuffix(s, "/etc/npmrc") }) {
		t.Errorf("npm files %v", f["npm"])
	}
}
