package startup

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrUnsupportedLanguage is returned (wrapped) by the code builders for a
// language that has no env/chdir snippet; the caller should skip the step.
var ErrUnsupportedLanguage = errors.New("no env/chdir support for this language")

// normalizeLanguage returns the language of language's code (see
// Language.Code): Python, JavaScript (for TypeScript too, on Deno or
// IJavascript), R, Bash or Java.
func normalizeLanguage(language string) (string, error) {
	if lang := codeLanguage(strings.ToLower(strings.TrimSpace(language))); lang != "" {
		return lang, nil
	}
	return "", fmt.Errorf("startup: language %q: %w", language, ErrUnsupportedLanguage)
}

var bashName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func checkVars(lang string, vars map[string]*string) error {
	for name, value := range vars {
		switch {
		case name == "":
			return errors.New("startup: empty environment variable name")
		case strings.ContainsAny(name, "=\x00"):
			return fmt.Errorf("startup: invalid environment variable name %q", name)
		case lang == Bash && !bashName.MatchString(name):
			return fmt.Errorf("startup: environment variable name %q is not a bash identifier", name)
		case value != nil && strings.ContainsRune(*value, 0):
			return fmt.Errorf("startup: value of %s contains a NUL byte", name)
		}
	}
	return nil
}

// SetEnvCode returns code that sets vars for one execution in a kernel of
// the given language (a nil value unsets the variable). The kernel
// remembers the original value of each name the first time it is set this
// way; RestoreEnvCode puts those back. Returns "" for an empty map.
//
// Values are never pasted into code as text: they travel as JSON inside a
// string literal and are decoded kernel-side, so quotes, backslashes,
// newlines and any Unicode are safe. The code is a single line (bash: one
// directive line), has no leading indentation and produces no output, so it
// can run as its own silent execution (recommended) or be prepended to the
// user's cell followed by "\n".
//
// Per language:
//
//	python      __envd_setenv("<json>");          (helper from the startup script, in builtins)
//	javascript  Deno.env (or process.env under Node) via an IIFE; also "js", "ts", "typescript", "deno"
//	r           Sys.setenv / Sys.unsetenv via jsonlite::fromJSON (IRkernel depends on jsonlite)
//	bash        #%envd setenv <json>              (directive of envd's bash kernel; names must be identifiers)
//	java        System.setProperty, like E2B (a running JVM cannot change its environment; envd's Java kernel or IJava)
func SetEnvCode(language string, vars map[string]*string) (string, error) {
	return envCode(language, vars, false)
}

// SetGlobalEnvCode is SetEnvCode for sandbox-level variables: they stay set,
// and for a name that a pending per-execution set remembered, they become
// the value RestoreEnvCode returns to (E2B's "revert to the global value").
// envd's bash kernel also re-applies them when its shell restarts.
func SetGlobalEnvCode(language string, vars map[string]*string) (string, error) {
	return envCode(language, vars, true)
}

// RestoreEnvCode returns code that undoes every SetEnvCode since the last
// restore: each remembered variable gets its original value back (or is
// unset if it was unset). Running it with nothing to restore is a no-op, so
// it is safe to run after every execution that had env vars, including
// interrupted or abandoned ones.
func RestoreEnvCode(language string) (string, error) {
	lang, err := normalizeLanguage(language)
	if err != nil {
		return "", err
	}
	switch lang {
	case Python:
		return "__envd_restoreenv();", nil
	case JavaScript:
		return `void (function () { var s = globalThis.__envdSaved; if (!s) return; ` + jsEnvAccess +
			`Object.keys(s).forEach(function (k) { if (s[k] === null) del(k); else set(k, s[k]); }); ` +
			`globalThis.__envdSaved = Object.create(null); })();`, nil
	case R:
		return `invisible(local({s <- getOption("envd.saved"); for (k in names(s)) { p <- s[[k]]; ` +
			`if (is.na(p)) Sys.unsetenv(k) else do.call(Sys.setenv, stats::setNames(list(p), k)) }; ` +
			`options(envd.saved = NULL)}))`, nil
	case Bash:
		return "#%envd restoreenv", nil
	case Java:
		return `{ for (String envdKey : System.getProperties().stringPropertyNames()) { ` +
			`if (!envdKey.startsWith("envd.saved.")) continue; String envdName = envdKey.substring(11); ` +
			`String envdOld = System.getProperty(envdKey); System.clearProperty(envdKey); ` +
			`if (envdOld.startsWith("s")) System.setProperty(envdName, envdOld.substring(1)); ` +
			`else System.clearProperty(envdName); } }`, nil
	}
	panic("unreachable")
}

// ChdirCode returns code that changes the kernel's working directory to dir
// (E2B runs it as a silent execution right after creating a context). The
// path travels as JSON like the env values. envd's bash kernel also starts
// a restarted shell (after `exit`) in that directory.
//
//	python      __import__("os").chdir(__import__("json").loads("<json>"))
//	javascript  Deno.chdir(...) (process.chdir under Node)
//	r           setwd(jsonlite::fromJSON("<json>")) (bytes passed as is, as for env values)
//	bash        #%envd chdir "<dir>"
//	java        System.setProperty("user.dir", ...) (what E2B does; the JVM's cwd cannot change)
func ChdirCode(language, dir string) (string, error) {
	lang, err := normalizeLanguage(language)
	if err != nil {
		return "", err
	}
	if dir == "" || strings.ContainsRune(dir, 0) {
		return "", fmt.Errorf("startup: invalid directory %q", dir)
	}
	lit, js := jsonLiteral(dir)
	switch lang {
	case Python:
		return `__import__("os").chdir(__import__("json").loads(` + lit + `));`, nil
	case JavaScript:
		return `void (function (d) { if (typeof Deno !== "undefined") Deno.chdir(d); else process.chdir(d); })(JSON.parse(` +
			lit + `));`, nil
	case R:
		return `invisible(setwd(local({d <- jsonlite::fromJSON(` + lit + `); Encoding(d) <- "unknown"; d})))`, nil
	case Bash:
		return "#%envd chdir " + js, nil
	case Java:
		return `System.setProperty("user.dir", ` + javaString(dir) + `);`, nil
	}
	panic("unreachable")
}

// jsEnvAccess defines get/set/del over Deno.env, or process.env under Node.
const jsEnvAccess = `var D = typeof Deno !== "undefined" ? Deno.env : null, P = D ? null : process.env; ` +
	`function get(k) { var v = D ? D.get(k) : P[k]; return v === undefined ? null : v; } ` +
	`function set(k, v) { if (D) D.set(k, v); else P[k] = v; } ` +
	`function del(k) { if (D) D.delete(k); else delete P[k]; } `

func envCode(language string, vars map[string]*string, global bool) (string, error) {
	lang, err := normalizeLanguage(language)
	if err != nil {
		return "", err
	}
	if len(vars) == 0 {
		return "", nil
	}
	if err := checkVars(lang, vars); err != nil {
		return "", err
	}
	lit, js := jsonLiteral(vars)
	switch lang {
	case Python:
		if global {
			return "__envd_setenv(" + lit + ", True);", nil
		}
		return "__envd_setenv(" + lit + ");", nil
	case JavaScript:
		remember := `if (!(k in s)) s[k] = get(k);`
		if global {
			remember = `if (k in s) s[k] = v[k];`
		}
		return `void (function (v) { ` + jsEnvAccess +
			`var s = globalThis.__envdSaved || (globalThis.__envdSaved = Object.create(null)); ` +
			`Object.keys(v).forEach(function (k) { ` + remember + ` if (v[k] === null) del(k); else set(k, v[k]); }); ` +
			`})(JSON.parse(` + lit + `));`, nil
	case R:
		// Encoding(x) <- "unknown": jsonlite marks strings as UTF-8 and R
		// would translate them to the native encoding, which in a C locale
		// turns "é" into "<U+00E9>". Env values are bytes: pass them as is.
		remember := `if (!(n %in% names(s))) s[n] <- list(Sys.getenv(n, unset = NA));`
		if global {
			remember = `if (n %in% names(s)) s[n] <- list(if (is.null(x)) NA_character_ else x);`
		}
		return `invisible(local({v <- jsonlite::fromJSON(` + lit + `, simplifyVector = FALSE); ` +
			`s <- getOption("envd.saved"); if (is.null(s)) s <- list(); ` +
			`for (k in names(v)) { x <- v[[k]]; n <- k; Encoding(n) <- "unknown"; ` +
			`if (!is.null(x)) Encoding(x) <- "unknown"; ` + remember + ` ` +
			`if (is.null(x)) Sys.unsetenv(n) else do.call(Sys.setenv, stats::setNames(list(x), n)) }; ` +
			`options(envd.saved = s)}))`, nil
	case Bash:
		if global {
			return "#%envd setenv-global " + js, nil
		}
		return "#%envd setenv " + js, nil
	case Java:
		return javaEnvCode(vars, global), nil
	}
	panic("unreachable")
}

func javaEnvCode(vars map[string]*string, global bool) string {
	names := make([]string, 0, len(vars))
	for name := range vars {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("{ String[][] envdVars = {")
	for i, name := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		value := "null"
		if v := vars[name]; v != nil {
			value = javaString(*v)
		}
		b.WriteString("{" + javaString(name) + ", " + value + "}")
	}
	b.WriteString("}; for (String[] kv : envdVars) { String envdKey = \"envd.saved.\" + kv[0]; ")
	if global {
		b.WriteString(`if (System.getProperty(envdKey) != null) System.setProperty(envdKey, kv[1] == null ? "u" : "s" + kv[1]); `)
	} else {
		b.WriteString(`if (System.getProperty(envdKey) == null) { String envdOld = System.getProperty(kv[0]); ` +
			`System.setProperty(envdKey, envdOld == null ? "u" : "s" + envdOld); } `)
	}
	b.WriteString("if (kv[1] == null) System.clearProperty(kv[0]); else System.setProperty(kv[0], kv[1]); } }")
	return b.String()
}

// jsonLiteral encodes v as ASCII-only JSON (every rune >= 0x7f as \uXXXX,
// surrogate pairs above U+FFFF) and returns it both raw (js) and as a
// double-quoted string literal (lit) that Python, JavaScript, R and Java
// all read the same way: the JSON text is printable ASCII, so only `\` and
// `"` need escaping, and no language-specific escape (\u in Python or R,
// octal, ...) is ever involved. The kernel then parses the JSON.
func jsonLiteral(v any) (lit, js string) {
	raw, err := json.Marshal(v) // map keys sorted; never fails for strings/maps of strings
	if err != nil {
		panic(err)
	}
	var b strings.Builder
	for _, r := range string(raw) {
		if r < 0x7f {
			b.WriteRune(r)
			continue
		}
		for _, u := range utf16.Encode([]rune{r}) {
			fmt.Fprintf(&b, `\u%04x`, u)
		}
	}
	js = b.String()
	var q strings.Builder
	q.WriteByte('"')
	for i := 0; i < len(js); i++ {
		if c := js[i]; c == '\\' || c == '"' {
			q.WriteByte('\\')
		}
		q.WriteByte(js[i])
	}
	q.WriteByte('"')
	return q.String(), js
}

// javaString is a Java string literal for s. Control characters use octal
// escapes and non-ASCII uses \uXXXX: Java translates \u escapes before
// lexing, so \u000a or \u0022 would break the literal, but those are never
// produced here (only runes >= 0x80 use \u).
func javaString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		s = s[size:]
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\%03o`, r) // always 3 digits: a following digit must not extend it
		case r < 0x80:
			b.WriteRune(r)
		default:
			for _, u := range utf16.Encode([]rune{r}) {
				fmt.Fprintf(&b, `\u%04x`, u)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}
