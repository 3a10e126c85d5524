package e2e_test

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/envd-dev/envd/internal/testutil"
)

// shellCreate runs envctl shell create with args and returns the id it
// printed, alone on its line.
func shellCreate(t *testing.T, addr string, args ...string) string {
	t.Helper()
	r := envctl(t, nil, nil, append([]string{addr, "shell", "create"}, args...)...)
	id := strings.TrimSuffix(r.stdout, "\n")
	if r.code != 0 || r.stderr != "" || id == "" || strings.ContainsAny(id, " \t\n") {
		t.Fatalf("shell create %q: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
	}
	return id
}

// TestEnvctlShell: envctl shell create, run, list, state and close against
// a real envd; run prints a command's stdout and stderr apart and exits
// with its code, and the session's state carries from one run to the next.
func TestEnvctlShell(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{})
	addr := "--addr=" + e.url
	id := shellCreate(t, addr, "--cwd", "/tmp", "--env", "A=one", "--tag", "e2e-shell")
	run := func(stdin io.Reader, args ...string) ctlResult {
		t.Helper()
		return envctl(t, nil, stdin, append([]string{addr, "shell", "run", id}, args...)...)
	}
	want := func(r ctlResult, code int, stdout, stderr string) {
		t.Helper()
		if r.code != code || r.stdout != stdout || r.stderr != stderr {
			t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr, code, stdout, stderr)
		}
	}

	// State carries over: cd, export, functions. The words after -- are
	// joined into one line of bash, as ssh joins them.
	want(run(nil, "--", "cd", "/var", "&&", "export", "B=two;", "f()", "{", "echo", "fn;", "}"), 0, "", "")
	want(run(nil, "--", `echo $A $B; pwd; f`), 0, "one two\n/var\nfn\n", "")
	want(run(nil, "--", "echo out; echo err >&2"), 0, "out\n", "err\n")

	// Exit codes.
	want(run(nil, "--", "echo three; (exit 3)"), 3, "three\n", "")
	want(run(nil, "false"), 1, "", "")
	want(run(nil, "--", "sh -c 'kill -TERM $$'"), 128+15, "", "")
	r := run(nil, "--timeout", "300ms", "--", "echo before; sleep 30")
	if r.code != 124 || r.stdout != "before\n" || !strings.Contains(r.stderr, "ran out of its 300ms timeout") {
		t.Errorf("timeout: exit %d, stdout %q, stderr %q; want 124", r.code, r.stdout, r.stderr)
	}
	want(run(nil, "--", "echo $B after the timeout"), 0, "two after the timeout\n", "")

	// Input: envctl's stdin, from a pipe or a file; none from /dev/null
	// or with --no-stdin.
	want(run(strings.NewReader("a\nb\nc\n"), "--", "wc -l | tr -d ' '"), 0, "3\n", "")
	in := filepath.Join(t.TempDir(), "input")
	testutil.WriteFile(t, in, "from a file\n", 0o644)
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want(run(f, "cat"), 0, "from a file\n", "")
	want(run(nil, "--", "cat; echo eof"), 0, "eof\n", "")
	want(run(strings.NewReader("ignored\n"), "--no-stdin", "--", "wc -c | tr -d ' '"), 0, "0\n", "")
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB, in pieces
	want(run(strings.NewReader(big), "--", "wc -c | tr -d ' '"), 0, fmt.Sprintf("%d\n", len(big)), "")

	// list and state, as text and JSON.
	r = envctl(t, nil, nil, addr, "shell", "list")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "ID ") || !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "e2e-shell") {
		t.Errorf("shell list: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = envctl(t, nil, nil, addr, "shell", "ls", "--json")
	var list []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &list); r.code != 0 || err != nil || len(list) != 1 || list[0]["id"] != id || list[0]["tag"] != "e2e-shell" || list[0]["pid"].(float64) == 0 {
		t.Errorf("shell list --json: exit %d, stdout %q, %v", r.code, r.stdout, err)
	}
	r = envctl(t, nil, nil, addr, "shell", "state", id)
	for _, line := range []string{"id:", "cwd:", "/var", "last status:", "running:", "B=two", "A=one"} {
		if r.code != 0 || !strings.Contains(r.stdout, line) {
			t.Errorf("shell state: exit %d, stdout %q lacks %q", r.code, r.stdout, line)
		}
	}
	r = envctl(t, nil, nil, addr, "shell", "state", "--json", id)
	var st struct {
		ID           string            `json:"id"`
		Cwd          string            `json:"cwd"`
		Env          map[string]string `json:"env"`
		LastExitCode int               `json:"last_exit_code"`
		Commands     int               `json:"commands"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); r.code != 0 || err != nil || st.ID != id || st.Cwd != "/var" || st.Env["B"] != "two" || st.Commands < 10 {
		t.Errorf("shell state --json: exit %d, stdout %q, %v", r.code, r.stdout, err)
	}

	// A command that ends the shell ends the session, and envctl exits
	// with the shell's status.
	r = run(nil, "--", "echo bye; exit 5")
	if r.code != 5 || r.stdout != "bye\n" || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "envctl: ") || !strings.Contains(r.stderr, "session") {
		t.Errorf("exit 5: exit %d, stdout %q, stderr %q; want 5 and a line saying the session ended", r.code, r.stdout, r.stderr)
	}
	if r := run(nil, "true"); r.code == 0 || r.stdout != "" || !strings.HasPrefix(r.stderr, "envctl: ") {
		t.Errorf("run in an ended session: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	other := shellCreate(t, addr)
	if r := envctl(t, nil, nil, addr, "shell", "close", other); r.code != 0 || r.stdout != "" || r.stderr != "" {
		t.Errorf("shell close: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	errorLine(t, envctl(t, nil, nil, addr, "shell", "state", other), 4, other)
	errorLine(t, envctl(t, nil, nil, addr, "shell", "run", "no-such-session", "--", "true"), 4, "no-such-session")
	errorLine(t, envctl(t, nil, nil, addr, "shell", "attach", "no-such-session"), 4, "no-such-session")
	errorLine(t, envctl(t, nil, nil, addr, "shell", "close", "no-such-session"), 4, "no-such-session")
	if r := envctl(t, nil, nil, addr, "shell", "create", "--cwd", "/no/such/dir"); r.code == 0 || r.stdout != "" || !strings.Contains(r.stderr, "/no/such/dir") {
		t.Errorf("create in a missing directory: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestEnvctlShellUsage: a bad command line is refused before envd is
// asked (the address here reaches nothing), with exit 2 and one line.
func TestEnvctlShellUsage(t *testing.T) {
	t.Parallel()
	addr := "--addr=http://" + testutil.ClosedAddr(t)
	for args, want := range map[string]string{
		"shell":                           "shell: give create, run, attach, list, state or close",
		"shell frob":                      `shell: unknown subcommand "frob"`,
		"shell run":                       "shell run: give the ID of a session and a command",
		"shell run x":                     "shell run: no command given",
		"shell run x --timeout 5 -- true": `has no unit`,
		"shell list --pty":                "shell list: --pty is for shell create",
		"shell create --timeout 1s":       "shell create: --timeout is for shell run",
		"shell create extra":              `shell create: unexpected argument "extra"`,
		"shell state":                     "shell state: give the ID of a session",
		"shell state a b":                 `shell state: unexpected argument "b"`,
		"shell attach":                    "shell attach: give the ID of a session",
		"shell close":                     "shell close: give the ID of a session",
		"shell list extra":                `shell list: unexpected argument "extra"`,
	} {
		errorLine(t, envctl(t, nil, nil, append([]string{addr}, strings.Fields(args)...)...), 2, want)
	}
}

// TestEnvctlShellAttach: attach with commands piped in runs them one
// after another, without prompts, and leaves with the last status, or the
// session's when a command ends it.
func TestEnvctlShellAttach(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{})
	addr := "--addr=" + e.url
	id := shellCreate(t, addr, "--env", "A=one")
	attach := func(script string) ctlResult {
		t.Helper()
		return envctl(t, nil, strings.NewReader(script), addr, "shell", "attach", id)
	}
	r := attach("cd /etc\npwd\necho $A; echo err >&2\n\nexport B=two\necho a \\\nb\nfalse\n")
	if r.code != 1 || r.stdout != "/etc\none\na b\n" || r.stderr != "err\n" {
		t.Errorf("attach: exit %d, stdout %q, stderr %q; want 1, the commands' output", r.code, r.stdout, r.stderr)
	}
	// The state outlives the attach.
	r = attach("pwd; echo $B")
	if r.code != 0 || r.stdout != "/etc\ntwo\n" {
		t.Errorf("attach again: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = attach("echo bye\nexit 6\necho never\n")
	if r.code != 6 || r.stdout != "bye\n" || !strings.Contains(r.stderr, "session") {
		t.Errorf("attach, exit 6: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestEnvctlShellAttachTerminal: on a terminal, attach prompts with the
// cwd and the last status; Ctrl-C interrupts the running command, not
// envctl; Ctrl-D leaves.
func TestEnvctlShellAttachTerminal(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{})
	addr := "--addr=" + e.url
	id := shellCreate(t, addr, "--cwd", "/tmp")
	term := envctlOnTerminal(t, 100, 30, addr, "shell", "attach", id)
	cmd, screen, copied, type_ := term.cmd, &term.screen, term.copied, term.type_
	waitScreen(t, screen, "session "+id, "/tmp $ ")
	type_("cd /etc; echo started; sleep 30\r")
	waitScreen(t, screen, "started")
	testutil.Poll(t, "sleep to run in the session", func() bool {
		r := envctl(t, nil, nil, addr, "shell", "state", id)
		return strings.Contains(r.stdout, "sleep 30")
	})
	type_("\x03")
	waitScreen(t, screen, "/etc [130] $ ")
	type_("echo still here\r")
	// Keys typed before the prompt is drawn meet a terminal in cooked
	// mode, where Ctrl-D is no key: wait for the prompt.
	waitScreen(t, screen, "still here\r\n/etc $ ")
	type_("\x04")
	code := waitExit(t, cmd)
	testutil.RequireClosed(t, copied, "the end of envctl's output")
	if code != 0 {
		t.Errorf("exit %d, want 0; screen:\n%s", code, screen.String())
	}
}

// TestEnvctlShellSignalsAndQueue: a second run in a busy session says it
// waits and runs after the first; a signal to envctl interrupts its
// command, which exits 130.
func TestEnvctlShellSignalsAndQueue(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{})
	addr := "--addr=" + e.url
	id := shellCreate(t, addr)
	first, firstOut, _ := startCtl(t, addr, "shell", "run", id, "--", "echo ready; sleep 30")
	testutil.Poll(t, "the first command to start", func() bool { return firstOut.String() == "ready\n" })
	second, secondOut, secondErr := startCtl(t, addr, "shell", "run", id, "--", "echo second")
	testutil.Poll(t, "the second command to say it waits", func() bool {
		return strings.Contains(secondErr.String(), "waiting for 1 command(s) ahead in session "+id)
	})
	first.Process.Signal(syscall.SIGINT)
	if code := waitExit(t, first); code != 130 {
		t.Errorf("shell run after SIGINT: exit %d, want 130", code)
	}
	if code := waitExit(t, second); code != 0 || secondOut.String() != "second\n" {
		t.Errorf("the waiting command: exit %d, stdout %q, stderr %q", code, secondOut.String(), secondErr.String())
	}
}
