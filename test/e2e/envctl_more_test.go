package e2e_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/internal/testutil"
)

// envctl's exit codes (cmd/envctl's package comment has the table).
const (
	exitSandbox  = 1   // the operation failed in the sandbox
	exitUsage    = 2   // a bad command line
	exitRefused  = 3   // envd refused the token, the user or its permission
	exitNotFound = 4   // what envd was asked about does not exist
	exitFailed   = 125 // envctl, or the way to envd, failed; anything else
)

// refusedReason is envd's reason for a token that is not its own.
const refusedReason = "the access token in X-Access-Token is not this envd's"

// TestEnvctlTokenRefused: with a token envd does not take, every command
// that reaches envd says envd's reason on one line and exits 3; health
// says that envd answers but refuses the token, and says whether it took
// it, in words and in JSON.
func TestEnvctlTokenRefused(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{args: []string{"-access-token", "right", "-default-user", "root"}})
	addr := "--addr=" + e.url
	local := filepath.Join(t.TempDir(), "local")
	os.MkdirAll(filepath.Join(local, "d"), 0o755)
	os.WriteFile(filepath.Join(local, "f"), []byte("f"), 0o644)
	for _, args := range [][]string{
		{"run", "--", "true"},
		{"ps"},
		{"kill", "1"},
		{"ls", "/"},
		{"stat", "/"},
		{"cat", "/etc/hostname"},
		{"cp", filepath.Join(local, "f"), "envd:/tmp/x"},
		{"cp", "envd:/etc/hostname", filepath.Join(local, "g")},
		{"cp", "-r", filepath.Join(local, "d"), "envd:/tmp/x"},
		{"cp", "-r", "envd:/etc", filepath.Join(local, "e")},
		{"mv", "/tmp/a", "/tmp/b"},
		{"rm", "/tmp/a"},
		{"mkdir", "/tmp/a"},
		{"watch", "/tmp"},
		{"exec-code", "-"},
		{"languages"},
		{"contexts"},
		{"pkg", "ls"},
		{"ports"},
		{"forward", "0:80"},
		{"metrics"},
		{"envs"},
		{"health"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			r := envctl(t, nil, strings.NewReader("1"), append([]string{addr, "--token", "wrong"}, args...)...)
			errorLine(t, r, exitRefused, refusedReason)
			if strings.Contains(r.stderr, "HTTP status") {
				t.Errorf("stderr %q: a bare status, not envd's reason", r.stderr)
			}
		})
	}
	t.Run("health", func(t *testing.T) {
		t.Parallel()
		r := envctl(t, nil, nil, addr, "--token", "wrong", "health")
		if want := "envctl: envd at tcp " + strings.TrimPrefix(e.url, "http://") + " answers but refuses the token: " + refusedReason + "\n"; r.stderr != want {
			t.Errorf("health with a wrong token: stderr %q, want %q", r.stderr, want)
		}
		r = envctl(t, nil, nil, addr, "health")
		errorLine(t, r, exitRefused, "answers but wants an access token (--token or ENVCTL_TOKEN): this envd requires an access token")
		if r := envctl(t, nil, nil, addr, "--token", "right", "health"); r.code != 0 || !regexp.MustCompile(`^ok: envd at tcp 127\.0\.0\.1:\d+ answered in \S+; token accepted\n$`).MatchString(r.stdout) {
			t.Errorf("health with the token: %+v", r)
		}
		var h map[string]any
		r = envctl(t, nil, nil, addr, "--token", "wrong", "health", "--json")
		if r.code != exitRefused || json.Unmarshal([]byte(r.stdout), &h) != nil || h["ok"] != true || h["token"] != "refused" || h["token_error"] != refusedReason {
			t.Errorf("health --json with a wrong token: %+v", r)
		}
		r = envctl(t, []string{"ENVCTL_TOKEN=right"}, nil, addr, "health", "--json")
		if h = nil; r.code != 0 || json.Unmarshal([]byte(r.stdout), &h) != nil || h["token"] != "accepted" || h["token_error"] != nil {
			t.Errorf("health --json with the token: %+v", r)
		}
	})
	t.Run("an envd without a token", func(t *testing.T) {
		t.Parallel()
		open := startEnvd(t, startOptions{})
		if r := envctl(t, nil, nil, "--addr="+open.url, "health"); r.code != 0 || !strings.HasSuffix(r.stdout, "; no token needed\n") {
			t.Errorf("health: %+v", r)
		}
		var h map[string]any
		if r := envctl(t, nil, nil, "--addr="+open.url, "health", "--json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &h) != nil || h["token"] != "none" {
			t.Errorf("health --json: %+v", r)
		}
	})
}

// TestEnvctlFileCommands: rm, mkdir and mv, and their mistakes, each one
// clause on one line with the exit code of its kind.
func TestEnvctlFileCommands(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{args: []string{"-default-user", "root"}})
	addr := "--addr=" + e.url
	dir := t.TempDir()
	ok := func(t *testing.T, r ctlResult, stderr string) {
		t.Helper()
		if r.code != 0 || r.stdout != "" || r.stderr != stderr {
			t.Errorf("%+v; want exit 0, stderr %q", r, stderr)
		}
	}
	exists := func(p string) bool { _, err := os.Lstat(p); return err == nil }

	t.Run("mkdir", func(t *testing.T) {
		deep := filepath.Join(dir, "m", "a", "b")
		ok(t, envctl(t, nil, nil, addr, "mkdir", deep, filepath.Join(dir, "m2")), "")
		if fi, err := os.Stat(deep); err != nil || !fi.IsDir() || !exists(filepath.Join(dir, "m2")) {
			t.Errorf("mkdir made %v, %v", fi, err)
		}
		ok(t, envctl(t, nil, nil, addr, "mkdir", deep), "envctl: mkdir: "+deep+" exists already\n")
		os.WriteFile(filepath.Join(dir, "file"), nil, 0o644)
		errorLine(t, envctl(t, nil, nil, addr, "mkdir", filepath.Join(dir, "file")), exitFailed, "is not a directory")
		errorLine(t, envctl(t, nil, nil, addr, "mkdir"), exitUsage, "mkdir: no PATH given")
	})
	t.Run("mv", func(t *testing.T) {
		d := filepath.Join(dir, "mv")
		os.MkdirAll(filepath.Join(d, "into"), 0o755)
		os.WriteFile(filepath.Join(d, "a"), []byte("a"), 0o644)
		// A rename, then into a directory, then into one named with a
		// trailing slash, made with its parents.
		ok(t, envctl(t, nil, nil, addr, "mv", filepath.Join(d, "a"), filepath.Join(d, "b")), "")
		ok(t, envctl(t, nil, nil, addr, "mv", filepath.Join(d, "b"), filepath.Join(d, "into")), "")
		ok(t, envctl(t, nil, nil, addr, "mv", filepath.Join(d, "into", "b"), filepath.Join(d, "new", "deeper")+"/"), "")
		if b, err := os.ReadFile(filepath.Join(d, "new", "deeper", "b")); err != nil || string(b) != "a" || exists(filepath.Join(d, "a")) || exists(filepath.Join(d, "into", "b")) {
			t.Errorf("after the moves: %q, %v", b, err)
		}
		missing := filepath.Join(d, "missing")
		r := envctl(t, nil, nil, addr, "mv", missing, filepath.Join(d, "c"))
		errorLine(t, r, exitNotFound, "envctl: move "+missing+" to "+filepath.Join(d, "c")+": not found: "+missing+": no such file or directory\n")
		// Onto a path under a file: nothing moves.
		r = envctl(t, nil, nil, addr, "mv", filepath.Join(d, "new"), "/etc/hostname/x")
		errorLine(t, r, exitFailed, "/etc/hostname is a file, not a directory")
		if !exists(filepath.Join(d, "new", "deeper", "b")) {
			t.Error("a failed mv moved the file")
		}
		// A directory into itself.
		errorLine(t, envctl(t, nil, nil, addr, "mv", filepath.Join(d, "new"), filepath.Join(d, "new", "deeper")), exitFailed, "new")
		errorLine(t, envctl(t, nil, nil, addr, "mv", filepath.Join(d, "new")), exitUsage, "mv: give SRC and DST")
		errorLine(t, envctl(t, nil, nil, addr, "mv", "envd:/tmp/a", "/tmp/b"), exitUsage, "write them without envd:")
	})
	t.Run("rm", func(t *testing.T) {
		d := filepath.Join(dir, "rm")
		os.MkdirAll(filepath.Join(d, "tree", "sub"), 0o755)
		os.WriteFile(filepath.Join(d, "tree", "sub", "f"), nil, 0o644)
		os.WriteFile(filepath.Join(d, "f"), nil, 0o644)
		os.Symlink(filepath.Join(d, "tree"), filepath.Join(d, "link"))
		ok(t, envctl(t, nil, nil, addr, "rm", filepath.Join(d, "f")), "")
		// A link to a directory is removed without -r, and what it points
		// to stays.
		ok(t, envctl(t, nil, nil, addr, "rm", filepath.Join(d, "link")), "")
		if exists(filepath.Join(d, "f")) || exists(filepath.Join(d, "link")) || !exists(filepath.Join(d, "tree", "sub", "f")) {
			t.Error("rm of a file and a link: wrong files left")
		}
		errorLine(t, envctl(t, nil, nil, addr, "rm", filepath.Join(d, "tree")), exitFailed, "is a directory (-r removes it")
		ok(t, envctl(t, nil, nil, addr, "rm", "-r", filepath.Join(d, "tree")), "")
		if exists(filepath.Join(d, "tree")) {
			t.Error("rm -r left the tree")
		}
		missing := filepath.Join(d, "missing")
		errorLine(t, envctl(t, nil, nil, addr, "rm", missing), exitNotFound, "envctl: remove "+missing+": not found: no such file or directory\n")
		ok(t, envctl(t, nil, nil, addr, "rm", "-f", missing), "")
		errorLine(t, envctl(t, nil, nil, addr, "rm"), exitUsage, "rm: no PATH given")
	})
	t.Run("not found, once", func(t *testing.T) {
		// Each part of the message said once: what was done, the kind of
		// failure unless the message says it, and envd's reason.
		for _, tt := range []struct {
			args []string
			want string
		}{
			{[]string{"ls", "/no/such"}, "stat /no/such: not found: no such file or directory"},
			{[]string{"stat", "/no/such"}, "stat /no/such: not found: no such file or directory"},
			{[]string{"watch", "/no/such"}, "watch /no/such: not found: no such file or directory"},
			{[]string{"cat", "/no/such"}, "download /no/such: not found (HTTP 404): path '/no/such' does not exist"},
			{[]string{"kill", "999999"}, "send SIGTERM to process 999999: process with pid 999999 not found"},
		} {
			r := envctl(t, nil, nil, append([]string{addr}, tt.args...)...)
			if r.code != exitNotFound || r.stdout != "" || r.stderr != "envctl: "+tt.want+"\n" {
				t.Errorf("%q: %+v; want exit 4 and %q", tt.args, r, tt.want)
			}
		}
		r := envctl(t, nil, nil, addr, "run", "--", "no-such-program-envctl")
		errorLine(t, r, 127, "envctl: start no-such-program-envctl: invalid argument: executable not found in PATH ")
		if strings.Count(r.stderr, "not found") != 1 || strings.Count(r.stderr, "no-such-program-envctl") != 1 {
			t.Errorf("run of a missing program: %q says a thing twice", r.stderr)
		}
	})
}

// TestEnvctlContexts: contexts lists, restarts and removes code contexts;
// languages --json; an execution that a restart cuts short exits 1.
func TestEnvctlContexts(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{jupyter: true})
	addr := "--addr=" + e.url
	c := client.New(client.Options{Addr: e.url})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), codeTimeout)
	defer cancel()
	cc, err := c.CreateContext(ctx, client.ContextOptions{Dir: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}

	var langs []map[string]any
	if r := envctl(t, nil, nil, addr, "languages", "--json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &langs) != nil || len(langs) == 0 || langs[0]["language"] != "python" || langs[0]["kernel_name"] == nil {
		t.Errorf("languages --json: %+v", r)
	}
	r := envctl(t, nil, nil, addr, "contexts")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "ID ") || !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(cc.ID)+` +python +/tmp$`).MatchString(r.stdout) {
		t.Errorf("contexts: %+v", r)
	}
	var list []map[string]any
	if r := envctl(t, nil, nil, addr, "ctx", "ls", "--json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil || !hasContext(list, cc.ID, "/tmp") {
		t.Errorf("ctx ls --json: %+v", r)
	}

	// State, then a restart: the state is gone, the context stays.
	if r := envctl(t, nil, strings.NewReader("kept = 1"), addr, "exec-code", "--context", cc.ID); r.code != 0 {
		t.Fatalf("exec-code: %+v", r)
	}
	if r := envctl(t, nil, nil, addr, "contexts", "restart", cc.ID); r.code != 0 || r.stdout != "" || r.stderr != "" {
		t.Errorf("contexts restart: %+v", r)
	}
	if r := envctl(t, nil, strings.NewReader("kept"), addr, "exec-code", "--context", cc.ID); r.code != exitSandbox || !strings.Contains(r.stderr, "NameError") {
		t.Errorf("after the restart: %+v; want exit 1 and a NameError", r)
	}
	// An execution the restart of its context cuts short fails in the
	// sandbox: exit 1, saying why. It ignores the interrupt a restart
	// tries first, so the restart ends it.
	slow := filepath.Join(t.TempDir(), "slow.py")
	os.WriteFile(slow, []byte("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('going', flush=True)\ntime.sleep(60)\n"), 0o644)
	run, out, errb := startCtl(t, addr, "exec-code", "--context", cc.ID, slow)
	testutil.Poll(t, "the slow code to run", func() bool { return out.String() == "going\n" })
	if r := envctl(t, nil, nil, addr, "ctx", "restart", cc.ID); r.code != 0 {
		t.Errorf("ctx restart: %+v", r)
	}
	if code := waitExit(t, run); code != exitSandbox || errb.String() != "ContextRestarting: Context was restarted\n" {
		t.Errorf("exec-code cut short by a restart: exit %d, stderr %q; want exit 1 and the reason, once", code, errb.String())
	}

	if r := envctl(t, nil, nil, addr, "contexts", "rm", cc.ID); r.code != 0 || r.stdout != "" || r.stderr != "" {
		t.Errorf("contexts rm: %+v", r)
	}
	if r := envctl(t, nil, nil, addr, "contexts", "--json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil || hasContext(list, cc.ID, "/tmp") {
		t.Errorf("contexts after rm: %+v", r)
	}
	errorLine(t, envctl(t, nil, nil, addr, "contexts", "rm", cc.ID), exitNotFound, cc.ID)
	errorLine(t, envctl(t, nil, nil, addr, "contexts", "restart", "no-such-context"), exitNotFound, "no-such-context")
	errorLine(t, envctl(t, nil, nil, addr, "contexts", "frob"), exitUsage, `unknown subcommand "frob"`)
	errorLine(t, envctl(t, nil, nil, addr, "contexts", "rm"), exitUsage, "give the ID of a context")
	errorLine(t, envctl(t, nil, nil, addr, "contexts", "restart", "--json", "x"), exitUsage, "--json is for contexts ls")
}

func hasContext(list []map[string]any, id, cwd string) bool {
	for _, c := range list {
		if c["id"] == id && c["language"] == "python" && c["cwd"] == cwd {
			return true
		}
	}
	return false
}

// TestEnvctlCompletion drives each shell's completion script, as envctl
// prints it, in that shell (bash, zsh and fish: scripts/install-deps.sh installs them).
func TestEnvctlCompletion(t *testing.T) {
	t.Parallel()
	files := t.TempDir()
	os.WriteFile(filepath.Join(files, "alpha.txt"), nil, 0o644)
	// What each line typed so far completes to; FILES is the shell's own
	// file completion.
	cases := []struct{ line, want string }{
		{"envctl m", "metrics mkdir mv"},
		{"envctl --addr http://127.0.0.1:1 ru", "run"},
		{"envctl co", "completion contexts"},
		{"envctl rm -", "--addr --fc-uds --insecure --token --unix --user --vsock -R -f -r"},
		{"envctl pkg ", "add ls rm"},
		{"envctl pkg add --manager ", "apt npm pip r"},
		{"envctl ctx ", "ls restart rm"},
		{"envctl ctx rm ", ""},
		{"envctl ps ", ""},
		{"envctl kill 1 --signal K", "KILL"},
		{"envctl completion ", "bash fish zsh"},
		{"envctl help ex", "exec-code"},
		{"envctl ls " + files + "/al", "FILES"},
		{"envctl --unix " + files + "/al", "FILES"},
		{"envctl run -- ls " + files + "/al", "FILES"},
	}
	drivers := map[string]struct {
		shell  string
		driver string
	}{
		"bash": {"bash", `
source "$1"
# _envctl_files calls compopt to fall back to bash's file completion.
compopt() { FELL=1; }
while IFS= read -r line; do
  FELL=
  COMP_LINE="$line"; COMP_POINT=${#line}
  # bash's words: split at blanks, and at = and : too
  s="${line//=/ = }"; s="${s//:/ : }"
  read -ra COMP_WORDS <<< "$s"
  [[ $line =~ [[:space:]]$ ]] && COMP_WORDS+=("")
  COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
  COMPREPLY=()
  _envctl
  if [[ -n $FELL ]]; then echo FILES; else echo "${COMPREPLY[*]}"; fi
done
`},
		"zsh": {"zsh", `
compdef() { }
source "$1"
typeset -a got
compadd() { [[ $1 == -- ]] && shift; local w; for w in "$@"; do [[ $w == ${words[CURRENT]}* ]] && got+=($w); done }
_files() { got+=(FILES) }
while IFS= read -r line; do
  got=()
  words=(${(z)line})
  [[ $line == *' ' ]] && words+=("")
  CURRENT=${#words}
  _envctl
  print -r -- "${got[*]}"
done
`},
		"fish": {"fish", `
source $argv[1]
while read -l line
  set -l got (complete -C "$line" | string replace -r '\t.*' '')
  if string match -q -- '*/al' $line
    if contains -- (string replace -r '.*/' '' -- $got[1]) alpha.txt
      set got FILES
    end
  end
  echo (string join -- ' ' $got)
end
`},
	}
	for name, d := range drivers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if _, err := exec.LookPath(d.shell); err != nil {
				t.Fatalf("%s is not installed: scripts/install-deps.sh installs it", d.shell)
			}
			r := envctl(t, nil, nil, "completion", name)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("completion %s: %+v", name, r)
			}
			script := filepath.Join(t.TempDir(), "envctl."+name)
			os.WriteFile(script, []byte(r.stdout), 0o644)
			if out, err := exec.Command(d.shell, "-n", script).CombinedOutput(); err != nil {
				t.Fatalf("%s -n: %v\n%s", d.shell, err, out)
			}
			driver := filepath.Join(t.TempDir(), "driver")
			os.WriteFile(driver, []byte(d.driver), 0o644)
			var lines []string
			for _, c := range cases {
				lines = append(lines, c.line)
			}
			args := []string{driver, script}
			if name == "zsh" {
				args = append([]string{"-f"}, args...)
			}
			cmd := exec.Command(d.shell, args...)
			cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", d.shell, err, out)
			}
			got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
			if len(got) != len(cases) {
				t.Fatalf("%d answers for %d lines:\n%s", len(got), len(cases), out)
			}
			for i, c := range cases {
				words := strings.Fields(got[i])
				slices.Sort(words)
				if strings.Join(words, " ") != c.want {
					t.Errorf("%s: %q completes to %q, want %q", name, c.line, strings.Join(words, " "), c.want)
				}
			}
		})
	}
	errorLine(t, envctl(t, nil, nil, "completion", "tcsh"), exitUsage, `completion: unknown shell "tcsh": give bash, zsh or fish`)
	errorLine(t, envctl(t, nil, nil, "completion"), exitUsage, "completion: give one shell")
	// It needs no envd, nor a sane environment to reach one.
	if r := envctl(t, []string{"ENVCTL_ADDR=http://127.0.0.1:1", "ENVCTL_UNIX=/no/such.sock"}, nil, "completion", "bash"); r.code != 0 || !strings.Contains(r.stdout, "complete -F _envctl envctl") {
		t.Errorf("completion bash with two ways to envd in the environment: %+v", r)
	}
}

// TestEnvctlVersionAndHelp: --version carries the version envd -version
// prints; help writes flags as --name, as they are taken.
func TestEnvctlVersionAndHelp(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(envdBin, "-version").Output()
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(out))
	if !regexp.MustCompile(`^\d+\.\d+\.\d+`).MatchString(version) {
		t.Fatalf("envd -version: %q", version)
	}
	for _, arg := range []string{"--version", "-version", "version"} {
		if r := envctl(t, nil, nil, arg); r.code != 0 || !strings.HasPrefix(r.stdout, "envctl "+version+" (") || r.stderr != "" {
			t.Errorf("envctl %s: %+v; want it to start with envctl %s", arg, r, version)
		}
	}
	r := envctl(t, nil, nil, "help", "run")
	if r.code != 0 || !strings.Contains(r.stdout, "usage: envctl run [--pty] [--cwd DIR]") || !strings.Contains(r.stdout, "\n  --cwd DIR\n") || strings.Contains(r.stdout, "\n  -cwd") {
		t.Errorf("help run: %+v", r)
	}
	r = envctl(t, nil, nil, "help")
	if r.code != 0 || !strings.Contains(r.stdout, "\n  --addr URL\n") || !strings.Contains(r.stdout, "exit codes:\n  0    ok\n") || !strings.Contains(r.stdout, "  completion  ") {
		t.Errorf("help: %+v", r)
	}
	if r := envctl(t, nil, nil, "help", "ctx"); r.code != 0 || !strings.HasPrefix(r.stdout, "usage: envctl contexts ") {
		t.Errorf("help ctx: %+v", r)
	}
}
