package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/creack/pty"

	"github.com/envd-dev/envd/client"

	"github.com/envd-dev/envd/internal/testutil"
)

// TestEnvctlExecCode runs envctl exec-code against a real envd running
// Jupyter: a file, stdin, another language, a given context, and the
// interactive prompt, whose lines share their state.
func TestEnvctlExecCode(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{jupyter: true})
	addr := "--addr=" + e.url

	file := filepath.Join(t.TempDir(), "code.py")
	os.WriteFile(file, []byte("x = 7\nprint(x)\nx\n"), 0o644)
	if r := envctl(t, nil, nil, addr, "exec-code", file); r.code != 0 || r.stdout != "7\n7\n" || r.stderr != "" {
		t.Errorf("a file: %+v\n%s", r, e.stderr)
	}
	// The default context keeps x for the next run, from stdin.
	if r := envctl(t, nil, strings.NewReader("import sys\nprint(x)\nprint('on stderr', file=sys.stderr)"), addr, "exec-code", "-"); r.code != 0 || r.stdout != "7\n" || r.stderr != "on stderr\n" {
		t.Errorf("stdin: %+v", r)
	}
	if r := envctl(t, nil, strings.NewReader("1/0"), addr, "exec-code"); r.code != 1 || !strings.Contains(r.stderr, "ZeroDivisionError: division by zero") || !strings.Contains(r.stderr, "Traceback") {
		t.Errorf("an exception: %+v; want exit 1 and the traceback", r)
	}
	// Another language has its own default context.
	if r := envctl(t, nil, strings.NewReader("console.log(typeof x)"), addr, "exec-code", "--lang", "javascript"); r.code != 0 || r.stdout != "undefined\n" {
		t.Errorf("--lang javascript: %+v", r)
	}
	c := client.New(client.Options{Addr: e.url})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), codeTimeout)
	defer cancel()
	cc, err := c.CreateContext(ctx, client.ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := envctl(t, nil, strings.NewReader("y = 'mine'\ny"), addr, "exec-code", "--context", cc.ID); r.code != 0 || r.stdout != "mine\n" {
		t.Errorf("--context: %+v", r)
	}
	t.Run("code queued behind another says so", func(t *testing.T) {
		// The first execution holds the context until the test lets it go.
		gate := filepath.Join(t.TempDir(), "go")
		first, err := c.Execute(ctx, fmt.Sprintf("import os, time\nwhile not os.path.exists(%q): time.sleep(0.02)", gate),
			client.ExecOptions{ContextID: cc.ID})
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(envctlBin(t), addr, "exec-code", "--context", cc.ID, "-")
		cmd.Env = ctlEnv()
		cmd.Stdin = strings.NewReader("print('after')")
		var out bytes.Buffer
		cmd.Stdout = &out
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stderr).ReadString('\n')
		if want := "envctl: waiting for execution " + first.ID() + " in this context\n"; line != want {
			t.Errorf("stderr %q (%v), want %q", line, err, want)
		}
		if err := os.WriteFile(gate, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		rest, _ := io.ReadAll(stderr)
		if err := cmd.Wait(); err != nil || out.String() != "after\n" {
			t.Errorf("the queued run: %v, stdout %q, stderr %q", err, out.String(), rest)
		}
		if res, err := first.Wait(); err != nil || res.Reason != client.EndOK {
			t.Errorf("the first run: %+v, %v", res, err)
		}
	})
	errorLine(t, envctl(t, nil, strings.NewReader("1"), addr, "exec-code", "--context", "no-such-context"), exitNotFound, "not found")
	oneErrorLine(t, envctl(t, nil, strings.NewReader("1"), addr, "exec-code", "--lang", "cobol"), "available languages")

	t.Run("interactive prompt keeps state", func(t *testing.T) {
		cmd := exec.Command(envctlBin(t), addr, "exec-code")
		cmd.Env = ctlEnv()
		tty, err := pty.Start(cmd)
		if err != nil {
			t.Fatal(err)
		}
		defer tty.Close()
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
		})
		var screen syncBuffer
		go io.Copy(&screen, tty)
		// Keys go once the prompt is up (the terminal is raw then: keys
		// typed while code runs are the terminal's own, Ctrl-C a SIGINT).
		prompts := 0
		send := func(keys string) {
			t.Helper()
			prompts++
			testutil.Poll(t, fmt.Sprintf("prompt %d", prompts), func() bool { return strings.Count(screen.String(), ">>> ") >= prompts })
			io.WriteString(tty, keys)
		}
		count := func(s string) func() bool {
			n := strings.Count(screen.String(), s)
			return func() bool { return strings.Count(screen.String(), s) > n }
		}
		send("a = 'first'\n")
		send("b = 'second'\n")
		first := count("first\r\n")
		send("print(a)\n")
		testutil.Poll(t, "a", first)
		send("b\n")
		testutil.Poll(t, "b", func() bool { return strings.Contains(screen.String(), "second\r\n") })
		send("print(nothing)\n")
		testutil.Poll(t, "the error", func() bool { return strings.Contains(screen.String(), "NameError") })
		// A block: a line ending in ":" opens it, an empty line closes it.
		send("for i in range(2):\n    print('loop', i)\n\n")
		testutil.Poll(t, "the loop", func() bool { return strings.Contains(screen.String(), "loop 1\r\n") })
		// Line editing: three Lefts, a t typed in, a Backspace at the end.
		first = count("first\r\n")
		send("prin(a)x\x1b[D\x1b[D\x1b[D\x1b[Dt\x1b[F\x7f\r")
		testutil.Poll(t, "the edited line", first)
		// History: Up is the line before.
		first = count("first\r\n")
		send("\x1b[A\r")
		testutil.Poll(t, "the line from history", first)
		// Ctrl-C at the prompt drops the line, as Python's does, and keeps
		// it out of the history.
		interrupt := count("KeyboardInterrupt")
		send("this is not python\x03")
		testutil.Poll(t, "KeyboardInterrupt", interrupt)
		first = count("first\r\n")
		send("\x1b[A\n")
		testutil.Poll(t, "history without the dropped line", first)
		if strings.Contains(screen.String(), "SyntaxError") {
			t.Errorf("the line dropped by Ctrl-C ran:\n%s", screen.String())
		}
		// A Ctrl-C while code runs interrupts it, not envctl.
		send("print('going', flush=True); import time; time.sleep(30)\n")
		testutil.Poll(t, "the sleep to run", func() bool { return strings.Contains(screen.String(), "going\r\n") })
		interrupt = count("KeyboardInterrupt")
		io.WriteString(tty, "\x03")
		testutil.Poll(t, "the interrupt", interrupt)
		first = count("first\r\n")
		send("print(a)\n")
		testutil.Poll(t, "a again", first)
		prompts++
		testutil.Poll(t, "the last prompt", func() bool { return strings.Count(screen.String(), ">>> ") >= prompts })
		io.WriteString(tty, "\x04") // Ctrl-D
		if code := waitExit(t, cmd); code != 0 {
			t.Errorf("exit %d after Ctrl-D; screen:\n%s", code, screen.String())
		}
	})
}
