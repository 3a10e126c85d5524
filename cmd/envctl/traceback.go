package main

import (
	"regexp"
	"strings"
)

// A kernel sends a traceback as a list of strings, which Jupyter's
// frontends show one a line. E2B's wire, and so envd, joins the list with
// "" (a wire-compatible format: the SDKs read it so), which glues some
// lines together:
//
//	IPython:  "-----...-----ZeroDivisionError      Traceback (most recent call last)Cell In [1], line 1\n..."
//	V8 (Deno): "TypeError: boom    at f (<anonymous>:2:8)    at <anonymous>:4:1"
//
// formatTraceback puts those line breaks back; its other lines already end
// in "\n". Kernels that colour their tracebacks (IPython's is set to
// NoColor by envd; R's, Deno's, or a kernel installed later may not) send
// ANSI escapes: kept for a terminal, stripped for anything else.
func formatTraceback(tb string, color bool) string {
	tb = tracebackRule.ReplaceAllString(tb, "$1\n$2")
	tb = tracebackHeader.ReplaceAllString(tb, "$1\n$2")
	tb = splitV8Frames(tb)
	if !color {
		tb = stripANSI(tb)
	}
	return strings.TrimRight(tb, "\n")
}

// sgr is any run of ANSI colour escapes.
const sgr = `(?:\x1b\[[0-9;]*m)*`

var (
	// tracebackRule is IPython's rule of dashes at the start of a line,
	// glued to what follows.
	tracebackRule = regexp.MustCompile(`(?m)^(` + sgr + `-{20,}` + sgr + `)([^\n-])`)
	// tracebackHeader is IPython's header line, glued to the first frame.
	tracebackHeader = regexp.MustCompile(`(Traceback \(most recent call last\)` + sgr + `)([^\n])`)
	// v8Frame is the start of a V8 stack frame after its indent: "at f
	// (file:1:2)", "at file:1:2", "at f (<anonymous>)", "at f (native)".
	v8Frame = regexp.MustCompile(`^at (?:[^\n]*? \()?(?:[^\s()]*:\d+:\d+|<anonymous>|native)\)?`)
	// ansiEscape is a CSI sequence (colours, cursor moves), an OSC
	// sequence (titles, links), or a two-byte escape (ESC 7, ESC M...).
	ansiEscape = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[0-?@-Z\\-_]`)
)

// splitV8Frames starts each V8 stack frame ("    at ...") glued to the
// line before it on a line of its own.
func splitV8Frames(s string) string {
	const indent = "    "
	var b strings.Builder
	for {
		i := strings.Index(s, indent+"at ")
		if i < 0 {
			break
		}
		b.WriteString(s[:i])
		rest := s[i+len(indent):]
		if i > 0 && s[i-1] != '\n' && s[i-1] != ' ' && v8Frame.MatchString(rest) {
			b.WriteByte('\n')
		}
		b.WriteString(indent)
		s = rest
	}
	b.WriteString(s)
	return b.String()
}

// stripANSI removes ANSI escape sequences.
func stripANSI(s string) string {
	if !strings.Contains(s, "\x1b") {
		return s
	}
	return ansiEscape.ReplaceAllString(s, "")
}
