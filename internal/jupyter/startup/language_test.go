package startup_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/envd-dev/envd/internal/jupyter/startup"
)

// TestLanguagesTable pins envd's table of languages: names, kernelspecs,
// the aliases a request may use and the code each is written in.
func TestLanguagesTable(t *testing.T) {
	t.Parallel()
	want := []startup.Language{
		{Name: "python", Kernel: "python3", Aliases: []string{"py"}, Code: "python", CodeAliases: []string{"python3"}},
		{Name: "javascript", Kernel: "deno", Aliases: []string{"js"}, Code: "javascript", CodeAliases: []string{"js", "deno"}},
		{Name: "typescript", Kernel: "deno", Aliases: []string{"ts"}, Code: "javascript", CodeAliases: []string{"ts"}},
		{Name: "r", Kernel: "ir", Code: "r"},
		{Name: "bash", Kernel: "bash", Aliases: []string{"sh"}, Code: "bash", CodeAliases: []string{"sh", "shell"}},
		{Name: "java", Code: "java"},
	}
	got := startup.Languages()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Languages()\n%+v\nwant\n%+v", got, want)
	}
	got[0].Aliases[0], got[0].CodeAliases[0] = "changed", "changed"
	if again := startup.Languages(); !reflect.DeepEqual(again, want) {
		t.Errorf("a change to Languages' result changed the table: %+v", again)
	}
}

// TestCodeLanguageNames pins every name the code builders take, each
// giving the code of the language it names, and names they refuse (some
// are aliases of requests only).
func TestCodeLanguageNames(t *testing.T) {
	t.Parallel()
	for name, lang := range map[string]string{
		"": "python", "python": "python", "python3": "python", " Python3 ": "python",
		"javascript": "javascript", "js": "javascript", "typescript": "javascript", "ts": "javascript", "deno": "javascript", "JS": "javascript",
		"r": "r", "R": "r",
		"bash": "bash", "sh": "bash", "shell": "bash", "Shell": "bash",
		"java": "java", "JAVA": "java",
	} {
		for what, f := range map[string]func(string) (string, error){
			"SetEnvCode":       func(l string) (string, error) { return startup.SetEnvCode(l, map[string]*string{"A": nil}) },
			"SetGlobalEnvCode": func(l string) (string, error) { return startup.SetGlobalEnvCode(l, map[string]*string{"A": nil}) },
			"RestoreEnvCode":   startup.RestoreEnvCode,
			"ChdirCode":        func(l string) (string, error) { return startup.ChdirCode(l, "/x") },
		} {
			got, err := f(name)
			want, werr := f(lang)
			if err != nil || werr != nil || got != want {
				t.Errorf("%s(%q): %q, %v; want %s(%q): %q, %v", what, name, got, err, what, lang, want, werr)
			}
		}
	}
	// Each language's own code.
	for lang, prefix := range map[string]string{
		"python":     `__import__("os").chdir(`,
		"javascript": `void (function (d) { if (typeof Deno`,
		"r":          `invisible(setwd(`,
		"bash":       `#%envd chdir `,
		"java":       `System.setProperty("user.dir", `,
	} {
		if code, err := startup.ChdirCode(lang, "/x"); err != nil || !strings.HasPrefix(code, prefix) {
			t.Errorf("ChdirCode(%q) = %q, %v; want %s...", lang, code, err, prefix)
		}
	}
	for _, name := range []string{"py", "ir", "node", "python2", "julia", "cobol", "zsh"} {
		if _, err := startup.ChdirCode(name, "/x"); !errors.Is(err, startup.ErrUnsupportedLanguage) {
			t.Errorf("ChdirCode(%q): %v, want ErrUnsupportedLanguage", name, err)
		}
		if _, err := startup.SetEnvCode(name, map[string]*string{"A": nil}); !errors.Is(err, startup.ErrUnsupportedLanguage) {
			t.Errorf("SetEnvCode(%q): %v, want ErrUnsupportedLanguage", name, err)
		}
	}
}
