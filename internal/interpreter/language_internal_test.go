package interpreter

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/envd-dev/envd/internal/jupyter"
)

// The kernelspecs of envd's image.
func imageSpecs() map[string]jupyter.KernelSpec {
	return map[string]jupyter.KernelSpec{
		"python3": {DisplayName: "Python 3 (ipykernel)", Language: "python"},
		"deno":    {DisplayName: "Deno", Language: "typescript"},
		"ir":      {DisplayName: "R", Language: "R"},
		"bash":    {DisplayName: "Bash", Language: "bash"},
	}
}

func with(specs map[string]jupyter.KernelSpec, more map[string]jupyter.KernelSpec) map[string]jupyter.KernelSpec {
	for k, v := range more {
		specs[k] = v
	}
	return specs
}

func TestLanguagesFrom(t *testing.T) {
	t.Parallel()
	type entry struct {
		name, kernel, code string
		aliases            []string
	}
	for _, tc := range []struct {
		name  string
		specs map[string]jupyter.KernelSpec
		want  []entry
	}{
		{"image", imageSpecs(), []entry{
			{"python", "python3", "python", []string{"py", "python3"}},
			{"javascript", "deno", "javascript", []string{"js", "deno"}},
			{"typescript", "deno", "typescript", []string{"ts"}},
			{"r", "ir", "r", []string{"ir"}},
			{"bash", "bash", "bash", []string{"sh"}},
		}},
		{"extra kernelspecs: by language field when free, else by name", with(imageSpecs(), map[string]jupyter.KernelSpec{
			"python-extra": {Language: "python"},       // python is envd's: by name, Python code
			"julia-1.9":    {Language: "Julia"},        // by language, the name an alias
			"julia-1.8":    {Language: "julia"},        // julia-1.9 sorts after, but...
			"java":         {Language: "java"},         // name and language agree
			"nolang":       {},                         // by name, no code
			"r":            {Language: "R"},            // a name envd's r has: unreachable
			"scala":        {Language: "scala-2"},      // another kernelspec's name: by name
			"scala-2":      {Language: "something"},    // by language
			"ts":           {Language: "typescript-x"}, // an alias of envd's typescript: by language only
		}), []entry{
			{"python", "python3", "python", []string{"py", "python3"}},
			{"javascript", "deno", "javascript", []string{"js", "deno"}},
			{"typescript", "deno", "typescript", []string{"ts"}},
			{"r", "ir", "r", []string{"ir"}},
			{"bash", "bash", "bash", []string{"sh"}},
			{"java", "java", "java", nil},
			{"julia", "julia-1.8", "julia", []string{"julia-1.8"}},
			{"julia-1.9", "julia-1.9", "julia", nil},
			{"nolang", "nolang", "", nil},
			{"python-extra", "python-extra", "python", nil},
			{"scala", "scala", "scala-2", nil},
			{"something", "scala-2", "something", []string{"scala-2"}},
			{"typescript-x", "ts", "typescript-x", nil},
		}},
		{"no python3: a kernelspec of language python serves python", map[string]jupyter.KernelSpec{
			"venv": {Language: "python"},
		}, []entry{
			{"python", "venv", "python", []string{"py", "venv"}},
		}},
		{"no deno: a javascript kernelspec serves javascript, none typescript", map[string]jupyter.KernelSpec{
			"javascript": {Language: "javascript"},
		}, []entry{
			{"javascript", "javascript", "javascript", []string{"js"}},
		}},
		{"none", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []entry
			for _, l := range languagesFrom(tc.specs) {
				got = append(got, entry{l.name, l.kernel, l.code, l.aliases})
			}
			// nil and empty alias lists are the same on the wire.
			for i := range got {
				if len(got[i].aliases) == 0 {
					got[i].aliases = nil
				}
			}
			for i := range tc.want {
				if len(tc.want[i].aliases) == 0 {
					tc.want[i].aliases = nil
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got\n%v\nwant\n%v", got, tc.want)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	list := languagesFrom(with(imageSpecs(), map[string]jupyter.KernelSpec{
		"julia-1.9": {Language: "julia"},
		"py2":       {Language: "python"},
	}))
	for in, want := range map[string]string{
		"python": "python", "py": "python", "python3": "python", "": "python",
		"js": "javascript", "deno": "javascript", "JavaScript": "javascript",
		"ts": "typescript", "ir": "r", "R": "r", "sh": "bash",
		"julia": "julia", "julia-1.9": "julia", "py2": "py2",
	} {
		l, ok := lookup(list, NormalizeLanguage(in))
		if !ok || l.name != want {
			t.Errorf("lookup(%q) = %q, %v; want %q", in, l.name, ok, want)
		}
	}
	if _, ok := lookup(list, "cobol"); ok {
		t.Error("cobol found")
	}
	err := unsupported("cobol", list)
	if !errors.Is(err, ErrUnsupportedLanguage) ||
		!strings.Contains(err.Error(), `"cobol"`) ||
		!strings.Contains(err.Error(), "python, javascript, typescript, r, bash, julia, py2") {
		t.Errorf("unsupported: %v", err)
	}
	if err := unsupported("typescript", nil); !strings.Contains(err.Error(), "its kernel (deno) is not installed") {
		t.Errorf("unsupported builtin: %v", err)
	}
}

func TestCodeLanguage(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"python": "python", "typescript": "typescript", "java": "java", "julia": "", "": ""} {
		if got := codeLanguage(in); got != want {
			t.Errorf("codeLanguage(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestBuiltinAliases pins the names a request may give a language before
// any kernelspec is looked at: envd's languages, each with its kernelspec
// and aliases (from startup's table, without Java, which no kernelspec of
// envd's choice runs), and what NormalizeLanguage makes of every alias and
// of the names it leaves to the kernelspecs.
func TestBuiltinAliases(t *testing.T) {
	t.Parallel()
	want := []builtin{
		{"python", "python3", []string{"py"}},
		{"javascript", "deno", []string{"js"}},
		{"typescript", "deno", []string{"ts"}},
		{"r", "ir", nil},
		{"bash", "bash", []string{"sh"}},
	}
	if !reflect.DeepEqual(builtins, want) {
		t.Errorf("builtins\n%v\nwant\n%v", builtins, want)
	}
	for in, want := range map[string]string{
		// The aliases, and the empty name.
		"": "python", " ": "python", "py": "python", " PY ": "python",
		"js": "javascript", "JS": "javascript",
		"ts": "typescript", "Ts": "typescript",
		"sh": "bash", "SH": "bash",
		// The languages' own names.
		"python": "python", "javascript": "javascript", "TypeScript": "typescript", "R": "r", "bash": "bash",
		// Left as they are: kernelspec names (aliases once installed) and
		// names only the code builders take.
		"python3": "python3", "deno": "deno", "ir": "ir", "shell": "shell", "java": "java", "node": "node",
	} {
		if got := NormalizeLanguage(in); got != want {
			t.Errorf("NormalizeLanguage(%q) = %q, want %q", in, got, want)
		}
	}
}
