package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/envd-dev/envd/client"
)

// flagInUsage is a flag as a usage line writes it, with the word for its
// value if one follows: "--cwd DIR", "-r".
var flagInUsage = regexp.MustCompile(`(?:^|[\s\[|])(-{1,2})([a-z][a-z0-9-]*)(?:[ =]([A-Z][A-Z0-9:=_.|,\[\]]*|[a-z0-9]+(?:\|[a-z0-9]+)+))?`)

// TestUsageLinesMatchFlags: every flag a usage line names is the
// command's (or a global one), written as help prints it (--name, -x for
// one letter), with the same word for its value as help shows, and only
// flags that take a value have one.
func TestUsageLinesMatchFlags(t *testing.T) {
	t.Parallel()
	for _, c := range commands {
		fs := newFlagSet(c.name)
		(&globals{}).register(fs, noEnv)
		if c.flags != nil {
			c.flags(fs)
		}
		for _, m := range flagInUsage.FindAllStringSubmatch(c.args, -1) {
			dashes, name, word := m[1], m[2], strings.TrimRight(m[3], "].")
			f := fs.Lookup(name)
			if f == nil {
				t.Errorf("%s: usage %q names %s%s, which it does not have", c.name, c.args, dashes, name)
				continue
			}
			if dashes+name != flagName(name) {
				t.Errorf("%s: usage %q writes %s%s, help writes %s", c.name, c.args, dashes, name, flagName(name))
			}
			want, _ := flag.UnquoteUsage(f)
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
				want = ""
			}
			if strings.Contains(word, "|") && strings.ToLower(word) == word && want != "" {
				continue // the values it takes, spelled out
			}
			if word != want {
				t.Errorf("%s: usage %q gives %s the value %q, help %q", c.name, c.args, flagName(name), word, want)
			}
		}
	}
}

// TestHelpWritesFlagsAsUsage: help prints --name (and -x for a one-letter
// flag), never -name.
func TestHelpWritesFlagsAsUsage(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	usage(&b)
	for _, c := range commands {
		cmdUsage(&b, c)
	}
	if m := regexp.MustCompile(`(?m)^\s+-[a-z][a-z-]+`).FindString(b.String()); m != "" {
		t.Errorf("help writes a flag as %q", m)
	}
	for _, want := range []string{"  --addr URL\n", "  --pty\n", "  -r\tcopy directories", "exit codes:", "  4    not found"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

// TestExitCode: a failure's exit code says its kind (the package comment's
// table): envd's answers by their Connect code, wrapped or not.
func TestExitCode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want int
	}{
		{usageError{"bad"}, exitUsage},
		{exitError{code: 7}, 7},
		{fmt.Errorf("cp: %w", exitError{code: exitSandbox, msg: "x"}), exitSandbox},
		{&client.Error{Code: connect.CodeNotFound}, exitNotFound},
		{fmt.Errorf("cat /x: %w", &client.Error{Code: connect.CodeNotFound}), exitNotFound},
		{&client.Error{Code: connect.CodeUnauthenticated, Status: 401}, exitRefused},
		{&client.Error{Code: connect.CodePermissionDenied}, exitRefused},
		{&client.Error{Code: connect.CodeUnavailable}, exitFailed},
		{&client.Error{Code: connect.CodeInvalidArgument}, exitFailed},
		// Only envd's answers are classified: a local file is envctl's.
		{fmt.Errorf("cp: %w", fs.ErrNotExist), exitFailed},
		{errors.New("boom"), exitFailed},
	}
	for _, tt := range tests {
		if got := exitCode(tt.err); got != tt.want {
			t.Errorf("exitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

// TestCompletionModel: completion knows every command, and which flags
// take a value is the same for a name in every command.
func TestCompletionModel(t *testing.T) {
	t.Parallel()
	m := completionModel()
	takes := map[string]bool{}
	check := func(where string, f compFlag) {
		if v, ok := takes[f.name]; ok && v != f.value {
			t.Errorf("%s: --%s takes a value in one command and not in another: completion would skip the wrong word", where, f.name)
		}
		takes[f.name] = f.value
	}
	for _, f := range m.globals {
		check("global", f)
	}
	for _, c := range m.commands {
		for _, f := range c.flags {
			check(c.names[0], f)
		}
	}
	for _, name := range []string{"bash", "zsh", "fish"} {
		script := completionScripts[name](m)
		for _, c := range commands {
			if !strings.Contains(script, c.name) {
				t.Errorf("the %s script lacks %s", name, c.name)
			}
		}
	}
	for n := range flagWords {
		if !takes[n] {
			t.Errorf("flagWords names --%s, which is no flag that takes a value", n)
		}
	}
	for n := range fileFlags {
		if !takes[n] {
			t.Errorf("fileFlags names --%s, which is no flag that takes a value", n)
		}
	}
}

// TestFlagErrors: the flag package's errors name the flag as help does.
func TestFlagErrors(t *testing.T) {
	t.Parallel()
	for args, want := range map[string]string{
		"--frob ps":                 "flag provided but not defined: --frob (run envctl help)",
		"ls --depth":                "ls: flag needs an argument: --depth (usage: envctl ls",
		"ls --depth x":              `ls: invalid value "x" for flag --depth: parse error (usage: envctl ls`,
		"run --timeout -5s -- true": `run: invalid value "-5s" for flag --timeout: "-5s": want a positive duration (usage: envctl run`,
		"cp -x a envd:b":            "cp: flag provided but not defined: -x (usage: envctl cp",
		"ps --json=maybe":           `ps: invalid boolean value "maybe" for --json: parse error (usage: envctl ps`,
	} {
		var out, errb bytes.Buffer
		code := Main(append([]string{"--addr", "http://127.0.0.1:1"}, strings.Fields(args)...), nil, &out, &errb)
		if code != exitUsage || !strings.HasPrefix(errb.String(), "envctl: "+want) {
			t.Errorf("envctl %s: exit %d, stderr %q; want %d and %q", args, code, errb.String(), exitUsage, want)
		}
	}
}
