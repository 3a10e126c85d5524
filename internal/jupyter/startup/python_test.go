package startup_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/envd-dev/envd/internal/jupyter/startup"
)

// Figures like those of E2B's own chart tests (docs/wire.md, "Charts and
// DataFrames").
var chartCells = map[string]string{
	"bar": `
import matplotlib.pyplot as plt
authors = ['Author A', 'Author B', 'Author C', 'Author D']
sales = [100, 200, 300, 400]
plt.figure(figsize=(10, 6))
plt.bar(authors, sales, label='Books Sold', color='blue')
plt.xlabel('Authors')
plt.ylabel('Number of Books Sold')
plt.title('Book Sales by Authors')
plt.tight_layout()
plt.show()
`,
	"box": `
import matplotlib.pyplot as plt
data = {
    'Class A': [85, 90, 78, 92, 88],
    'Class B': [95, 89, 76, 91, 84, 87],
    'Class C': [75, 82, 88, 79, 86],
}
fig, ax = plt.subplots(figsize=(10, 6))
ax.boxplot(data.values(), labels=data.keys(), patch_artist=True)
ax.set_title('Exam Scores Distribution')
ax.set_xlabel('Class')
ax.set_ylabel('Score')
for patch, color in zip(ax.patches, ['#FF9999', '#66B2FF', '#99FF99']):
    patch.set_facecolor(color)
ax.yaxis.grid(True, linestyle='--', alpha=0.7)
plt.tight_layout()
plt.show()
`,
	"line": `
import matplotlib.pyplot as plt
import numpy as np
import datetime
dates = [datetime.datetime(2023, 9, 1) + datetime.timedelta(hours=i) for i in range(100)]
x = np.linspace(0, 2 * np.pi, 100)
plt.figure(figsize=(10, 6))
plt.plot(dates, np.sin(x), label='sin(x)')
plt.plot(dates, np.cos(x), label='cos(x)')
plt.xlabel('Time (s)')
plt.ylabel('Amplitude (Hz)')
plt.title('Plot of sin(x) and cos(x)')
plt.show()
`,
	"log": `
import matplotlib.pyplot as plt
import numpy as np
x = np.linspace(0, 100, 100)
y = np.exp(x)
plt.figure(figsize=(10, 6))
plt.plot(x, y, label='y = e^x')
plt.yscale('log')
plt.xlabel('X-axis')
plt.ylabel('Y-axis (log scale)')
plt.title('Chart with Log Scale on Y-axis')
plt.legend()
plt.grid(True)
plt.show()
`,
	"pie": `
import matplotlib.pyplot as plt
categories = ['No', 'No, in blue']
sizes = [90, 10]
fig, ax = plt.subplots(figsize=(8, 8))
plt.xlabel('x')
plt.ylabel('y')
ax.pie(sizes, labels=categories, autopct='%1.1f%%', startangle=90, colors=plt.cm.Pastel1.colors[:len(categories)])
ax.axis('equal')
plt.title('Will I wake up early tomorrow?')
plt.show()
`,
	"scatter": `
import matplotlib.pyplot as plt
import numpy as np
N = 5
x1, y1 = np.random.rand(N), np.random.rand(N)
x2, y2 = np.random.rand(2 * N), np.random.rand(2 * N)
plt.xlabel('A')
plt.ylabel('B')
plt.scatter(x1, y1, c='blue', label='Dataset 1')
plt.scatter(x2, y2, c='red', label='Dataset 2')
plt.show()
`,
	"scale_datetime": `
import matplotlib.pyplot as plt
import pandas as pd
dates = pd.date_range('2023-01-01', periods=10)
plt.plot(dates, range(10))
plt.show()
`,
	"scale_categorical": `
import matplotlib.pyplot as plt
plt.plot([1, 2, 3, 4, 5], ['A', 'B', 'C', 'D', 'E'])
plt.show()
`,
	"superchart": `
import matplotlib.pyplot as plt
import numpy as np
x1 = np.linspace(0, 10, 100)
y1 = np.sin(x1)
fig, axs = plt.subplots(1, 2, figsize=(10, 4))
fig.suptitle('Multiple Charts Example', fontsize=16)
axs[0].plot(x1, y1, 'r')
axs[0].set_title('Sine Wave')
axs[0].grid(True)
axs[1].scatter([1, 2, 3, 4, 5], [1, 4, 9, 16, 25])
axs[1].set_title('Scatter Plot')
axs[1].set_xlabel('X')
axs[1].set_ylabel('Y')
plt.show()
`,
	"unknown": `
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.add_artist(plt.Circle((0.5, 0.5), 0.2, color='blue', fill=False))
ax.add_artist(plt.Circle((0.5, 0.5), 0.4, color='red', fill=False))
ax.set_aspect('equal')
plt.title('Two Concentric Circles')
plt.show()
`,
	"barh": `
import matplotlib.pyplot as plt
plt.barh(['x', 'y', 'z'], [3, 1, 2], label='Speed')
plt.xlabel('Speed (km/h)')
plt.ylabel('Runner')
plt.show()
`,
	"broken": `
import matplotlib.pyplot as plt
fig = plt.figure()
plt.show()
`,
}

// pyCell is one named Python-kernel check; TestPythonKernel runs them all
// in one kernel, in order.
type pyCell struct {
	name string
	cell cell
}

func TestPythonKernel(t *testing.T) {
	t.Parallel()
	work := t.TempDir()
	chdirTo := filepath.Join(work, "dir with 'quotes' \"and\" spaces é")
	if err := os.Mkdir(chdirTo, 0o755); err != nil {
		t.Fatal(err)
	}

	envNames := []string{"ENVD_T_QUOTES", "ENVD_T_NEWLINE", "ENVD_T_UNICODE", "ENVD_T_EMPTY", "ENVD_T_PRESET", "ENVD_T_GLOBAL"}
	perExec := map[string]*string{"ENVD_T_PRESET": nil}
	for k, v := range tricky {
		perExec[k] = ptr(v)
	}
	setCode, err := startup.SetEnvCode("python", perExec)
	if err != nil {
		t.Fatal(err)
	}
	globalCode, err := startup.SetGlobalEnvCode("python", map[string]*string{"ENVD_T_GLOBAL": ptr("global 'v'")})
	if err != nil {
		t.Fatal(err)
	}
	restoreCode, _ := startup.RestoreEnvCode("python")
	chdirCode, err := startup.ChdirCode("python", chdirTo)
	if err != nil {
		t.Fatal(err)
	}
	dumpEnv := "import os, json; print(json.dumps({k: os.environ.get(k) for k in " + pyList(envNames) + "}))"
	// What a child process sees, too (os.environ must call putenv).
	dumpChildEnv := "import subprocess, sys; print(subprocess.run([sys.executable, '-c', " +
		pyString(dumpEnv) + "], capture_output=True, text=True).stdout, end='')"

	cells := []pyCell{
		{"lazy imports", cell{Code: "import sys; print('matplotlib' in sys.modules, 'pandas' in sys.modules)"}},
		{"who", cell{Code: "%who_ls"}},
		{"helpers hidden", cell{Code: "print('__envd_setenv' in globals(), '__envd_load' in globals(), callable(__envd_setenv))"}},
		{"nocolor", cell{Code: "1/0"}},
		{"seq length", cell{Code: "list(range(3000))"}},
		{"dataframe", cell{Code: `import pandas as pd, numpy as np
pd.DataFrame({"a": [1, 2, 3], "f": [1.5, float("nan"), np.inf], "t": pd.to_datetime(["2023-01-01", None, "2023-01-03 04:05:06"]), "s": ["x", None, "é"], 7: [True, False, None]})`}},
		{"dataframe display", cell{Code: `display(pd.DataFrame({"a": [1, 2, 3]}))`}},
		{"json dict", cell{Code: `{"x": 1, "y": [1.5, None, float("nan")], "n": np.int64(3), "arr": np.arange(3), 5: "five", "d": pd.Timestamp("2023-01-01")}`}},
		{"json list", cell{Code: `[1, "two", {"three": 3.0}]`}},
		{"json fallback", cell{Code: `{"s": object()}`}},
		{"latex", cell{Code: `display({'text/latex': r'\text{latex}'}, raw=True)`}},
		{"set env", cell{Code: "import os; os.environ['ENVD_T_PRESET'] = 'preset'; os.environ['ENVD_T_QUOTES'] = 'orig'", Silent: true}},
		{"global env", cell{Code: globalCode, Silent: true}},
		{"apply env", cell{Code: setCode, Silent: true}},
		{"read env", cell{Code: dumpEnv}},
		{"read env child", cell{Code: dumpChildEnv}},
		{"apply env twice", cell{Code: setCode, Silent: true}},
		{"restore env", cell{Code: restoreCode, Silent: true}},
		{"read restored", cell{Code: dumpEnv}},
		{"restore again", cell{Code: restoreCode, Silent: true}},
		{"prepended", cell{Code: setCode + "\nimport os\nos.environ['ENVD_T_UNICODE']"}},
		{"restore prepended", cell{Code: restoreCode, Silent: true}},
		{"setenv returns previous", cell{Code: `__envd_setenv('{"ENVD_T_PRESET": "x"}')`}},
		{"restore previous", cell{Code: restoreCode, Silent: true}},
		{"chdir", cell{Code: chdirCode, Silent: true}},
		{"cwd", cell{Code: "import os; print(os.getcwd())"}},
		{"pil show", cell{Code: "from PIL import Image\nimage = Image.new('RGB', (20, 10), 'red')\nimage.show()\nprint('shown')"}},
		{"pil bare", cell{Code: "image"}},
		{"pil save", cell{Code: "image.save('test.png')\nimport os; print(os.path.getsize('test.png') > 0)"}},
		{"streaming result", cell{Code: "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\nx = 1\nx"}},
	}
	chartOrder := []string{"bar", "box", "line", "log", "pie", "scatter", "scale_datetime", "scale_categorical", "superchart", "unknown", "barh", "broken"}
	for _, name := range chartOrder {
		cells = append(cells, pyCell{"chart " + name, cell{Code: chartCells[name]}})
	}
	cells = append(cells, pyCell{"figure repr", cell{Code: "import matplotlib.pyplot as plt\nfig = plt.figure()\nax = fig.add_subplot()\nax.plot([1, 2], [3, 4])\nfig"}})

	plain := make([]cell, len(cells))
	for i, c := range cells {
		plain[i] = c.cell
	}
	res := runKernel(t, "python3", work, nil, plain)
	got := map[string]cellResult{}
	for i, c := range cells {
		got[c.name] = res[i]
	}

	t.Run("lazy imports", func(t *testing.T) {
		r := got["lazy imports"]
		r.mustOK(t, "lazy imports")
		if out := r.stdout(t); out != "False False\n" {
			t.Errorf("startup imported matplotlib/pandas eagerly: %q", out)
		}
	})
	t.Run("helpers hidden", func(t *testing.T) {
		r := got["who"]
		r.mustOK(t, "who")
		if txt := textPlain(t, r); strings.Contains(txt, "envd") {
			t.Errorf("%%who_ls shows envd names: %s", txt)
		}
		r = got["helpers hidden"]
		r.mustOK(t, "helpers hidden")
		if out := r.stdout(t); out != "False False True\n" {
			t.Errorf("helpers: got %q, want them in builtins only", out)
		}
	})
	t.Run("nocolor traceback", func(t *testing.T) {
		errs := got["nocolor"].errors(t)
		if len(errs) != 1 || errs[0].Ename != "ZeroDivisionError" {
			t.Fatalf("errors: %+v", errs)
		}
		if tb := strings.Join(errs[0].Traceback, ""); strings.Contains(tb, "\x1b[") {
			t.Errorf("traceback has ANSI escapes: %q", tb)
		}
	})
	t.Run("max_seq_length", func(t *testing.T) {
		txt := textPlain(t, got["seq length"])
		if strings.Contains(txt, "...") || !strings.Contains(txt, "2999]") {
			t.Errorf("list truncated: ...%s", txt[max(0, len(txt)-60):])
		}
	})
	t.Run("e2b/data", func(t *testing.T) {
		r := got["dataframe"]
		r.mustOK(t, "dataframe")
		b := onlyResult(t, r, "execute_result")
		if _, ok := b.Data["text/html"]; !ok {
			t.Errorf("no text/html next to e2b/data")
		}
		assertJSON(t, b.Data["e2b/data"], `{
			"a": [1, 2, 3],
			"f": [1.5, null, null],
			"t": ["2023-01-01T00:00:00", null, "2023-01-03T04:05:06"],
			"s": ["x", null, "é"],
			"7": [true, false, null]
		}`)
		b = onlyResult(t, got["dataframe display"], "display_data")
		assertJSON(t, b.Data["e2b/data"], `{"a": [1, 2, 3]}`)
	})
	t.Run("application/json", func(t *testing.T) {
		b := onlyResult(t, got["json dict"], "execute_result")
		assertJSON(t, b.Data["application/json"], `{"x": 1, "y": [1.5, null, null], "n": 3, "arr": [0, 1, 2], "5": "five", "d": "2023-01-01T00:00:00"}`)
		if _, ok := b.Data["text/plain"]; !ok {
			t.Errorf("text/plain missing")
		}
		b = onlyResult(t, got["json list"], "execute_result")
		assertJSON(t, b.Data["application/json"], `[1, "two", {"three": 3.0}]`)
		b = onlyResult(t, got["json fallback"], "execute_result")
		if _, ok := b.Data["application/json"]; ok {
			t.Errorf("unserializable dict got application/json: %s", b.Data["application/json"])
		}
		b = onlyResult(t, got["latex"], "display_data")
		if keys := mimeKeys(b); !reflect.DeepEqual(keys, []string{"text/latex"}) {
			t.Errorf("latex display has %v, want only text/latex", keys)
		}
	})
	t.Run("env round trip", func(t *testing.T) {
		for _, name := range []string{"set env", "global env", "apply env", "apply env twice", "restore env", "restore again", "chdir"} {
			got[name].mustOK(t, name)
			if out := got[name].stdout(t); out != "" {
				t.Errorf("%s printed %q", name, out)
			}
		}
		want := map[string]any{"ENVD_T_PRESET": nil, "ENVD_T_GLOBAL": "global 'v'"}
		for k, v := range tricky {
			want[k] = v
		}
		assertEnvJSON(t, "in kernel", got["read env"].stdout(t), want)
		assertEnvJSON(t, "in child process", got["read env child"].stdout(t), want)
		assertEnvJSON(t, "after restore", got["read restored"].stdout(t), map[string]any{
			"ENVD_T_PRESET": "preset", "ENVD_T_QUOTES": "orig", "ENVD_T_GLOBAL": "global 'v'",
			"ENVD_T_NEWLINE": nil, "ENVD_T_UNICODE": nil, "ENVD_T_EMPTY": nil,
		})
		r := got["prepended"]
		r.mustOK(t, "prepended")
		if txt := textPlain(t, r); txt != "'"+pyRepr(tricky["ENVD_T_UNICODE"])+"'" {
			t.Errorf("prepended set: result %q", txt)
		}
		r = got["setenv returns previous"]
		r.mustOK(t, "setenv returns previous")
		if txt := textPlain(t, r); txt != `'{"ENVD_T_PRESET": "preset"}'` {
			t.Errorf("__envd_setenv returned %s", txt)
		}
	})
	t.Run("chdir", func(t *testing.T) {
		if out := got["cwd"].stdout(t); out != chdirTo+"\n" {
			t.Errorf("cwd %q, want %q", out, chdirTo)
		}
	})
	t.Run("PIL", func(t *testing.T) {
		r := got["pil show"]
		r.mustOK(t, "pil show")
		if b := onlyResult(t, r, "display_data"); b.Data["image/png"] == nil {
			t.Errorf("image.show(): no image/png (%v)", mimeKeys(b))
		}
		if r.stdout(t) != "shown\n" {
			t.Errorf("stdout %q", r.stdout(t))
		}
		if b := onlyResult(t, got["pil bare"], "execute_result"); b.Data["image/png"] == nil {
			t.Errorf("bare image: no image/png (%v)", mimeKeys(b))
		}
		r = got["pil save"]
		r.mustOK(t, "pil save")
		if b := onlyResult(t, r, "display_data"); b.Data["image/png"] == nil {
			t.Errorf("image.save(): no image/png (%v)", mimeKeys(b))
		}
		if r.stdout(t) != "True\n" {
			t.Errorf("image.save did not save: %q", r.stdout(t))
		}
	})
	t.Run("streaming result", func(t *testing.T) {
		rs := got["streaming result"].results(t)
		if len(rs) != 2 || rs[0].MsgType != "display_data" || rs[1].MsgType != "execute_result" {
			t.Fatalf("results: %+v", rs)
		}
		if rs[0].Data["image/png"] == nil || rs[0].Data["e2b/chart"] == nil || rs[0].Data["text/plain"] == nil {
			t.Errorf("figure display has %v", mimeKeys(rs[0]))
		}
	})
	t.Run("figure repr", func(t *testing.T) {
		rs := got["figure repr"].results(t)
		if len(rs) == 0 {
			t.Fatal("no results")
		}
		var c map[string]any
		if err := json.Unmarshal(rs[0].Data["e2b/chart"], &c); err != nil || c["type"] != "line" {
			t.Errorf("figure as last expression: chart %s (%v)", rs[0].Data["e2b/chart"], err)
		}
	})
	charts := map[string]json.RawMessage{}
	for _, name := range chartOrder {
		r := got["chart "+name]
		r.mustOK(t, "chart "+name)
		b := onlyResult(t, r, "display_data")
		if b.Data["image/png"] == nil && name != "broken" { // IPython renders no PNG for a figure without axes
			t.Errorf("chart %s: no image/png", name)
		}
		charts[name] = b.Data["e2b/chart"]
	}
	testCharts(t, charts)
}

func testCharts(t *testing.T, charts map[string]json.RawMessage) {
	t.Run("chart bar", func(t *testing.T) {
		c := decodeChart(t, charts["bar"])
		wantFields(t, c, map[string]any{
			"type": "bar", "title": "Book Sales by Authors", "x_label": "Authors", "y_label": "Number of Books Sold",
			"x_unit": nil, "y_unit": nil,
		})
		els := elements(t, c)
		if len(els) != 4 {
			t.Fatalf("%d elements", len(els))
		}
		for i, e := range els {
			wantFields(t, e, map[string]any{"label": "Author " + string(rune('A'+i)), "group": "Books Sold", "value": float64(100 * (i + 1))})
		}
		allFloats(t, "bar", charts["bar"], "value")
	})
	t.Run("chart barh", func(t *testing.T) {
		c := decodeChart(t, charts["barh"])
		wantFields(t, c, map[string]any{"type": "bar", "x_label": "Runner", "y_label": "Speed (km/h)", "x_unit": nil, "y_unit": "km/h"})
		els := elements(t, c)
		if len(els) != 3 {
			t.Fatalf("%d elements", len(els))
		}
		for i, want := range []map[string]any{{"label": "x", "value": 3.0}, {"label": "y", "value": 1.0}, {"label": "z", "value": 2.0}} {
			want["group"] = "Speed"
			wantFields(t, els[i], want)
		}
	})
	t.Run("chart box_and_whisker", func(t *testing.T) {
		c := decodeChart(t, charts["box"])
		wantFields(t, c, map[string]any{"type": "box_and_whisker", "title": "Exam Scores Distribution", "x_label": "Class", "y_label": "Score", "x_unit": nil, "y_unit": nil})
		els := elements(t, c)
		if len(els) != 3 {
			t.Fatalf("%d elements", len(els))
		}
		want := []map[string]any{
			{"label": "Class A", "outliers": []any{}, "min": 78.0, "first_quartile": 85.0, "median": 88.0, "third_quartile": 90.0, "max": 92.0},
			{"label": "Class B", "outliers": []any{76.0}, "min": 84.0, "first_quartile": 84.75, "median": 88.0, "third_quartile": 90.5, "max": 95.0},
			{"label": "Class C", "outliers": []any{}, "min": 75.0, "first_quartile": 79.0, "median": 82.0, "third_quartile": 86.0, "max": 88.0},
		}
		for i := range want {
			wantFields(t, els[i], want[i])
		}
		allFloats(t, "box", charts["box"], "min", "first_quartile", "median", "third_quartile", "max", "outliers")
	})
	t.Run("chart line", func(t *testing.T) {
		c := decodeChart(t, charts["line"])
		wantFields(t, c, map[string]any{
			"type": "line", "title": "Plot of sin(x) and cos(x)", "x_label": "Time (s)", "y_label": "Amplitude (Hz)",
			"x_unit": "s", "y_unit": "Hz", "x_scale": "datetime", "y_scale": "linear",
		})
		for _, tick := range c["x_ticks"].([]any) {
			if _, ok := tick.(string); !ok {
				t.Errorf("x tick %v is not a date string", tick)
			}
		}
		for _, tick := range c["y_ticks"].([]any) {
			if _, ok := tick.(float64); !ok {
				t.Errorf("y tick %v is not a number", tick)
			}
		}
		allFloats(t, "line", charts["line"], "y_ticks")
		els := elements(t, c)
		if len(els) != 2 || els[0]["label"] != "sin(x)" || els[1]["label"] != "cos(x)" {
			t.Fatalf("elements: %v", labels(els))
		}
		for _, e := range els {
			pts := e["points"].([]any)
			if len(pts) != 100 {
				t.Errorf("%v: %d points", e["label"], len(pts))
			}
			for _, p := range pts {
				pp := p.([]any)
				_, xs := pp[0].(string)
				_, yf := pp[1].(float64)
				if !xs || !yf {
					t.Fatalf("point %v is not [str, number]", p)
				}
			}
		}
		if first := els[0]["points"].([]any)[0].([]any)[0]; first != "2023-09-01T00:00:00" {
			t.Errorf("first point %v", first)
		}
	})
	t.Run("chart log", func(t *testing.T) {
		c := decodeChart(t, charts["log"])
		wantFields(t, c, map[string]any{"type": "line", "title": "Chart with Log Scale on Y-axis", "x_scale": "linear", "y_scale": "log", "x_unit": nil, "y_unit": "log scale"})
		els := elements(t, c)
		if len(els) != 1 || els[0]["label"] != "y = e^x" || len(els[0]["points"].([]any)) != 100 {
			t.Fatalf("elements %v", labels(els))
		}
		allFloats(t, "log", charts["log"], "x_ticks", "y_ticks", "points")
	})
	t.Run("chart pie", func(t *testing.T) {
		c := decodeChart(t, charts["pie"])
		wantFields(t, c, map[string]any{"type": "pie", "title": "Will I wake up early tomorrow?"})
		els := elements(t, c)
		if len(els) != 2 {
			t.Fatalf("%d elements", len(els))
		}
		wantFields(t, els[0], map[string]any{"label": "No", "angle": 324.0, "radius": 1.0})
		wantFields(t, els[1], map[string]any{"label": "No, in blue", "angle": 36.0, "radius": 1.0})
		allFloats(t, "pie", charts["pie"], "angle", "radius")
		for _, k := range []string{"x_label", "x_ticks"} {
			if _, ok := c[k]; ok {
				t.Errorf("pie has %s", k)
			}
		}
	})
	t.Run("chart scatter", func(t *testing.T) {
		c := decodeChart(t, charts["scatter"])
		wantFields(t, c, map[string]any{"type": "scatter", "title": nil, "x_label": "A", "y_label": "B", "x_scale": "linear", "y_scale": "linear"})
		els := elements(t, c)
		if len(els) != 2 || els[0]["label"] != "Dataset 1" || els[1]["label"] != "Dataset 2" {
			t.Fatalf("elements %v", labels(els))
		}
		if n := len(els[0]["points"].([]any)); n != 5 {
			t.Errorf("Dataset 1: %d points", n)
		}
		if n := len(els[1]["points"].([]any)); n != 10 {
			t.Errorf("Dataset 2: %d points", n)
		}
		allFloats(t, "scatter", charts["scatter"], "x_ticks", "y_ticks", "points")
	})
	t.Run("chart scales", func(t *testing.T) {
		c := decodeChart(t, charts["scale_datetime"])
		wantFields(t, c, map[string]any{"type": "line", "x_scale": "datetime", "y_scale": "linear"})
		if p := elements(t, c)[0]["points"].([]any)[0].([]any)[0]; p != "2023-01-01T00:00:00" {
			t.Errorf("pandas date point %v", p)
		}
		c = decodeChart(t, charts["scale_categorical"])
		wantFields(t, c, map[string]any{"type": "line", "x_scale": "linear", "y_scale": "categorical"})
	})
	t.Run("chart superchart", func(t *testing.T) {
		c := decodeChart(t, charts["superchart"])
		wantFields(t, c, map[string]any{"type": "superchart", "title": "Multiple Charts Example"})
		els := elements(t, c)
		if len(els) != 2 {
			t.Fatalf("%d elements", len(els))
		}
		wantFields(t, els[0], map[string]any{"type": "line", "title": "Sine Wave", "x_label": nil, "y_label": nil})
		if lines := elements(t, els[0]); len(lines) != 1 || len(lines[0]["points"].([]any)) != 100 {
			t.Errorf("sine: %v", labels(lines))
		}
		wantFields(t, els[1], map[string]any{"type": "scatter", "title": "Scatter Plot", "x_label": "X", "y_label": "Y"})
		if pts := elements(t, els[1]); len(pts) != 1 || len(pts[0]["points"].([]any)) != 5 {
			t.Errorf("scatter: %v", labels(pts))
		}
	})
	t.Run("chart unknown", func(t *testing.T) {
		assertJSON(t, charts["unknown"], `{"type": "unknown", "title": "Two Concentric Circles", "elements": []}`)
	})
	t.Run("chart blank figure", func(t *testing.T) {
		// E2B returns {} when there is nothing to extract; the key stays.
		assertJSON(t, charts["broken"], `{}`)
	})
}

// --- helpers

func textPlain(t *testing.T, r cellResult) string {
	t.Helper()
	rs := r.results(t)
	if len(rs) == 0 {
		t.Fatalf("no result (errors %+v, stdout %q)", r.errors(t), r.stdout(t))
	}
	var s string
	if err := json.Unmarshal(rs[len(rs)-1].Data["text/plain"], &s); err != nil {
		t.Fatalf("text/plain: %v", err)
	}
	return s
}

func onlyResult(t *testing.T, r cellResult, msgType string) bundle {
	t.Helper()
	rs := r.results(t)
	if len(rs) != 1 || rs[0].MsgType != msgType {
		var types []string
		for _, b := range rs {
			types = append(types, b.MsgType+fmtKeys(b))
		}
		t.Fatalf("want one %s, got %v (errors %+v, stderr %q)", msgType, types, r.errors(t), r.stderr(t))
	}
	return rs[0]
}

func fmtKeys(b bundle) string { return "[" + strings.Join(mimeKeys(b), " ") + "]" }

func mimeKeys(b bundle) []string {
	var keys []string
	for k := range b.Data {
		keys = append(keys, k)
	}
	sortStrings(keys)
	return keys
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func assertJSON(t *testing.T, got json.RawMessage, want string) {
	t.Helper()
	if got == nil {
		t.Errorf("missing value, want %s", want)
		return
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("decode %s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("decode want: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func assertEnvJSON(t *testing.T, what, out string, want map[string]any) {
	t.Helper()
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%s: decode %q: %v", what, out, err)
	}
	for k, w := range want {
		if !reflect.DeepEqual(got[k], w) {
			t.Errorf("%s: %s = %q, want %q", what, k, got[k], w)
		}
	}
}

func decodeChart(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	if raw == nil {
		t.Fatal("no e2b/chart in the display")
	}
	var c map[string]any
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatalf("decode chart: %v", err)
	}
	return c
}

func elements(t *testing.T, c map[string]any) []map[string]any {
	t.Helper()
	raw, ok := c["elements"].([]any)
	if !ok {
		t.Fatalf("chart has no elements list: %v", c)
	}
	out := make([]map[string]any, len(raw))
	for i, e := range raw {
		out[i] = e.(map[string]any)
	}
	return out
}

func labels(els []map[string]any) []any {
	var out []any
	for _, e := range els {
		out = append(out, e["label"])
	}
	return out
}

// wantFields checks that each key is present (nulls included: the SDKs
// index them) with the wanted value.
func wantFields(t *testing.T, m map[string]any, want map[string]any) {
	t.Helper()
	for k, w := range want {
		g, ok := m[k]
		if !ok {
			t.Errorf("key %q missing", k)
			continue
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s = %#v, want %#v", k, g, w)
		}
	}
}

// allFloats checks that every number under the given keys is written as a
// JSON float (0.0, not 0): E2B's Python tests assert isinstance(v, float).
func allFloats(t *testing.T, chart string, raw json.RawMessage, keys ...string) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, k := range keys {
		want[k] = true
	}
	count := 0
	var walk func(v any, under bool)
	walk = func(v any, under bool) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				walk(e, under || want[k])
			}
		case []any:
			for _, e := range x {
				walk(e, under)
			}
		case json.Number:
			if under {
				count++
				if !strings.ContainsAny(string(x), ".eE") {
					t.Errorf("%s: number %s is not a JSON float", chart, x)
				}
			}
		}
	}
	walk(v, false)
	if count == 0 {
		t.Errorf("%s: no numbers under %v", chart, keys)
	}
}

func pyList(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = pyString(n)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// pyString is a Python string literal for an ASCII-safe s (test-only).
func pyString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// pyRepr approximates Python's repr() body for the unicode test value:
// printable characters stay, U+2028/2029/0085/FEFF are escaped.
func pyRepr(s string) string {
	r := strings.NewReplacer("\u2028", `\u2028`, "\u2029", `\u2029`, "\u0085", `\x85`, "\ufeff", `\ufeff`)
	return r.Replace(s)
}
