package startup_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/envd-dev/envd/internal/jupyter/startup"
	"github.com/envd-dev/envd/internal/testutil"
)

func TestBashKernel(t *testing.T) {
	t.Parallel()
	work := t.TempDir()
	chdirTo := filepath.Join(work, "it's a \"dir\" $HOME é")
	if err := os.Mkdir(chdirTo, 0o755); err != nil {
		t.Fatal(err)
	}

	perExec := map[string]*string{"ENVD_T_PRESET": nil}
	for k, v := range tricky {
		perExec[k] = ptr(v)
	}
	setCode, err := startup.SetEnvCode("bash", perExec)
	if err != nil {
		t.Fatal(err)
	}
	globalCode, err := startup.SetGlobalEnvCode("bash", map[string]*string{"ENVD_T_GLOBAL": ptr("global 'v'\nx"), "ENVD_T_QUOTES": ptr("global quotes")})
	if err != nil {
		t.Fatal(err)
	}
	restoreCode, _ := startup.RestoreEnvCode("bash")
	chdirCode, err := startup.ChdirCode("bash", chdirTo)
	if err != nil {
		t.Fatal(err)
	}
	envNames := []string{"ENVD_T_QUOTES", "ENVD_T_NEWLINE", "ENVD_T_UNICODE", "ENVD_T_EMPTY", "ENVD_T_PRESET", "ENVD_T_GLOBAL"}
	// The exported environment as a child process sees it, as JSON.
	dumpEnv := python + ` -c 'import os, json; print(json.dumps({k: os.environ.get(k) for k in ` +
		pyList(envNames) + `}))'`

	type bashCell struct {
		name string
		cell cell
	}
	released := filepath.Join(testutil.WorkDir(t), "one-received")
	// "stderr order" writes each line once the driver received the one
	// before: the order it gets them in is the order they were written.
	got1, got2, got3 := filepath.Join(work, "got1"), filepath.Join(work, "got2"), filepath.Join(work, "got3")
	waitFor := func(p string) string { return "; while [ ! -e " + p + " ]; do sleep 0.05; done; " }
	cells := []bashCell{
		{"state set", cell{Code: "x=41\ncd /tmp\nexport FOO=bar\nf() { echo \"f:$1\"; }"}},
		{"state get", cell{Code: "echo $((x+1)) $(pwd) $FOO; f arg"}},
		{"shell env", cell{Code: `echo "$TERM $PAGER [$PYTHONPATH] $-"`}},
		{"exit code", cell{Code: "echo before\n(exit 3)"}},
		{"false", cell{Code: "false"}},
		{"true after false", cell{Code: "false; true"}},
		{"syntax error", cell{Code: "echo ok\nif then fi"}},
		// $? at the start of a cell is the last status of the cell before
		// that had code: directive-only cells (envd's) do not count.
		{"status 3", cell{Code: "(exit 3)"}},
		{"status directive only", cell{Code: restoreCode, Silent: true}},
		{"status seen", cell{Code: "echo $?"}},
		{"status zero", cell{Code: "echo $?"}},
		{"status 5", cell{Code: "(exit 5)"}},
		{"status after directives", cell{Code: "#%envd setenv {\"ENVD_T_S\": \"v\"}\necho \"$? $ENVD_T_S\""}},
		{"status restore", cell{Code: restoreCode, Silent: true}},
		// set -e applies to the user's commands, not to the carried status
		// (that of an interrupted command: a failing cell under set -e
		// ends the shell).
		{"errexit", cell{Code: "set -e"}},
		{"errexit interrupted", cell{Code: "sleep 100", InterruptAfter: fptr(1.5), Timeout: 30}},
		{"errexit after", cell{Code: "echo \"$? $x\"; set +e"}},
		// "two" waits for the driver to have received "one": buffered
		// output would never get there (the cell then times out).
		{"streaming", cell{Code: "echo one; while [ ! -e " + released + " ]; do sleep 0.05; done; echo two", TouchOnStream: released, Timeout: 120}},
		{"stderr", cell{Code: "echo out; echo err >&2"}},
		{"stderr order", cell{Code: "echo out" + waitFor(got1) + "echo err >&2" + waitFor(got2) + "echo out2" + waitFor(got3) + "printf err2 >&2",
			TouchOnStreams: []string{got1, got2, got3}, Timeout: 120}},
		{"stderr tty", cell{Code: "[ -t 2 ] && stty size <&2"}},
		{"stdin is empty", cell{Code: "read line; echo \"read=$? line=[$line]\"; cat; echo done"}},
		{"multiline", cell{Code: "for i in 1 2 3; do\n  echo \"i=$i\"\ndone\ncat <<'EOF'\nheredoc $x\nEOF\necho \"no newline at end\""}},
		{"no trailing newline", cell{Code: "printf 'abc'"}},
		{"unicode", cell{Code: "echo 'é 漢字 😀'"}},
		{"interrupt", cell{Code: "echo sleeping; sleep 100; echo not-reached", InterruptAfter: fptr(1.5), Timeout: 30}},
		{"after interrupt", cell{Code: "echo alive $x"}},
		{"interrupt loop", cell{Code: "while true; do :; done", InterruptAfter: fptr(1), Timeout: 30}},
		{"after loop", cell{Code: "echo alive2 $x"}},
		{"set env preset", cell{Code: "export ENVD_T_PRESET=preset ENVD_T_QUOTES=orig", Silent: true}},
		{"global env", cell{Code: globalCode, Silent: true}},
		{"apply env", cell{Code: setCode, Silent: true}},
		{"read env", cell{Code: dumpEnv}},
		{"restore env", cell{Code: restoreCode, Silent: true}},
		{"read restored", cell{Code: dumpEnv}},
		{"prepended", cell{Code: setCode + "\nprintf '%s' \"$ENVD_T_QUOTES\""}},
		{"restore prepended", cell{Code: restoreCode, Silent: true}},
		{"bad directive", cell{Code: "#%envd setenv {\"bad name\": \"x\"}\necho hi"}},
		{"chdir", cell{Code: chdirCode, Silent: true}},
		{"pwd", cell{Code: "pwd"}},
		{"exit", cell{Code: "echo bye; exit 4"}},
		{"status after exit", cell{Code: "echo $?"}},
		{"after exit", cell{Code: "echo \"x=[$x] pwd=$(pwd)\"; " + dumpEnv}},
		{"exit 0", cell{Code: "exit"}},
		{"after exit 0", cell{Code: "echo fresh"}},
	}
	plain := make([]cell, len(cells))
	for i, c := range cells {
		plain[i] = c.cell
	}
	res := runKernel(t, startup.BashKernelName, work, nil, plain)
	got := map[string]cellResult{}
	for i, c := range cells {
		got[c.name] = res[i]
	}

	stdoutIs := func(t *testing.T, name, want string) {
		t.Helper()
		got[name].mustOK(t, name)
		if out := got[name].stdout(t); out != want {
			t.Errorf("%s: stdout %q, want %q", name, out, want)
		}
	}
	wantError := func(t *testing.T, name, ename, evalue, stdout string) {
		t.Helper()
		r := got[name]
		if r.Error != "" {
			t.Fatalf("%s: %s", name, r.Error)
		}
		if r.status() != "error" || r.Reply["ename"] != ename || r.Reply["evalue"] != evalue {
			t.Errorf("%s: reply %v, want error %s %q", name, r.Reply, ename, evalue)
		}
		errs := r.errors(t)
		if len(errs) != 1 || errs[0].Ename != ename || errs[0].Evalue != evalue {
			t.Errorf("%s: iopub errors %+v", name, errs)
		}
		if out := r.stdout(t); out != stdout {
			t.Errorf("%s: stdout %q, want %q", name, out, stdout)
		}
	}

	t.Run("state persists", func(t *testing.T) {
		got["state set"].mustOK(t, "state set")
		stdoutIs(t, "state get", "42 /tmp bar\nf:arg\n")
	})
	t.Run("shell env", func(t *testing.T) {
		r := got["shell env"]
		r.mustOK(t, "shell env")
		out := r.stdout(t)
		if !strings.HasPrefix(out, "dumb cat [") || strings.Contains(out, layout(t).PythonPath) {
			t.Errorf("shell env: %q (want TERM=dumb, PAGER=cat, our PYTHONPATH removed)", out)
		}
	})
	t.Run("exit status", func(t *testing.T) {
		wantError(t, "exit code", "BashError", "exit code 3", "before\n")
		wantError(t, "false", "BashError", "exit code 1", "")
		if tb := got["false"].errors(t); len(tb) == 1 && len(tb[0].Traceback) != 0 {
			t.Errorf("false: traceback %q, want none", tb[0].Traceback)
		}
		stdoutIs(t, "true after false", "")
		r := got["syntax error"]
		if r.status() != "error" || r.stdout(t) != "ok\n" || !strings.Contains(r.stderr(t), "syntax error") {
			t.Errorf("syntax error: reply %v stdout %q stderr %q", r.Reply, r.stdout(t), r.stderr(t))
		}
	})
	t.Run("status carried", func(t *testing.T) {
		wantError(t, "status 3", "BashError", "exit code 3", "")
		stdoutIs(t, "status directive only", "")
		stdoutIs(t, "status seen", "3\n")
		stdoutIs(t, "status zero", "0\n")
		wantError(t, "status 5", "BashError", "exit code 5", "")
		stdoutIs(t, "status after directives", "5 v\n")
		stdoutIs(t, "errexit", "")
		if r := got["errexit interrupted"]; r.Reply["ename"] != "KeyboardInterrupt" || r.Reply["evalue"] != "exit code 130" {
			t.Errorf("errexit interrupted: reply %v", r.Reply)
		}
		stdoutIs(t, "errexit after", "130 41\n")
		stdoutIs(t, "status after exit", "4\n")
	})
	t.Run("streaming", func(t *testing.T) {
		r := got["streaming"]
		r.mustOK(t, "streaming")
		var texts []string
		for _, s := range r.streams(t) {
			texts = append(texts, s.Text)
		}
		if len(texts) != 2 || texts[0] != "one\n" || texts[1] != "two\n" {
			t.Fatalf("streams %q, want [one two] as separate messages", texts)
		}
	})
	t.Run("stderr", func(t *testing.T) {
		stdoutIs(t, "stderr", "out\n")
		if e := got["stderr"].stderr(t); e != "err\n" {
			t.Errorf("stderr: %q, want err", e)
		}
		order := got["stderr order"].streams(t)
		want := []stream{{"stdout", "out\n"}, {"stderr", "err\n"}, {"stdout", "out2\n"}, {"stderr", "err2"}}
		if !slices.Equal(order, want) {
			t.Errorf("stderr order: streams %q, want %q", order, want)
		}
		// stderr is a terminal as stdout is, of the same size.
		stdoutIs(t, "stderr tty", "24 200\n")
	})
	t.Run("io", func(t *testing.T) {
		stdoutIs(t, "stdin is empty", "read=1 line=[]\ndone\n")
		stdoutIs(t, "multiline", "i=1\ni=2\ni=3\nheredoc $x\nno newline at end\n")
		stdoutIs(t, "no trailing newline", "abc")
		stdoutIs(t, "unicode", "é 漢字 😀\n")
	})
	t.Run("interrupt", func(t *testing.T) {
		r := got["interrupt"]
		if r.Error != "" {
			t.Fatalf("interrupt: %s", r.Error)
		}
		if r.Reply["ename"] != "KeyboardInterrupt" || r.stdout(t) != "sleeping\n" || r.stderr(t) != "" {
			t.Errorf("interrupt: reply %v stdout %q stderr %q", r.Reply, r.stdout(t), r.stderr(t))
		}
		if last := r.Messages[len(r.Messages)-1].T; last > 4 {
			t.Errorf("interrupt took %.1fs (sleep should get SIGINT at once)", last)
		}
		stdoutIs(t, "after interrupt", "alive 41\n")
		r = got["interrupt loop"]
		if r.Error != "" || r.Reply["ename"] != "KeyboardInterrupt" {
			t.Errorf("interrupt loop: %v %s", r.Reply, r.Error)
		}
		stdoutIs(t, "after loop", "alive2 41\n")
	})
	t.Run("env round trip", func(t *testing.T) {
		for _, name := range []string{"set env preset", "global env", "apply env", "restore env", "restore prepended", "chdir"} {
			stdoutIs(t, name, "")
		}
		want := map[string]any{"ENVD_T_PRESET": nil, "ENVD_T_GLOBAL": "global 'v'\nx"}
		for k, v := range tricky {
			want[k] = v
		}
		assertEnvJSON(t, "set", got["read env"].stdout(t), want)
		// ENVD_T_QUOTES was set globally before the per-execution set, so
		// the restore goes back to the global value.
		assertEnvJSON(t, "restored", got["read restored"].stdout(t), map[string]any{
			"ENVD_T_PRESET": "preset", "ENVD_T_QUOTES": "global quotes", "ENVD_T_GLOBAL": "global 'v'\nx",
			"ENVD_T_NEWLINE": nil, "ENVD_T_UNICODE": nil, "ENVD_T_EMPTY": nil,
		})
		stdoutIs(t, "prepended", tricky["ENVD_T_QUOTES"])
		r := got["bad directive"]
		if r.status() != "error" || r.Reply["ename"] != "EnvdDirectiveError" || r.stdout(t) != "" {
			t.Errorf("bad directive: %v %q", r.Reply, r.stdout(t))
		}
	})
	t.Run("chdir", func(t *testing.T) {
		stdoutIs(t, "pwd", chdirTo+"\n")
	})
	t.Run("exit restarts", func(t *testing.T) {
		r := got["exit"]
		if r.status() != "error" || r.Reply["evalue"] != "exit code 4" {
			t.Errorf("exit 4: reply %v", r.Reply)
		}
		if !strings.HasPrefix(r.stdout(t), "bye\n") || !strings.Contains(r.stderr(t), "started a new shell") {
			t.Errorf("exit 4: stdout %q stderr %q", r.stdout(t), r.stderr(t))
		}
		r = got["after exit"]
		r.mustOK(t, "after exit")
		out := r.stdout(t)
		first, rest, _ := strings.Cut(out, "\n")
		if first != "x=[] pwd="+chdirTo {
			t.Errorf("after exit: %q (want a fresh shell in the chdir directory)", first)
		}
		// Globals survive the restart; per-execution values do not.
		assertEnvJSON(t, "after exit", rest, map[string]any{
			"ENVD_T_GLOBAL": "global 'v'\nx", "ENVD_T_QUOTES": "global quotes", "ENVD_T_NEWLINE": nil,
		})
		got["exit 0"].mustOK(t, "exit 0")
		stdoutIs(t, "after exit 0", "fresh\n")
	})
}
