package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/envd-dev/envd/client"
)

// TestOneEnvironment: commands (pipes and terminals) and the kernels of
// every language get one PATH and one locale; TERM says what a process's
// output goes to.
func TestOneEnvironment(t *testing.T) {
	t.Parallel()
	// LANG set but empty is unset: the sandbox's locale is C.UTF-8.
	e := startEnvd(t, startOptions{jupyter: true, env: []string{"LANG=", "PATH=/opt/envd-test/bin:.:/usr/bin:/bin"}})
	c := client.New(client.Options{Addr: e.url})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), codeTimeout)
	defer cancel()

	vars := func(out string) map[string]string {
		m := map[string]string{}
		for _, l := range strings.Split(strings.ReplaceAll(out, "\r\n", "\n"), "\n") {
			if k, v, ok := strings.Cut(l, "="); ok {
				m[k] = v
			}
		}
		return m
	}
	const show = `printf 'PATH=%s\nLANG=%s\nTERM=%s\n' "$PATH" "$LANG" "$TERM"`
	pipe, err := c.Run(ctx, client.Command{Name: "/bin/sh", Args: []string{"-c", show}})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, e.stderr)
	}
	cmd := vars(string(pipe.Stdout))
	// envd's PATH, without ".", with the standard directories it lacked,
	// after the shared virtual environment when there is one.
	want := "/opt/envd-test/bin:/usr/bin:/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/sbin"
	if p := cmd["PATH"]; p != want && !strings.HasSuffix(p, "/bin:"+want) {
		t.Errorf("command PATH %q, want %q (after a venv's bin at most)", p, want)
	}
	if cmd["LANG"] != "C.UTF-8" || cmd["TERM"] != "dumb" {
		t.Errorf("command LANG %q TERM %q, want C.UTF-8 and dumb", cmd["LANG"], cmd["TERM"])
	}
	tty, err := c.Run(ctx, client.Command{Name: "/bin/sh", Args: []string{"-c", show}, PTY: &client.Size{Cols: 80, Rows: 24}})
	if err != nil {
		t.Fatalf("run in a terminal: %v", err)
	}
	if term := vars(string(tty.Stdout)); term["TERM"] != "xterm-256color" || term["PATH"] != cmd["PATH"] || term["LANG"] != "C.UTF-8" {
		t.Errorf("terminal environment %v", term)
	}

	for _, tc := range []struct{ lang, code string }{
		{"python", "import os\nprint('PATH=' + os.environ['PATH'])\nprint('LANG=' + os.environ['LANG'])"},
		{"r", `cat("PATH=", Sys.getenv("PATH"), "\nLANG=", Sys.getenv("LANG"), "\n", sep = "")`},
		{"bash", `echo "PATH=$PATH"; echo "LANG=$LANG"`},
		{"javascript", `console.log("PATH=" + Deno.env.get("PATH") + "\nLANG=" + Deno.env.get("LANG"))`},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			run, err := c.Execute(ctx, tc.code, client.ExecOptions{Language: tc.lang})
			if err != nil {
				t.Fatal(err)
			}
			res, err := run.Wait()
			if err != nil || res.Reason != client.EndOK {
				t.Fatalf("%+v, %v", res, err)
			}
			k := vars(res.Stdout)
			if k["PATH"] != cmd["PATH"] || k["LANG"] != "C.UTF-8" {
				t.Errorf("kernel PATH %q LANG %q; commands get PATH %q LANG C.UTF-8", k["PATH"], k["LANG"], cmd["PATH"])
			}
		})
	}
}

// TestCommandsSignalsDefault: a command starts with every signal at its
// default disposition, whatever envd ignores itself or was started with
// ignored (an ignored signal survives exec): a pipe's writer dies of
// SIGPIPE quietly, as in a terminal, and a SIGHUP ends a command.
func TestCommandsSignalsDefault(t *testing.T) {
	t.Parallel()
	for _, ignore := range []string{"", "HUP PIPE INT QUIT USR1 TERM"} {
		t.Run("ignored="+ignore, func(t *testing.T) {
			t.Parallel()
			e := startEnvd(t, startOptions{ignore: ignore})
			c := client.New(client.Options{Addr: e.url})
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), codeTimeout)
			defer cancel()
			res, err := c.Run(ctx, client.Command{Name: "/bin/sh", Args: []string{"-c",
				`grep -E '^Sig(Ign|Blk):' /proc/self/status; yes | head -1; sleep 30 & kill -HUP $!; wait $! 2>/dev/null; echo "sleep ended with $?"`}})
			if err != nil {
				t.Fatalf("run: %v\n%s", err, e.stderr)
			}
			// Signals 1-31 (the low 31 bits): a realtime signal may be
			// ignored by what built envd (the race runtime ignores 32,
			// glibc's own), which no command expects to use.
			var blk, ign uint64
			n, _ := fmt.Sscanf(string(res.Stdout), "SigBlk:\t%x\nSigIgn:\t%x\n", &blk, &ign)
			rest := string(res.Stdout[min(len(res.Stdout), len("SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n")):])
			if n != 2 || blk&0x7fffffff != 0 || ign&0x7fffffff != 0 || rest != "y\nsleep ended with 129\n" || len(res.Stderr) != 0 {
				t.Errorf("stdout %q, stderr %q; want no standard signal blocked or ignored, then y and 129, and nothing on stderr", res.Stdout, res.Stderr)
			}
			if ignore != "" && !e.alive() {
				t.Errorf("envd ended")
			}
		})
	}
}
