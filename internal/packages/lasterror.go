package packages

import (
	"strings"
)

// lastError picks, from the end of a failed command's output (its
// non-empty lines), the one line that says why it failed, by the
// manager's way of saying it:
//   - pip: its last "ERROR: " line ("No matching distribution found for
//     x"), after the retries' warnings and the build's output;
//   - npm: its first "npm error" line past the code, errno and syscall
//     fields ("request to URL failed, reason: ...", "404 Not Found - GET
//     URL"), before the stack and the log file's name;
//   - R: the last "envd: " line, which envd's script writes: R's warning
//     or error on one line, or what is not installed;
//   - apt: its first "E: " line ("Unable to locate package x", "Failed to
//     fetch URL ..."), before the generic ones that follow it.
//
// Any other output gives its last line. The whole output is the stream's:
// a message carries one line of it.
func lastError(m Manager, out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var pick string
	switch m {
	case PIP:
		for _, l := range lines {
			if strings.HasPrefix(l, "ERROR: ") {
				pick = l
			}
		}
	case NPM:
		pick = npmError(lines)
	case R:
		for _, l := range lines {
			if rest, ok := strings.CutPrefix(l, "envd: "); ok {
				pick = rest
			}
		}
	case APT:
		for _, l := range lines {
			if strings.HasPrefix(l, "E: ") {
				pick = l
				break
			}
		}
	}
	if pick == "" {
		pick = lines[len(lines)-1]
	}
	return strings.TrimSpace(pick)
}

// npmFields are the lines of npm's error block that name a field of the
// error rather than say what went wrong.
var npmFields = []string{"code ", "errno ", "syscall ", "path ", "dest ", "signal ", "command ", "cwd ", "A complete log of this run", "Log files were not written"}

// npmError returns the first line of npm's error block ("npm error" since
// npm 9, "npm ERR!" before) that says what went wrong.
func npmError(lines []string) string {
	for _, l := range lines {
		rest, ok := strings.CutPrefix(l, "npm error ")
		if !ok {
			rest, ok = strings.CutPrefix(l, "npm ERR! ")
		}
		rest = strings.TrimSpace(rest)
		if !ok || rest == "" {
			continue
		}
		field := false
		for _, f := range npmFields {
			field = field || strings.HasPrefix(rest, f)
		}
		if !field {
			return rest
		}
	}
	return ""
}
