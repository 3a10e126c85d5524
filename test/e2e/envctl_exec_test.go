package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/internal/packages/pkgtest"
)

// execEvents parses exec-code --json's output: one object a line.
func execEvents(t *testing.T, r ctlResult) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("a line that is not a JSON object: %q (%v); %+v", l, err, r)
		}
		out = append(out, ev)
	}
	return out
}

// joinStreams joins adjacent stdout (or stderr) events into one, as a
// reader of the stream would: the kernel flushes its streams on a timer,
// so one print can arrive as two events ("1.0.0", then "\n").
func joinStreams(evs []map[string]any) []map[string]any {
	var out []map[string]any
	for _, ev := range evs {
		typ := ev["type"]
		if n := len(out); n > 0 && (typ == "stdout" || typ == "stderr") && out[n-1]["type"] == typ {
			out[n-1]["text"] = out[n-1]["text"].(string) + ev["text"].(string)
			continue
		}
		out = append(out, ev)
	}
	return out
}

// eventTypes lists the events' types.
func eventTypes(evs []map[string]any) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev["type"].(string))
	}
	return out
}

// TestEnvctlExecCodeOutput: exec-code --json (one event a line, parsed),
// the language aliases, --save-dir, and tracebacks with their line breaks
// (no escapes when stderr is not a terminal).
func TestEnvctlExecCodeOutput(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{jupyter: true})
	addr := "--addr=" + e.url

	t.Run("json", func(t *testing.T) {
		r := envctl(t, nil, strings.NewReader("import sys\nprint('out', flush=True)\nprint('err', file=sys.stderr, flush=True)\n{'a': 1, 'b': '<&>'}"), addr, "exec-code", "--json")
		evs := joinStreams(execEvents(t, r))
		types := eventTypes(evs)
		if r.code != 0 || r.stderr != "" || len(evs) != 4 || types[3] != "end" {
			t.Fatalf("--json: %+v", r)
		}
		byType := map[string]map[string]any{}
		for _, ev := range evs {
			byType[ev["type"].(string)] = ev
		}
		if ev := byType["stdout"]; ev["text"] != "out\n" || ev["time"] == nil {
			t.Errorf("stdout event %v", ev)
		}
		if ev := byType["stderr"]; ev["text"] != "err\n" {
			t.Errorf("stderr event %v", ev)
		}
		res := byType["result"]
		data, _ := res["data"].(map[string]any)
		if res["is_main_result"] != true || res["text"] != "{'a': 1, 'b': '<&>'}" || data["text/plain"] != "{'a': 1, 'b': '<&>'}" ||
			!equalJSON(data["application/json"], map[string]any{"a": float64(1), "b": "<&>"}) {
			t.Errorf("result event %v", res)
		}
		if !strings.Contains(r.stdout, `'<&>'`) {
			t.Errorf("<, > and & escaped: %s", r.stdout)
		}
		end := evs[3]
		if end["reason"] != "ok" || end["execution_id"] == "" || end["context_id"] == "" || end["execution_count"].(float64) < 1 {
			t.Errorf("end event %v", end)
		}

		// An exception: an error event, then the end; exit 1.
		r = envctl(t, nil, strings.NewReader("raise ValueError('\\x1b[31mred\\x1b[0m')"), addr, "exec-code", "--json")
		evs = execEvents(t, r)
		if r.code != 1 || r.stderr != "" || !slices.Equal(eventTypes(evs), []string{"error", "end"}) {
			t.Fatalf("--json with an exception: %+v", r)
		}
		// The traceback is as the kernel gave it, escapes and all.
		if ev := evs[0]; ev["name"] != "ValueError" || ev["value"] != "\x1b[31mred\x1b[0m" ||
			!strings.Contains(ev["traceback"].(string), "Traceback (most recent call last)") || !strings.Contains(ev["traceback"].(string), "\x1b[31mred") {
			t.Errorf("error event %v", ev)
		}
		if evs[1]["reason"] != "error" {
			t.Errorf("end event %v", evs[1])
		}
	})

	t.Run("tracebacks", func(t *testing.T) {
		r := envctl(t, nil, strings.NewReader("def f():\n    return 1/0\nf()"), addr, "exec-code")
		re := regexp.MustCompile(`^-{75}\nZeroDivisionError +Traceback \(most recent call last\)\nCell In \[\d+\], line 3\n` +
			`(?:.*\n)*----> 3 f\(\)\nCell In \[\d+\], line 2, in f\(\)\n(?:.*\n)*----> 2     return 1/0\nZeroDivisionError: division by zero\n$`)
		if r.code != 1 || r.stdout != "" || !re.MatchString(r.stderr) {
			t.Errorf("a Python traceback: %+v", r)
		}
		// Escapes (in the message here) are stripped when stderr is not
		// a terminal.
		r = envctl(t, nil, strings.NewReader("raise ValueError('\\x1b[31mred\\x1b[0m')"), addr, "exec-code")
		if r.code != 1 || !strings.HasSuffix(r.stderr, "\nValueError: red\n") || strings.Contains(r.stderr, "\x1b") {
			t.Errorf("a traceback with escapes: %+v", r)
		}
		r = envctl(t, nil, strings.NewReader("function f() { return null.x }\nf()"), addr, "exec-code", "--lang", "js")
		re = regexp.MustCompile(`^TypeError: Cannot read properties of null \(reading 'x'\)\n    at f \(.*\)\n    at .*\n$`)
		if r.code != 1 || !re.MatchString(r.stderr) {
			t.Errorf("a JavaScript traceback: %+v", r)
		}
	})

	t.Run("language aliases", func(t *testing.T) {
		tests := []struct{ lang, code, want string }{
			{"py", "print(1 + 1)", "2\n"},
			{"python3", "print(2 + 1)", "3\n"},
			{"js", "console.log(1 + 1)", "2\n"},
			{"ts", "const n: number = 2; console.log(n)", "2\n"},
			{"sh", "echo $((1 + 1))", "2\n"},
			{"bash", "echo $((2 + 2))", "4\n"},
			{"r", `cat(sprintf("%d\n", 1L + 1L))`, "2\n"},
		}
		for _, tt := range tests {
			r := envctl(t, nil, strings.NewReader(tt.code), addr, "exec-code", "--lang", tt.lang)
			if r.code != 0 || r.stderr != "" || r.stdout != tt.want {
				t.Errorf("--lang %s: %+v", tt.lang, r)
			}
		}
		// py is python: the same default context.
		if r := envctl(t, nil, strings.NewReader("alias_x = 5"), addr, "exec-code", "--lang", "python"); r.code != 0 {
			t.Fatalf("--lang python: %+v", r)
		}
		if r := envctl(t, nil, strings.NewReader("print(alias_x)"), addr, "exec-code", "--lang", "py"); r.code != 0 || r.stdout != "5\n" {
			t.Errorf("--lang py after --lang python: %+v", r)
		}
	})

	t.Run("save-dir", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "images") // made by envctl
		code := `import io
import matplotlib.pyplot as plt
from IPython.display import SVG, Image, display
from PIL import Image as PILImage
plt.plot([1, 2, 3])
plt.show()
b = io.BytesIO()
PILImage.new("RGB", (4, 4), "red").save(b, "JPEG")
display(Image(data=b.getvalue(), format="jpeg"))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"/>'))
`
		r := envctl(t, nil, strings.NewReader(code), addr, "exec-code", "--save-dir", dir)
		re := regexp.MustCompile(`^<Figure size \d+x\d+ with 1 Axes>\n<image/png: (.+/output_(\d+)_0\.png)>\n` +
			`<IPython.core.display.Image object>\n<image/jpeg: (.+/output_(\d+)_1\.jpg)>\n` +
			`<IPython.core.display.SVG object>\n<image/svg\+xml: (.+/output_(\d+)_2\.svg)>\n$`)
		m := re.FindStringSubmatch(r.stdout)
		if r.code != 0 || r.stderr != "" || m == nil || m[2] != m[4] || m[2] != m[6] {
			t.Fatalf("--save-dir: %+v", r)
		}
		for _, f := range []struct {
			path, magic string
		}{{m[1], "\x89PNG\r\n\x1a\n"}, {m[3], "\xff\xd8\xff"}, {m[5], "<svg "}} {
			if filepath.Dir(f.path) != dir {
				t.Errorf("%s: not in %s", f.path, dir)
			}
			if b, err := os.ReadFile(f.path); err != nil || !bytes.HasPrefix(b, []byte(f.magic)) {
				t.Errorf("%s: %.20q, %v", f.path, b, err)
			}
		}
		// With --json, a result names its files.
		r = envctl(t, nil, strings.NewReader(`display(SVG('<svg xmlns="http://www.w3.org/2000/svg"/>'))`), addr, "exec-code", "--json", "--save-dir", dir)
		evs := execEvents(t, r)
		if r.code != 0 || !slices.Equal(eventTypes(evs), []string{"result", "end"}) {
			t.Fatalf("--json --save-dir: %+v", r)
		}
		files, _ := evs[0]["files"].([]any)
		data, _ := evs[0]["data"].(map[string]any)
		if len(files) != 1 || data["image/svg+xml"] != `<svg xmlns="http://www.w3.org/2000/svg"/>` {
			t.Fatalf("result event %v", evs[0])
		}
		if b, err := os.ReadFile(files[0].(string)); err != nil || string(b) != `<svg xmlns="http://www.w3.org/2000/svg"/>` {
			t.Errorf("%s: %q, %v", files[0], b, err)
		}
	})
}

// TestEnvctlExecCodeNotice: a notice (here: a package the context imported
// was upgraded) comes first in exec-code --json, as a notice event.
func TestEnvctlExecCodeNotice(t *testing.T) {
	t.Parallel()
	owner := pkgtest.Owner(t)
	venv := pkgtest.Venv(t, owner)
	wheels := pkgtest.Dir(t, owner)
	const dist, module = "envd-e2e-ctl-notice", "envd_e2e_ctl_notice"
	pkgtest.Wheel(t, wheels, dist, "1.0.0", module)
	pkgtest.Wheel(t, wheels, dist, "2.0.0", module)
	e := startEnvd(t, startOptions{jupyter: true, env: []string{"ENVD_PYTHON_VENV=" + venv}})
	c := client.New(client.Options{Addr: e.url, User: owner.Name})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), codeTimeout)
	defer cancel()
	install := func(version string, upgrade bool) *client.PackageResult {
		t.Helper()
		op, err := c.InstallPackages(ctx, client.ManagerPip, []client.PackageSpec{{Name: dist, Version: version}}, client.InstallOptions{Source: wheels, Upgrade: upgrade})
		if err != nil {
			t.Fatal(err)
		}
		res, err := op.Wait()
		if err != nil {
			t.Fatalf("install %s: %v\n%s", version, err, e.stderr)
		}
		return res
	}
	install("1.0.0", false)
	cc, err := c.CreateContext(ctx, client.ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--addr=" + e.url, "--user", owner.Name, "exec-code", "--json", "--context", cc.ID}
	r := envctl(t, nil, strings.NewReader("import "+module+"\nprint("+module+".VERSION)"), args...)
	if evs := joinStreams(execEvents(t, r)); r.code != 0 || len(evs) != 2 || evs[0]["text"] != "1.0.0\n" {
		t.Fatalf("import: %+v", r)
	}
	res := install("2.0.0", true)
	if len(res.Stale) != 1 {
		t.Fatalf("stale contexts %+v", res.Stale)
	}
	r = envctl(t, nil, strings.NewReader("print("+module+".VERSION)"), args...)
	evs := joinStreams(execEvents(t, r))
	if r.code != 0 || !slices.Equal(eventTypes(evs), []string{"notice", "stdout", "end"}) || evs[1]["text"] != "1.0.0\n" {
		t.Fatalf("after the upgrade: %+v", r)
	}
	if n := evs[0]; n["kind"] != "packages_changed" || n["text"] != res.Stale[0].Message || n["time"] == nil {
		t.Errorf("notice event %v, want the stale message %q", n, res.Stale[0].Message)
	}
	if evs[2]["context_id"] != cc.ID {
		t.Errorf("end event %v", evs[2])
	}
}

// equalJSON compares two decoded JSON values.
func equalJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}
