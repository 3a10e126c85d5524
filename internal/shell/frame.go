package shell

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Framing (see doc.go): how a command reaches the shell, and how its end
// comes back.
//
// The shell is bash, interactive (so that SIGINT abandons the command line
// it runs, as Ctrl+C at a terminal does, and the shell lives on), reading
// its commands from a pipe of envd's. Its own stdio is moved out of the way
// of a user's descriptors before it starts (outerScript): fdStdin is what
// commands read by default (/dev/null, or the terminal), fdStdout and
// fdStderr are where the end markers go, and fdControl is a pipe to envd
// that only the shell's own functions write. The shell's own stdout and
// stderr are /dev/null: what bash prints between commands (the syntax
// error of a line an interrupt cut short) reaches no command's output. A
// command runs with its stdout and stderr on fdStdout and fdStderr and all
// four closed, so neither it nor anything it leaves running can reach
// them. (So a command's `exec >file` lasts until its end, as its `exec
// <file` does.)
//
// Each command is one short line (commandLine): envd's function pre tells
// envd the command began and gives $? back its value, `.` runs the command
// from a file envd wrote, and post prints the end marker, a fresh secret,
// on the shell's stdout and stderr, then sends the status, the cwd and the
// exported environment on the control pipe. A second line (fbLine) runs
// post's work if the first was abandoned by an interrupt.

// The shell's own descriptors, high enough to stay out of a user's way
// (bash allots {var} redirections from 10 up, and keeps 255). A command
// that opens one of them for itself loses it when it ends.
const (
	fdInput   = 249 // a command's stdin while it runs
	fdStdin   = 250
	fdStdout  = 251
	fdStderr  = 252
	fdControl = 253
)

// Markers are an OSC escape sequence that terminals ignore: ESC ] 6973 ;
// nonce BEL. The nonce is 32 hex digits. The line that carries a nonce to
// the shell is printable ASCII (commandLine quotes everything else), so no
// echo of it (set -v, xtrace, a DEBUG trap printing $BASH_COMMAND) holds a
// marker: a marker starts with ESC.
const (
	markerPrefix = "\x1b]6973;"
	markerSuffix = "\x07"
	nonceLen     = 32
	markerLen    = len(markerPrefix) + nonceLen + len(markerSuffix)
)

// newNonce is 128 random bits, in hex.
func newNonce() string {
	b := make([]byte, nonceLen/2)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newID is 64 random bits, in hex: session and command ids, file names.
func newID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// marker is the end marker of the command with nonce.
func marker(nonce string) []byte {
	return []byte(markerPrefix + nonce + markerSuffix)
}

// outerScript is the -c script of the shell as envd starts it ($1: the
// command pipe, $2: the control pipe): it moves its stdio to the high
// descriptors and execs an interactive bash that reads the command pipe.
// --noediting: no readline (which would echo what it reads); --norc and
// --noprofile: nothing of the user's runs but the commands.
const outerScript = `exec 250<&0 251>&1 252>&2 253>"$2" 0<"$1" 1>/dev/null 2>/dev/null || exit 127
exec "$BASH" --noprofile --norc --noediting -i`

// shellArgs are the arguments of the shell as started.
func shellArgs(cmdPipe, controlPipe string) []string {
	return []string{"--noprofile", "--norc", "-c", outerScript, "envd-shell", cmdPipe, controlPipe}
}

// bootstrap is what envd writes first to a new shell: settings, envd's
// functions (read-only, so that a command cannot replace them), and the end
// of command 0, which says the shell is ready.
//
// Every function first turns off, for itself only (local -), the options
// that would trace it (xtrace, verbose), stop it (errexit, nounset) or
// export its variables (allexport); its output that could go to the
// command's stderr goes to /dev/null. pre returns the previous command's
// status, so the next command finds it in $?; post takes the command's
// status as its first act. end writes the marker to the shell's stdout
// (and stderr, without a terminal), then the end message on the control
// pipe: E, seq, status, $PWD, then each exported variable as NAME=value,
// every field ending with NUL and the message with an empty field (see
// parser). The variables are enumerated with ${!X@} for every letter a
// name can start with: builtins only, no fork.
func bootstrap(nonce string, pty bool) []byte {
	var b strings.Builder
	b.WriteString("PS1= PS2= PS0=; unset PROMPT_COMMAND MAILCHECK HISTFILE; set +m +H +o history\n")

	const quiet = `{ local -; set +xveua; } 2>/dev/null; `
	// pre: $3 is the command's file, which `.` then reads from $__envd_f;
	// $4, when not empty, is the file that returns 2, and bash checks the
	// text first in a process of its own (see commandLine): a text that
	// does not parse makes $__envd_f that file. $5, when not empty, is the
	// command's input pipe, opened here as fdInput before pre tells envd
	// the command began (envd keeps its end open until then: a pipe with
	// no writer would make the open wait); else fdInput is the shell's
	// stdin.
	b.WriteString(`__envd_pre() { ` + quiet + `__envd_f=$3; ` +
		`if [[ -n $4 ]] && ! ( exec -a bash "$BASH" --noprofile --norc -n 0<"$3" 1>&251 2>&252 249<&- 250<&- 251>&- 252>&- 253>&- ); then __envd_f=$4; fi; ` +
		`if [[ -n $5 ]]; then exec 249<"$5"; else exec 249<&250; fi; ` +
		`builtin printf 'S\0%s\0\0' "$1" >&253; return "$2"; }` + "\n")
	b.WriteString(`__envd_post() { { local __envd_st=$?; local -; set +xveua; } 2>/dev/null; __envd_end "$1" "$2" "$__envd_st"; }` + "\n")
	b.WriteString(`__envd_fb() { { local __envd_st=$?; local -; set +xveua; } 2>/dev/null; [[ ${__envd_done-} == "$1" ]] || __envd_end "$1" "$2" "$__envd_st"; }` + "\n")
	b.WriteString(`__envd_end() { ` + quiet + `exec 249<&-; `)
	b.WriteString(`local __envd_m=$'\e]6973;'"$2"$'\a' __envd_n __envd_e=(); `)
	b.WriteString(`builtin printf '%s' "$__envd_m" >&251; `)
	if !pty {
		b.WriteString(`builtin printf '%s' "$__envd_m" >&252; `)
	}
	b.WriteString(`for __envd_n in`)
	for _, c := range "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_" {
		fmt.Fprintf(&b, ` "${!%c@}"`, c)
	}
	b.WriteString(`; do case ${!__envd_n@a} in *[aA]*) ;; *x*) [[ -v $__envd_n ]] && __envd_e+=("$__envd_n=${!__envd_n}") ;; esac; done; `)
	// Done is noted last: an interrupt that cuts end short anywhere leaves
	// fb to write it all again (a marker twice is harmless, see demux.go).
	b.WriteString(`builtin printf '%s\0' E "$1" "$3" "$PWD" "${__envd_e[@]}" '' >&253; __envd_done=$1; }` + "\n")
	// sync answers envd (see Session.syncLocked).
	b.WriteString(`__envd_sync() { ` + quiet + `builtin printf 'Y\0%s\0\0' "$1" >&253; }` + "\n")
	b.WriteString("readonly -f __envd_pre __envd_post __envd_fb __envd_end __envd_sync\n")
	b.WriteString(fbLine(0, nonce))
	return []byte(b.String())
}

// commandLine is the line that runs command seq from file (the command's
// text, which `.` reads whole), with stdin from the pipe input ("" for the
// shell's own, fdStdin), $? first set to prevStatus, and its end marked
// with nonce; then the fallback line. Alias expansion cannot touch it: each
// command word is quoted (\word).
//
// check ("" for none) is the file that returns 2, for a text bash must
// check before `.` reads it: bash 5.2 corrupts its own memory when a file
// it sources (or a string it evals) ends inside $(, <( or >(, and aborts
// soon after (free(): invalid next size). The check runs in a process of
// its own, which may crash unharmed; its messages are the command's.
func commandLine(seq uint64, prevStatus int, file, input, nonce, check string) []byte {
	line := fmt.Sprintf("{ \\__envd_pre %d %d %s %s %s && \\:; \\. \"$__envd_f\" 0<&%d 1>&%d 2>&%d %d<&- %d<&- %d>&- %d>&- %d>&-; \\__envd_post %d %s; }\n",
		seq, prevStatus, shellQuote(file), shellQuote(check), shellQuote(input),
		fdInput, fdStdout, fdStderr, fdInput, fdStdin, fdStdout, fdStderr, fdControl, seq, nonce)
	return append([]byte(line), fbLine(seq, nonce)...)
}

// needsCheck tells whether bash must check text before it sources it (see
// commandLine).
func needsCheck(text string) bool {
	return strings.Contains(text, "$(") || strings.Contains(text, "<(") || strings.Contains(text, ">(")
}

// fbLine ends command seq if its line was abandoned (an interrupt): a
// no-op once post has run. A line cut short by a signal as bash reads it
// loses its start: the braces make whatever is left of it a syntax error,
// never a command.
func fbLine(seq uint64, nonce string) string {
	return fmt.Sprintf("{ \\__envd_fb %d %s; }\n", seq, nonce)
}

// shellQuote quotes s for bash: $'...' with every byte outside printable
// ASCII, and ' and \, escaped.
func shellQuote(s string) string {
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c < 0x7f && c != '\'' && c != '\\' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, `\x%02x`, c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// Control messages, from the shell's functions on the control pipe.
const (
	msgStarted = "S" // S seq: command seq's line began
	msgEnded   = "E" // E seq status pwd NAME=value...: command seq ended
	msgSynced  = "Y" // Y token: the shell ran sync token
)

// syncLine asks the shell to answer token (msgSynced); braced as fbLine.
func syncLine(token uint64) string {
	return fmt.Sprintf("{ \\__envd_sync %d; }\n", token)
}

// message is one control message.
type message struct {
	kind   string
	seq    uint64
	status int
	pwd    string
	env    map[string]string
}

// maxMessage bounds one control message (an environment of that size is
// no use to anyone): a shell whose messages grow past it is broken.
const maxMessage = 16 << 20

// parser splits the control pipe's bytes into messages.
type parser struct {
	buf    []byte   // bytes of the field being read
	fields []string // the message's fields so far
	size   int
}

// feed parses p and returns the messages it completes. A message is its
// fields, each ended by NUL: the kind, the fixed fields of that kind (which
// may be empty: an unset $PWD), then for an end message the environment's
// NAME=value fields (never empty), and an empty field.
func (ps *parser) feed(p []byte) ([]message, error) {
	var out []message
	for len(p) > 0 {
		i := bytes.IndexByte(p, 0)
		if i < 0 {
			ps.buf = append(ps.buf, p...)
			ps.size += len(p)
			break
		}
		ps.buf = append(ps.buf, p[:i]...)
		ps.size += i + 1
		p = p[i+1:]
		field := string(ps.buf)
		ps.buf = ps.buf[:0]
		if len(ps.fields) == 0 || len(ps.fields) < fixedFields(ps.fields[0]) || field != "" {
			ps.fields = append(ps.fields, field)
			if len(ps.fields) == 1 && fixedFields(field) == 0 {
				return out, fmt.Errorf("unknown control message %q", field)
			}
			continue
		}
		m, err := parseMessage(ps.fields)
		ps.fields, ps.size = nil, 0
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
	if ps.size > maxMessage {
		return out, fmt.Errorf("a control message of over %d bytes", maxMessage)
	}
	return out, nil
}

// fixedFields is how many fields a message of kind has before its list (0:
// no such kind).
func fixedFields(kind string) int {
	switch kind {
	case msgStarted, msgSynced:
		return 2
	case msgEnded:
		return 4
	}
	return 0
}

func parseMessage(f []string) (message, error) {
	m := message{kind: f[0]}
	if len(f) < 2 {
		return m, fmt.Errorf("control message %q without a sequence number", f[0])
	}
	seq, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return m, fmt.Errorf("control message %q: sequence number %q", f[0], f[1])
	}
	m.seq = seq
	switch m.kind {
	case msgStarted, msgSynced:
		return m, nil
	case msgEnded:
		if len(f) < 4 {
			return m, fmt.Errorf("end message of command %d: %d fields", seq, len(f))
		}
		st, err := strconv.Atoi(f[2])
		if err != nil {
			return m, fmt.Errorf("end message of command %d: status %q", seq, f[2])
		}
		m.status, m.pwd = st, f[3]
		m.env = make(map[string]string, len(f)-4)
		for _, kv := range f[4:] {
			if k, v, ok := strings.Cut(kv, "="); ok {
				m.env[k] = v
			}
		}
		return m, nil
	}
	return m, fmt.Errorf("unknown control message %q", m.kind)
}
