package interpreter

import (
	"errors"
	"fmt"
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

// UnsupportedLanguageError says that no installed kernel runs a language.
type UnsupportedLanguageError struct {
	Language  string   // as normalized
	Available []string // languages whose kernels are installed, in a fixed order
}

func (e *UnsupportedLanguageError) Error() string {
	avail := "none (no kernel is installed)"
	if len(e.Available) > 0 {
		avail = strings.Join(e.Available, ", ")
	}
	if _, known := kernelNames[e.Language]; known {
		return fmt.Sprintf("language %q is not available: its kernel (%s) is not installed; available languages: %s",
			e.Language, kernelNames[e.Language], avail)
	}
	return fmt.Sprintf("unsupported language %q; available languages: %s", e.Language, avail)
}

// Is makes errors.Is(err, ErrUnsupportedLanguage) true.
func (e *UnsupportedLanguageError) Is(target error) bool { return target == ErrUnsupportedLanguage }

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
// *UnsupportedLanguageError if the language is unknown or its kernel is not
// among specs.
func kernelFor(language string, specs map[string]bool) (string, error) {
	name, ok := kernelNames[language]
	if !ok || !specs[name] {
		return "", &UnsupportedLanguageError{Language: language, Available: availableLanguages(specs)}
	}
	return name, nil
}

// Sentinel errors of the engine. The HTTP adapter maps them to statuses in
// one place (see http.go).
var (
	// ErrContextNotFound: no context has the id.
	ErrContextNotFound = errors.New("context not found")
	// ErrUnsupportedLanguage: see UnsupportedLanguageError.
	ErrUnsupportedLanguage = errors.New("unsupported language")
	// ErrContextAndLanguage: a request named both a context and a language.
	ErrContextAndLanguage = errors.New("only one of context_id or language can be provided")
	// ErrBadCwd: a context's working directory does not exist, is not a
	// directory, or the kernels' user cannot enter it.
	ErrBadCwd = errors.New("bad working directory")
	// ErrBadEnv: a per-execution env var cannot be set in the context's
	// language (e.g. a name that is not a bash identifier).
	ErrBadEnv = errors.New("bad environment variable")
	// ErrNotReady: Jupyter is not (yet) up, and the caller's context ended
	// while waiting for it.
	ErrNotReady = errors.New("code execution is not ready")
	// ErrClosed: the engine was closed.
	ErrClosed = errors.New("code execution engine stopped")
)
