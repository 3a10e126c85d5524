package interpreter

import (
	"strings"

	"github.com/envd-dev/envd/internal/jupyter/startup"
)

// Languages, normalized.
const (
	Python     = "python"
	JavaScript = "javascript"
	TypeScript = "typescript"
	R          = "r"
	Bash       = "bash"
)

// kernelNames maps a normalized language to the kernelspec that runs it.
// JavaScript and TypeScript both run on Deno's kernel (each language gets
// its own kernel instance).
var kernelNames = map[string]string{
	Python:     "python3",
	JavaScript: "deno",
	TypeScript: "deno",
	R:          "ir",
	Bash:       startup.BashKernelName,
}

// languageOrder is the order languages are listed in error messages.
var languageOrder = []string{Python, JavaScript, TypeScript, R, Bash}

// NormalizeLanguage lowercases and trims a language name and resolves the
// aliases the SDKs accept: "js" is javascript, "ts" typescript, and the
// empty string python. It does not check that the language is supported.
func NormalizeLanguage(language string) string {
	switch l := strings.ToLower(strings.TrimSpace(language)); l {
	case "":
		return Python
	case "js":
		return JavaScript
	case "ts":
		return TypeScript
	default:
		return l
	}
}

// availableLanguages lists, in languageOrder, the languages whose kernelspec
// is among specs.
func availableLanguages(specs map[string]bool) []string {
	var out []string
	for _, l := range languageOrder {
		if specs[kernelNames[l]] {
			out = append(out, l)
		}
	}
	return out
}

// kernelFor returns the kernelspec name for a normalized language, or an
// ErrUnsupportedLanguage error if the language is unknown or its kernel is
// not among specs.
func kernelFor(language string, specs map[string]bool) (string, error) {
	name, ok := kernelNames[language]
	if !ok || !specs[name] {
		return "", unsupported(language, availableLanguages(specs))
	}
	return name, nil
}

// unsupported says that no installed kernel runs a language, and which
// languages are available (in languageOrder).
func unsupported(language string, available []string) error {
	avail := "none (no kernel is installed)"
	if len(available) > 0 {
		avail = strings.Join(available, ", ")
	}
	if name, known := kernelNames[language]; known {
		return newErr(ErrUnsupportedLanguage, nil, "language %q is not available: its kernel (%s) is not installed; available languages: %s",
			language, name, avail)
	}
	return newErr(ErrUnsupportedLanguage, nil, "unsupported language %q; available languages: %s", language, avail)
}

// unknownLanguage says that envd knows no kernel for a language, when
// which kernels are installed cannot be known yet.
func unknownLanguage(language string) error {
	return newErr(ErrUnsupportedLanguage, nil, "unsupported language %q; envd runs: %s (when their kernels are installed)",
		language, strings.Join(languageOrder, ", "))
}
