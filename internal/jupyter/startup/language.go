package startup

import "slices"

// Languages envd knows by name, normalized. The code builders (SetEnvCode,
// SetGlobalEnvCode, RestoreEnvCode, ChdirCode) write code in Python,
// JavaScript (for TypeScript too), R, Bash or Java.
const (
	Python     = "python"
	JavaScript = "javascript"
	TypeScript = "typescript"
	R          = "r"
	Bash       = "bash"
	Java       = "java"
)

// DenoKernelName is the kernelspec name of Deno's kernel, which runs both
// JavaScript and TypeScript (a kernel instance each).
const DenoKernelName = "deno"

// A Language is a language envd knows by name: the one table of names that
// the code engine (package interpreter) and the code builders here read.
type Language struct {
	// Name is the language's normalized name: what contexts report.
	Name string
	// Kernel is the kernelspec envd runs it on, preferred to the
	// kernelspecs' own language fields. "" for a language envd writes code
	// for but maps to no kernelspec of its choice (Java: the kernelspec
	// whose language field says java runs it, as for any other language).
	Kernel string
	// Aliases are the other names a request may give it; the code engine
	// resolves them before it looks at the installed kernelspecs.
	Aliases []string
	// Code is the language its env and chdir code is written in.
	Code string
	// CodeAliases are the other names the code builders take for it.
	CodeAliases []string
}

// languages is envd's table of languages, in the order they are listed.
// The empty name is Python's, for both readers.
//
// Aliases and CodeAliases differ where their readers always have: for a
// request, "python3" and "deno" are kernelspec names (the code engine
// makes a kernelspec's name an alias of the language it runs once it is
// installed) and "py" is Python; the code builders take "python3", "deno"
// and "shell" as language names, and neither "py" nor "ir".
var languages = []Language{
	{Name: Python, Kernel: PythonKernelName, Aliases: []string{"py"}, Code: Python, CodeAliases: []string{"python3"}},
	{Name: JavaScript, Kernel: DenoKernelName, Aliases: []string{"js"}, Code: JavaScript, CodeAliases: []string{"js", "deno"}},
	{Name: TypeScript, Kernel: DenoKernelName, Aliases: []string{"ts"}, Code: JavaScript, CodeAliases: []string{"ts"}},
	{Name: R, Kernel: RKernelName, Code: R},
	{Name: Bash, Kernel: BashKernelName, Aliases: []string{"sh"}, Code: Bash, CodeAliases: []string{"sh", "shell"}},
	{Name: Java, Code: Java},
}

// Languages returns envd's languages, in the order they are listed: a
// copy, the caller may change it.
func Languages() []Language {
	out := slices.Clone(languages)
	for i := range out {
		out[i].Aliases = slices.Clone(out[i].Aliases)
		out[i].CodeAliases = slices.Clone(out[i].CodeAliases)
	}
	return out
}

// codeLanguage returns the language the code builders write for name
// (lowercased and trimmed; "" is Python), or "" if they have none.
func codeLanguage(name string) string {
	if name == "" {
		return Python
	}
	for _, l := range languages {
		if l.Name == name || slices.Contains(l.CodeAliases, name) {
			return l.Code
		}
	}
	return ""
}
