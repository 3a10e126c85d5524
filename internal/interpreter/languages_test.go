package interpreter_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// lang describes how a test reads things back in one language.
type lang struct {
	name string
	// getwd prints the working directory on stdout.
	getwd string
	// printEnv prints the JSON string of ENVD_T, or "default" when unset.
	printEnv string
}

var langs = []lang{
	{"python", "import os; print(os.getcwd())",
		`import os, json; print(json.dumps(os.environ.get("ENVD_T", "default")))`},
	{"javascript", "console.log(process.cwd())",
		`console.log(JSON.stringify(process.env.ENVD_T ?? "default"))`},
	{"typescript", "const d: string = Deno.cwd(); console.log(d)",
		`const v: string = Deno.env.get("ENVD_T") ?? "default"; console.log(JSON.stringify(v))`},
	{"r", "cat(getwd(), '\\n')",
		`cat(jsonlite::toJSON(Sys.getenv("ENVD_T", unset = "default"), auto_unbox = TRUE), "\n")`},
	{"bash", "pwd",
		`printf '%s' "${ENVD_T-default}" | /usr/bin/python3 -c 'import sys, json; print(json.dumps(sys.stdin.read()))'`},
}

// A working directory whose name breaks naive quoting.
func trickyDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), `it's a "dir" $HOME é`)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLanguagesWithCwd(t *testing.T) {
	t.Parallel()
	for _, l := range langs {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			dir := trickyDir(t)
			c := newContext(t, l.name, dir)
			if c.Language != l.name || c.Cwd != dir {
				t.Fatalf("context %+v", c)
			}
			r := run(t, c.ID, l.getwd).mustOK(t)
			if got := strings.TrimSpace(r.out()); got != dir {
				t.Errorf("cwd %q, want %q", got, dir)
			}
			if r.count != 1 {
				t.Errorf("execution count %d, want 1 (setup must be silent)", r.count)
			}
			// The kernel keeps its state.
			state := map[string][2]string{
				"python":     {"v = 20", "print(v + 1)"},
				"javascript": {"var v = 20", "console.log(v + 1)"},
				"typescript": {"var v: number = 20", "console.log(v + 1)"},
				"r":          {"v <- 20", "cat(v + 1, '\\n')"},
				"bash":       {"v=20", "echo $((v + 1))"},
			}[l.name]
			run(t, c.ID, state[0]).mustOK(t)
			if got := strings.TrimSpace(run(t, c.ID, state[1]).mustOK(t).out()); got != "21" {
				t.Errorf("state: %q, want 21", got)
			}
		})
	}
}

// envValues break naive interpolation into code.
var envValues = map[string]string{
	"quotes":  `it's "quoted" \ $HOME ` + "`id` $(id) '; exit #",
	"newline": "line1\nline2\r\nline3\ttab",
	"unicode": "é 漢字 😀",
}

func TestEnvVarsPerLanguage(t *testing.T) {
	t.Parallel()
	for _, l := range langs {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			c := newContext(t, l.name, "")
			for name, value := range envValues {
				r := execute(t, map[string]any{"code": l.printEnv, "context_id": c.ID, "env_vars": map[string]string{"ENVD_T": value}}).mustOK(t)
				var got string
				if err := json.Unmarshal([]byte(strings.TrimSpace(r.out())), &got); err != nil {
					t.Fatalf("%s: output %q: %v", name, r.out(), err)
				}
				if got != value {
					t.Errorf("%s: got %q, want %q", name, got, value)
				}
				// Restored after the execution.
				r = run(t, c.ID, l.printEnv).mustOK(t)
				if strings.TrimSpace(r.out()) != `"default"` {
					t.Errorf("%s: after the execution: %q, want unset", name, r.out())
				}
			}
		})
	}
}

func TestSandboxEnv(t *testing.T) {
	t.Parallel()
	c := newContext(t, "", "")
	get := `import os; print(os.environ.get("ENVD_TEST_GLOBAL"), os.environ.get("ENVD_TEST_LATE"))`
	if got := run(t, c.ID, get).mustOK(t).out(); got != "global value None\n" {
		t.Errorf("sandbox env: %q", got)
	}
	// A per-execution value overrides it, and the global value comes back.
	r := execute(t, map[string]any{"code": get, "context_id": c.ID, "env_vars": map[string]string{"ENVD_TEST_GLOBAL": "override"}}).mustOK(t)
	if r.out() != "override None\n" {
		t.Errorf("override: %q", r.out())
	}
	if got := run(t, c.ID, get).mustOK(t).out(); got != "global value None\n" {
		t.Errorf("after override: %q", got)
	}
	// Variables added later (POST /init) reach running kernels.
	shared.env.Store("ENVD_TEST_LATE", "late")
	t.Cleanup(func() { shared.env.Delete("ENVD_TEST_LATE") })
	if got := run(t, c.ID, get).mustOK(t).out(); got != "global value late\n" {
		t.Errorf("after a change: %q", got)
	}
}
