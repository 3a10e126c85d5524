package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/envd-dev/envd/client"
)

// Shell completion: envctl completion SHELL prints a script made from the
// command table, so it names every command, alias and flag envctl has.
// Commands and flags complete everywhere, the words a flag takes where
// envctl knows them (--manager, --signal, --family, --lang), subcommands
// (pkg, contexts, shell), and the arguments of commands that take paths (local
// ones, and the sandbox's, which the shell cannot list) fall back to the
// shell's own file completion.

var completionCommand = &command{
	name:    "completion",
	args:    "bash|zsh|fish",
	summary: "print a shell completion script: source <(envctl completion bash) in ~/.bashrc, the same with zsh in ~/.zshrc, envctl completion fish > ~/.config/fish/completions/envctl.fish",
	words:   []string{"bash", "zsh", "fish"},
	noFiles: true,
	offline: true,
	// run is set by init: it reads the command table, which holds this
	// command.
}

func init() { completionCommand.run = runCompletion }

func runCompletion(_ context.Context, e *env, _ any, args []string) error {
	if len(args) != 1 {
		return usageError{"completion: give one shell: bash, zsh or fish (usage: envctl completion bash|zsh|fish)"}
	}
	gen, ok := completionScripts[args[0]]
	if !ok {
		return usageError{fmt.Sprintf("completion: unknown shell %q: give bash, zsh or fish", args[0])}
	}
	_, err := io.WriteString(e.stdout, gen(completionModel()))
	return err
}

var completionScripts = map[string]func(compModel) string{
	"bash": bashCompletion,
	"zsh":  zshCompletion,
	"fish": fishCompletion,
}

// compFlag is a flag as completion sees it.
type compFlag struct {
	name  string
	value bool   // it takes a value
	usage string // its help, for fish's descriptions
}

// compCommand is a command as completion sees it.
type compCommand struct {
	names   []string // its name, then its aliases
	summary string
	flags   []compFlag
	words   []string
	noFiles bool
}

type compModel struct {
	globals  []compFlag
	commands []compCommand
}

// Values of flags, for completion: the words some take; flags that take a
// path, local or in the sandbox, go to the shell's file completion; the
// other value flags complete nothing.
var (
	flagWords = map[string][]string{
		"manager": managerNames(),
		"signal":  slices.Sorted(maps.Keys(signalNames)),
		"family":  {"ipv4", "ipv6"},
		"lang":    {"python", "javascript", "typescript", "r", "bash"},
	}
	fileFlags = map[string]bool{"unix": true, "fc-uds": true, "save-dir": true, "cwd": true, "dir": true, "source": true}
)

func managerNames() []string {
	var out []string
	for _, m := range client.PackageManagers {
		out = append(out, string(m))
	}
	return out
}

func flagsOf(fs *flag.FlagSet) []compFlag {
	var out []compFlag
	fs.VisitAll(func(f *flag.Flag) {
		b, ok := f.Value.(interface{ IsBoolFlag() bool })
		_, usage := flag.UnquoteUsage(f)
		out = append(out, compFlag{name: f.Name, value: !ok || !b.IsBoolFlag(), usage: usage})
	})
	return out
}

func completionModel() compModel {
	gfs := newFlagSet("envctl")
	(&globals{}).register(gfs, noEnv)
	m := compModel{globals: flagsOf(gfs)}
	for _, c := range commands {
		fs := newFlagSet(c.name)
		if c.flags != nil {
			c.flags(fs)
		}
		m.commands = append(m.commands, compCommand{
			names: append([]string{c.name}, c.aliases...), summary: c.summary,
			flags: flagsOf(fs), words: c.words, noFiles: c.noFiles,
		})
	}
	return m
}

// valueFlags are the flags, of any command or global, that take a value:
// the word after one is its value, not an argument.
func (m compModel) valueFlags() []string {
	set := map[string]bool{}
	for _, f := range m.globals {
		if f.value {
			set[f.name] = true
		}
	}
	for _, c := range m.commands {
		for _, f := range c.flags {
			if f.value {
				set[f.name] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

func (m compModel) commandNames() []string {
	var out []string
	for _, c := range m.commands {
		out = append(out, c.names...)
	}
	return append(out, "help")
}

// spellings are the ways to write the flags on a command line: -name and
// --name, as the flag package takes both.
func spellings(names []string) []string {
	var out []string
	for _, n := range names {
		out = append(out, "-"+n, "--"+n)
	}
	return out
}

func written(flags []compFlag) []string {
	out := make([]string, len(flags))
	for i, f := range flags {
		out[i] = flagName(f.name)
	}
	return out
}

// valueCases groups value flags by what completes their value: words, a
// file, or nothing.
func (m compModel) valueCases() (words map[string][]string, files, none []string) {
	words = map[string][]string{}
	for _, n := range m.valueFlags() {
		switch {
		case flagWords[n] != nil:
			words[n] = flagWords[n]
		case fileFlags[n]:
			files = append(files, n)
		default:
			none = append(none, n)
		}
	}
	return words, files, none
}

func bashCompletion(m compModel) string {
	var b strings.Builder
	words, files, none := m.valueCases()
	b.WriteString(`# bash completion for envctl. Load it in ~/.bashrc:
#   source <(envctl completion bash)
# or for every user: envctl completion bash > /etc/bash_completion.d/envctl

# _envctl_files falls back to bash's own completion (file names).
_envctl_files() {
    if type compopt >/dev/null 2>&1; then
        compopt -o default
        COMPREPLY=()
    else
        COMPREPLY=($(compgen -f -- "$1"))
    fi
}

_envctl() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"
    # --flag=value: bash splits it at the =.
    if [[ $cur == "=" ]]; then
        cur=""
    elif [[ $prev == "=" ]]; then
        prev="${COMP_WORDS[COMP_CWORD-2]}"
    fi
    # The command and its first argument, past the flags and their values,
    # in the line split at blanks only (COMP_WORDS splits at : and = too).
    local cmd="" sub="" w i n line="${COMP_LINE:0:COMP_POINT}"
    local -a ws
    read -ra ws <<< "$line"
    n=${#ws[@]}
    [[ $line =~ [[:space:]]$ ]] || (( n-- ))
    for (( i = 1; i < n; i++ )); do
        w="${ws[i]}"
        case "$w" in
`)
	fmt.Fprintf(&b, "            %s) (( i++ )) ;;\n", strings.Join(spellings(m.valueFlags()), "|"))
	b.WriteString(`            -*) ;;
            *) if [[ -z $cmd ]]; then cmd="$w"; elif [[ -z $sub ]]; then sub="$w"; fi ;;
        esac
    done
    case "$prev" in
`)
	for _, n := range slices.Sorted(maps.Keys(words)) {
		fmt.Fprintf(&b, "        %s) COMPREPLY=($(compgen -W %q -- \"$cur\")); return ;;\n", strings.Join(spellings([]string{n}), "|"), strings.Join(words[n], " "))
	}
	fmt.Fprintf(&b, "        %s) _envctl_files \"$cur\"; return ;;\n", strings.Join(spellings(files), "|"))
	fmt.Fprintf(&b, "        %s) COMPREPLY=(); return ;;\n", strings.Join(spellings(none), "|"))
	fmt.Fprintf(&b, `    esac
    local globals=%q
    if [[ -z $cmd ]]; then
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "$globals --version --help" -- "$cur"))
        else
            COMPREPLY=($(compgen -W %q -- "$cur"))
        fi
        return
    fi
    local flags=""
    case "$cmd" in
`, strings.Join(written(m.globals), " "), strings.Join(m.commandNames(), " "))
	for _, c := range m.commands {
		fmt.Fprintf(&b, "        %s) flags=%q ;;\n", strings.Join(c.names, "|"), strings.Join(written(c.flags), " "))
	}
	fmt.Fprintf(&b, `        help) [[ -z $sub ]] && COMPREPLY=($(compgen -W %q -- "$cur")); return ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$flags $globals" -- "$cur"))
        return
    fi
    case "$cmd" in
`, strings.Join(m.commandNames(), " "))
	for _, c := range m.commands {
		switch {
		case len(c.words) > 0 && c.noFiles:
			fmt.Fprintf(&b, "        %s) [[ -z $sub ]] && COMPREPLY=($(compgen -W %q -- \"$cur\")); return ;;\n", strings.Join(c.names, "|"), strings.Join(c.words, " "))
		case len(c.words) > 0:
			fmt.Fprintf(&b, "        %s) if [[ -z $sub ]]; then COMPREPLY=($(compgen -W %q -- \"$cur\")); return; fi ;;\n", strings.Join(c.names, "|"), strings.Join(c.words, " "))
		case c.noFiles:
			fmt.Fprintf(&b, "        %s) COMPREPLY=(); return ;;\n", strings.Join(c.names, "|"))
		}
	}
	b.WriteString(`    esac
    _envctl_files "$cur"
}

complete -F _envctl envctl
`)
	return b.String()
}

func zshCompletion(m compModel) string {
	var b strings.Builder
	words, files, none := m.valueCases()
	b.WriteString(`#compdef envctl
# zsh completion for envctl. Load it in ~/.zshrc, after compinit:
#   source <(envctl completion zsh)
# or save it as _envctl in a directory of $fpath:
#   envctl completion zsh > "${fpath[1]}/_envctl"

_envctl() {
    local cmd="" sub="" w i
    # The command and its first argument, past the flags and their values.
    for (( i = 2; i < CURRENT; i++ )); do
        w=${words[i]}
        case $w in
`)
	fmt.Fprintf(&b, "            (%s) (( i++ )) ;;\n", strings.Join(spellings(m.valueFlags()), "|"))
	b.WriteString(`            (-*) ;;
            (*) if [[ -z $cmd ]]; then cmd=$w; elif [[ -z $sub ]]; then sub=$w; fi ;;
        esac
    done
    local cur=${words[CURRENT]} prev=${words[CURRENT-1]}
    case $prev in
`)
	for _, n := range slices.Sorted(maps.Keys(words)) {
		fmt.Fprintf(&b, "        (%s) compadd -- %s; return ;;\n", strings.Join(spellings([]string{n}), "|"), strings.Join(words[n], " "))
	}
	fmt.Fprintf(&b, "        (%s) _files; return ;;\n", strings.Join(spellings(files), "|"))
	fmt.Fprintf(&b, "        (%s) return 1 ;;\n", strings.Join(spellings(none), "|"))
	fmt.Fprintf(&b, `    esac
    local -a globals flags
    globals=(%s)
    if [[ -z $cmd ]]; then
        if [[ $cur == -* ]]; then
            compadd -- $globals --version --help
        else
            compadd -- %s
        fi
        return
    fi
    case $cmd in
`, strings.Join(written(m.globals), " "), strings.Join(m.commandNames(), " "))
	for _, c := range m.commands {
		fmt.Fprintf(&b, "        (%s) flags=(%s) ;;\n", strings.Join(c.names, "|"), strings.Join(written(c.flags), " "))
	}
	fmt.Fprintf(&b, `        (help) [[ -z $sub ]] && compadd -- %s; return ;;
    esac
    if [[ $cur == -* ]]; then
        compadd -- $flags $globals
        return
    fi
    case $cmd in
`, strings.Join(m.commandNames(), " "))
	for _, c := range m.commands {
		switch {
		case len(c.words) > 0 && c.noFiles:
			fmt.Fprintf(&b, "        (%s) [[ -z $sub ]] && compadd -- %s; return ;;\n", strings.Join(c.names, "|"), strings.Join(c.words, " "))
		case len(c.words) > 0:
			fmt.Fprintf(&b, "        (%s) if [[ -z $sub ]]; then compadd -- %s; return; fi ;;\n", strings.Join(c.names, "|"), strings.Join(c.words, " "))
		case c.noFiles:
			fmt.Fprintf(&b, "        (%s) return 1 ;;\n", strings.Join(c.names, "|"))
		}
	}
	b.WriteString(`    esac
    _files
}

if [[ ${zsh_eval_context[-1]} == loadautofunc ]]; then
    _envctl "$@"
else
    compdef _envctl envctl
fi
`)
	return b.String()
}

// fishQuote quotes s for fish, in single quotes.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// shortText is the first clause of a help text, for fish's descriptions.
func shortText(s string) string {
	for _, sep := range []string{"; ", " (", ": ", ", "} {
		if i := strings.Index(s, sep); i > 0 {
			s = s[:i]
		}
	}
	return s
}

// fishFlag is fish's complete line for f, under condition cond ("" for
// always).
func fishFlag(f compFlag, cond string) string {
	var b strings.Builder
	b.WriteString("complete -c envctl")
	if cond != "" {
		b.WriteString(" -n " + fishQuote(cond))
	}
	if len(f.name) == 1 {
		b.WriteString(" -s " + f.name)
	} else {
		b.WriteString(" -l " + f.name)
	}
	switch {
	case !f.value:
	case flagWords[f.name] != nil:
		b.WriteString(" -x -a " + fishQuote(strings.Join(flagWords[f.name], " ")))
	case fileFlags[f.name]:
		b.WriteString(" -r -F")
	default:
		b.WriteString(" -x")
	}
	b.WriteString(" -d " + fishQuote(shortText(f.usage)))
	return b.String()
}

func fishCompletion(m compModel) string {
	var b strings.Builder
	b.WriteString(`# fish completion for envctl. Save it where fish finds it:
#   envctl completion fish > ~/.config/fish/completions/envctl.fish

# __envctl_args prints the command and its arguments so far, past the
# flags and their values.
function __envctl_args
    set -l skip 0
    set -l toks (commandline -opc)
    set -e toks[1]
    for t in $toks
        if test $skip = 1
            set skip 0
            continue
        end
        switch $t
`)
	fmt.Fprintf(&b, "            case %s\n                set skip 1\n", strings.Join(spellings(m.valueFlags()), " "))
	b.WriteString(`            case '-*'
            case '*'
                echo $t
        end
    end
end

# __envctl_command_is tells whether the command is one of its arguments.
function __envctl_command_is
    set -l a (__envctl_args)
    test (count $a) -ge 1; and contains -- $a[1] $argv
end

# __envctl_first_arg_of tells whether the command is one of its arguments
# and has no argument yet.
function __envctl_first_arg_of
    set -l a (__envctl_args)
    test (count $a) -eq 1; and contains -- $a[1] $argv
end

function __envctl_no_command
    test (count (__envctl_args)) -eq 0
end

`)
	for _, f := range m.globals {
		b.WriteString(fishFlag(f, "") + "\n")
	}
	b.WriteString("complete -c envctl -n __envctl_no_command -l version -d 'print the version'\n")
	for _, c := range m.commands {
		for _, n := range c.names {
			fmt.Fprintf(&b, "complete -c envctl -n __envctl_no_command -f -a %s -d %s\n", n, fishQuote(shortText(c.summary)))
		}
	}
	b.WriteString("complete -c envctl -n __envctl_no_command -f -a help -d 'help on envctl or a command'\n")
	for _, c := range m.commands {
		is := "__envctl_command_is " + strings.Join(c.names, " ")
		for _, f := range c.flags {
			b.WriteString(fishFlag(f, is) + "\n")
		}
		if len(c.words) > 0 {
			fmt.Fprintf(&b, "complete -c envctl -n %s -f -a %s\n", fishQuote("__envctl_first_arg_of "+strings.Join(c.names, " ")), fishQuote(strings.Join(c.words, " ")))
		}
		if c.noFiles {
			fmt.Fprintf(&b, "complete -c envctl -n %s -f\n", fishQuote(is))
		}
	}
	fmt.Fprintf(&b, "complete -c envctl -n '__envctl_first_arg_of help' -f -a %s\n", fishQuote(strings.Join(m.commandNames(), " ")))
	return b.String()
}
