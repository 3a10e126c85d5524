package interpreter

import (
	"errors"
	"slices"
	"sort"
	"strings"

	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/jupyter/startup"
)

// Languages envd knows by name, normalized (startup's table names them).
const (
	Python     = startup.Python
	JavaScript = startup.JavaScript
	TypeScript = startup.TypeScript
	R          = startup.R
	Bash       = startup.Bash
)

// builtin is a language envd maps to a kernelspec of its choice: its
// mapping is preferred over the kernelspecs' own language fields.
type builtin struct {
	name    string
	kernel  string   // the kernelspec that runs it
	aliases []string // other names a request may use
}

// builtins, in the order languages are listed: the languages of
// startup.Languages that run on a kernelspec of envd's choice. JavaScript
// and TypeScript both run on Deno's kernel (each language gets its own
// kernel instance).
var builtins = func() []builtin {
	var out []builtin
	for _, l := range startup.Languages() {
		if l.Kernel != "" {
			out = append(out, builtin{name: l.Name, kernel: l.Kernel, aliases: l.Aliases})
		}
	}
	return out
}()

func builtinNamed(name string) *builtin {
	for i := range builtins {
		if builtins[i].name == name {
			return &builtins[i]
		}
	}
	return nil
}

// NormalizeLanguage lowercases and trims a language name and resolves
// envd's fixed aliases (startup.Languages): "js" is javascript, "ts"
// typescript, "py" and the empty string python, "sh" bash. It does not check that the language is
// available; the name of the kernelspec that runs a language is an alias
// too, and any installed kernelspec's name or language field names a
// language (see Engine.Languages).
func NormalizeLanguage(language string) string {
	l := strings.ToLower(strings.TrimSpace(language))
	if l == "" {
		return Python
	}
	for _, b := range builtins {
		if slices.Contains(b.aliases, l) {
			return b.name
		}
	}
	return l
}

// language is one language the installed kernelspecs can run.
type language struct {
	name        string   // normalized; what contexts report
	kernel      string   // kernelspec name
	displayName string   // the kernelspec's
	aliases     []string // other names that select it
	// code is the language envd's setup and env code is written in (the
	// kernelspec's language field for a kernelspec envd does not map).
	code string
}

// languagesFrom lists what specs can run: first envd's languages whose
// kernelspec is installed (in builtins order), then every other
// kernelspec, named after its language field when no other entry has that
// name and it is the first kernelspec (by name; one named like the
// language first) with that language, else after its own name. A
// builtin whose kernelspec is missing is served by a kernelspec of that
// language, if one is installed.
func languagesFrom(specs map[string]jupyter.KernelSpec) []language {
	names := make([]string, 0, len(specs))
	for n := range specs {
		names = append(names, n)
	}
	sort.Strings(names)
	// byLanguage: the kernelspec a language field selects, one named like
	// the language first.
	byLanguage := map[string]string{}
	for _, n := range names {
		l := strings.ToLower(strings.TrimSpace(specs[n].Language))
		if l == "" {
			continue
		}
		if _, ok := byLanguage[l]; !ok || n == l {
			byLanguage[l] = n
		}
	}
	var out []language
	taken := map[string]bool{} // names and aliases in use
	used := map[string]bool{}  // kernelspecs already listed
	// envd's fixed aliases are its own whatever is installed:
	// NormalizeLanguage resolves them first.
	for _, b := range builtins {
		for _, a := range b.aliases {
			taken[a] = true
		}
	}
	for _, b := range builtins {
		kernel := b.kernel
		if _, ok := specs[kernel]; !ok {
			if kernel = byLanguage[b.name]; kernel == "" || used[kernel] {
				continue
			}
		}
		l := language{name: b.name, kernel: kernel, displayName: specs[kernel].DisplayName, code: b.name,
			aliases: slices.Clone(b.aliases)}
		// Its kernelspec's name selects it too (python3; deno for
		// javascript, the first that maps it).
		if !taken[kernel] && kernel != b.name {
			l.aliases = append(l.aliases, kernel)
			taken[kernel] = true
		}
		taken[b.name] = true
		used[kernel] = true
		out = append(out, l)
	}
	var extra []language
	for _, n := range names {
		if used[n] {
			continue
		}
		s := specs[n]
		code := strings.ToLower(strings.TrimSpace(s.Language))
		l := language{name: n, kernel: n, displayName: s.DisplayName, code: code}
		_, specNamedCode := specs[code]
		if code != "" && byLanguage[code] == n && !taken[code] && (code == n || !specNamedCode) {
			l.name = code
			if !taken[n] && n != code {
				l.aliases = []string{n}
			}
		}
		if taken[l.name] {
			continue // its name is another language's: it cannot be selected
		}
		for _, a := range append([]string{l.name}, l.aliases...) {
			taken[a] = true
		}
		extra = append(extra, l)
	}
	sort.Slice(extra, func(i, j int) bool { return extra[i].name < extra[j].name })
	return append(out, extra...)
}

// lookup finds a requested language (normalized) by name, then by alias.
func lookup(list []language, lang string) (language, bool) {
	for _, l := range list {
		if l.name == lang {
			return l, true
		}
	}
	for _, l := range list {
		if slices.Contains(l.aliases, lang) {
			return l, true
		}
	}
	return language{}, false
}

// codeLanguage is the language a kernel runs, as the startup package
// knows it; "" if envd has no setup code for it (no cwd after a restart,
// no env vars).
func codeLanguage(code string) string {
	if code == "" {
		return "" // startup's default (python) is not a kernelspec's
	}
	if _, err := startup.ChdirCode(code, "/"); errors.Is(err, startup.ErrUnsupportedLanguage) {
		return ""
	}
	return code
}

// unsupported says that no installed kernel runs a language, and which
// languages are available.
func unsupported(lang string, list []language) error {
	avail := "none (no kernel is installed)"
	if len(list) > 0 {
		names := make([]string, len(list))
		for i, l := range list {
			names[i] = l.name
		}
		avail = strings.Join(names, ", ")
	}
	if b := builtinNamed(lang); b != nil {
		return newErr(ErrUnsupportedLanguage, nil, "language %q is not available: its kernel (%s) is not installed; available languages: %s",
			lang, b.kernel, avail)
	}
	return newErr(ErrUnsupportedLanguage, nil, "unsupported language %q: no installed kernelspec has that name or language; available languages: %s",
		lang, avail)
}
