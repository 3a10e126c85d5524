package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/envd-dev/envd/client"
)

func TestParseSpec(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		m             client.PackageManager
		in            string
		name, version string
	}{
		{client.ManagerPip, "numpy==1.26.0", "numpy", "1.26.0"},
		{client.ManagerPip, "numpy", "numpy", ""},
		{client.ManagerPip, "pkg@1", "pkg@1", ""}, // pip's rules refuse it, precisely
		{client.ManagerNpm, "lodash@^4", "lodash", "^4"},
		{client.ManagerNpm, "@types/node@20.1.0", "@types/node", "20.1.0"},
		{client.ManagerNpm, "@types/node", "@types/node", ""},
		{client.ManagerNpm, "left-pad==1.3.0", "left-pad", "1.3.0"},
		{client.ManagerApt, "curl=7.88.1-10", "curl", "7.88.1-10"},
		{client.ManagerApt, "curl==7.88.1-10", "curl", "7.88.1-10"},
		{client.ManagerR, "ggplot2==3.4.0", "ggplot2", "3.4.0"},
	} {
		if got := parseSpec(c.m, c.in); got.Name != c.name || got.Version != c.version {
			t.Errorf("parseSpec(%s, %q) = %+v, want %q %q", c.m, c.in, got, c.name, c.version)
		}
	}
}

// TestPkgUsage: mistakes in the command line are reported before envd is
// asked anything (the address reaches nothing).
func TestPkgUsage(t *testing.T) {
	t.Parallel()
	for args, want := range map[string]string{
		"pkg":                          "pkg: give ls, add or rm",
		"pkg frob":                     `pkg: unknown subcommand "frob"`,
		"pkg add":                      "pkg add: name at least one package, or give --source",
		"pkg rm":                       "pkg rm: name at least one package",
		"pkg ls extra":                 `pkg ls: unexpected argument "extra"`,
		"pkg ls --manager cobol":       `pkg: --manager "cobol": give pip, npm, r or apt`,
		"pkg rm x --upgrade":           "pkg rm: --upgrade is for pkg add",
		"pkg add x --purge":            "pkg add: --purge is for pkg rm",
		"pkg add x --json":             "pkg add: --json is for pkg ls",
		"pkg ls --source /tmp/x.whl":   "pkg ls: --source is for pkg add",
		"pkg ls --manager apt --purge": "pkg ls: --purge is for pkg rm",
	} {
		var out, errb bytes.Buffer
		code := Main(append([]string{"--addr", "http://127.0.0.1:1"}, strings.Fields(args)...), nil, &out, &errb)
		if code != exitUsage || out.Len() != 0 || !strings.Contains(errb.String(), want) {
			t.Errorf("envctl %s: exit %d, stdout %q, stderr %q; want %d and %q", args, code, out.String(), errb.String(), exitUsage, want)
		}
	}
}
