// Command envctl talks to envd, the agent inside a sandbox, to debug it: run
// commands, alone or in persistent shell sessions, copy, move and remove
// files both ways, watch directories, run code in stateful contexts and
// list, restart or remove those contexts, manage packages (pip, npm, R,
// apt), list the sandbox's TCP listeners and their forwarding, forward
// local ports into the sandbox, check health, the token, and metrics.
// `envctl completion bash|zsh|fish` prints a shell completion script.
// It reaches envd over TCP, a unix socket, AF_VSOCK, or the host side of a
// Firecracker vsock device, through the client package (and the buildinfo
// package for its --version line: the version envd -version prints); it
// imports none of envd's internal packages.
//
// Run `envctl help` for the commands. Errors are one line on stderr, and
// the exit code says what kind of failure it was:
//
//	0    ok
//	1    the operation failed in the sandbox: the code raised or did not
//	     end well (exec-code), the installer failed or a package to remove
//	     is not installed (pkg)
//	2    usage: a bad command line
//	3    refused: envd refused the access token (or its lack), the user,
//	     or the user's permission
//	4    not found: the file, directory, process or context envd was
//	     asked about does not exist
//	125  envctl itself failed, or envd could not be reached; any other
//	     error
//
// `envctl run` exits as docker's does: with the process's code (128+N when
// signal N ended it), 127 when the command does not exist, 126 when it
// cannot be run (not executable, a working directory it cannot use), and
// 2, 3 or 125 as above when it did not start for those reasons.
// `envctl shell run` (and `shell attach`, with its last command's) exits
// with the command's status as bash gives it ($?, 128+N when signal N
// ended it), 124 when it ran out of its --timeout, 130 when it was
// interrupted, and when the command ended the session, the shell's status.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"connectrpc.com/connect"

	"github.com/envd-dev/envd/buildinfo"
	"github.com/envd-dev/envd/client"
)

// command is one subcommand.
type command struct {
	name    string
	aliases []string // other names that select it
	args    string   // the usage after the name
	summary string
	// interspersed lets flags follow positional arguments (not for run,
	// whose arguments after the first are the command's own).
	interspersed bool
	flags        func(fs *flag.FlagSet) any
	run          func(ctx context.Context, e *env, opts any, args []string) error

	// For shell completion: words are what the first argument may be (a
	// subcommand); noFiles says that no argument is a path, so none is
	// completed as one.
	words   []string
	noFiles bool
	// offline commands do not talk to envd (completion).
	offline bool
}

var commands = []*command{
	runCommand, psCommand, killCommand, shellCommand,
	lsCommand, statCommand, catCommand, cpCommand, mvCommand, rmCommand, mkdirCommand, watchCommand,
	execCodeCommand, languagesCommand, contextsCommand, pkgCommand, portsCommand, forwardCommand,
	healthCommand, metricsCommand, envsCommand, completionCommand,
}

// exitError ends envctl with a code, and msg on stderr if any: `run`
// passes on the process's exit code this way, and says why a command could
// not run (126, 127).
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string {
	if e.msg != "" {
		return e.msg
	}
	return "exit " + strconv.Itoa(e.code)
}

// Exit codes: the package comment has the table.
const (
	exitSandbox       = 1   // the operation failed in the sandbox
	exitUsage         = 2   // a bad command line
	exitRefused       = 3   // envd refused the token, the user or its permission
	exitNotFound      = 4   // what envd was asked about does not exist
	exitFailed        = 125 // envctl, or the way to envd, failed; anything else
	exitCannotRun     = 126 // the command exists but cannot be run
	exitCommandAbsent = 127 // the command does not exist
)

// exitCode is the exit code of a failure: by its kind for envd's answers
// (their Connect code), as given for an exitError.
func exitCode(err error) int {
	if ee, ok := errors.AsType[exitError](err); ok {
		return ee.code
	}
	if _, ok := errors.AsType[usageError](err); ok {
		return exitUsage
	}
	if _, ok := errors.AsType[*client.Error](err); ok {
		switch client.CodeOf(err) {
		case connect.CodeUnauthenticated, connect.CodePermissionDenied:
			return exitRefused
		case connect.CodeNotFound:
			return exitNotFound
		}
	}
	return exitFailed
}

// usageError is a mistake in the command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		// envctl is short-lived, and streaming output it allocates a
		// message's bytes per message: collecting less often costs a few
		// MiB and saves time on `envctl run` printing a gigabyte
		// (bench/stream.sh measures it).
		debug.SetGCPercent(400)
	}
	os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// Main runs envctl and returns its exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version" || args[0] == "version") {
		fmt.Fprintln(stdout, versionLine())
		return 0
	}
	err := run(args, stdin, stdout, stderr)
	if err == nil {
		return 0
	}
	if ee, ok := errors.AsType[exitError](err); !ok || ee.msg != "" {
		fmt.Fprintln(stderr, "envctl: "+oneLine(err.Error()))
	}
	return exitCode(err)
}

// oneLine keeps a message on one line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	s = strings.ReplaceAll(s, "\r", "")
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// globals are the flags every command takes, before or after its name.
type globals struct {
	addr, unix, vsock, fcUDS, token, user string
	insecure                              bool
}

// register adds the global flags to fs, their defaults from getenv
// (os.Getenv; help passes one that finds nothing, so that it never shows
// a token).
func (g *globals) register(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&g.addr, "addr", getenv("ENVCTL_ADDR"), "envd's `URL` (http:// or https://) or host:port (env ENVCTL_ADDR; default "+client.DefaultAddr+")")
	fs.BoolVar(&g.insecure, "insecure", false, "with an https --addr, accept any certificate (a test proxy's self-signed one)")
	fs.StringVar(&g.unix, "unix", getenv("ENVCTL_UNIX"), "reach envd on this unix socket `PATH` (env ENVCTL_UNIX)")
	fs.StringVar(&g.vsock, "vsock", getenv("ENVCTL_VSOCK"), "reach envd over AF_VSOCK at `CID:PORT` (env ENVCTL_VSOCK)")
	fs.StringVar(&g.fcUDS, "fc-uds", getenv("ENVCTL_FC_UDS"), "reach envd through a Firecracker vsock socket, `PATH:PORT`, with the CONNECT handshake (env ENVCTL_FC_UDS)")
	fs.StringVar(&g.token, "token", getenv("ENVCTL_TOKEN"), "access `TOKEN` (env ENVCTL_TOKEN)")
	fs.StringVar(&g.user, "user", getenv("ENVCTL_USER"), "run as this `USER` (env ENVCTL_USER; default envd's default user)")
}

// noEnv is a getenv that finds nothing.
func noEnv(string) string { return "" }

var transportFlags = []string{"addr", "unix", "vsock", "fc-uds"}

// env is what a command runs with.
type env struct {
	c      *client.Client
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// token tells whether an access token was given (--token or
	// ENVCTL_TOKEN).
	token bool
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var g globals
	gfs := newFlagSet("envctl")
	g.register(gfs, os.Getenv)
	if err := gfs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return nil
		}
		return usageError{flagError(err) + " (run envctl help)"}
	}
	if gfs.NArg() == 0 {
		return usageError{"no command given: run envctl help for the list"}
	}
	name, rest := gfs.Arg(0), gfs.Args()[1:]
	if name == "help" {
		if len(rest) > 0 {
			if cmd := lookup(rest[0]); cmd != nil {
				cmdUsage(stdout, cmd)
				return nil
			}
			return usageError{fmt.Sprintf("unknown command %q: run envctl help for the list", rest[0])}
		}
		usage(stdout)
		return nil
	}
	cmd := lookup(name)
	if cmd == nil {
		return usageError{fmt.Sprintf("unknown command %q: run envctl help for the list", name)}
	}
	// Values given before the command name stay unless repeated after it.
	before := map[string]string{}
	gfs.Visit(func(f *flag.Flag) { before[f.Name] = f.Value.String() })
	fs := newFlagSet("envctl " + cmd.name)
	g.register(fs, os.Getenv)
	for k, v := range before {
		fs.Set(k, v)
	}
	var opts any
	if cmd.flags != nil {
		opts = cmd.flags(fs)
	}
	pos, err := parse(fs, rest, cmd.interspersed)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			cmdUsage(stdout, cmd)
			return nil
		}
		return usageError{fmt.Sprintf("%s: %s (usage: envctl %s %s)", cmd.name, flagError(err), cmd.name, cmd.args)}
	}
	if cmd.offline {
		return cmd.run(context.Background(), &env{stdin: stdin, stdout: stdout, stderr: stderr}, opts, pos)
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	c, err := g.client(explicit)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return cmd.run(ctx, &env{c: c, stdin: stdin, stdout: stdout, stderr: stderr, token: g.token != ""}, opts, pos)
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name || slices.Contains(c.aliases, name) {
			return c
		}
	}
	return nil
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported in one line by Main
	return fs
}

// parse parses flags, and with interspersed, flags after positional
// arguments too. Everything after "--" is positional.
func parse(fs *flag.FlagSet, args []string, interspersed bool) ([]string, error) {
	if !interspersed {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		return fs.Args(), nil
	}
	var pos []string
	for {
		// flag.Parse stops at "--" (consuming it) or at the first
		// positional argument.
		dashdash := -1
		for i, a := range args {
			if a == "--" {
				dashdash = i
				break
			}
		}
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		left := fs.Args()
		consumed := len(args) - len(left)
		if dashdash >= 0 && consumed > dashdash {
			return append(pos, left...), nil
		}
		if len(left) == 0 {
			return pos, nil
		}
		pos = append(pos, left[0])
		args = left[1:]
	}
}

// client builds the client from the flags; explicit names the flags given
// on the command line, which win over ENVCTL_* variables.
func (g *globals) client(explicit map[string]bool) (*client.Client, error) {
	vals := map[string]*string{"addr": &g.addr, "unix": &g.unix, "vsock": &g.vsock, "fc-uds": &g.fcUDS}
	var given []string
	for _, n := range transportFlags {
		if explicit[n] {
			given = append(given, n)
		}
	}
	if len(given) == 0 {
		// None on the command line: the environment's, if any.
		for _, n := range transportFlags {
			if *vals[n] != "" {
				given = append(given, n)
			}
		}
		if len(given) > 1 {
			envs := make([]string, len(given))
			for i, n := range given {
				envs[i] = "ENVCTL_" + strings.ToUpper(strings.ReplaceAll(n, "-", "_"))
			}
			return nil, usageError{"the environment sets more than one way to reach envd: " + strings.Join(envs, ", ") + ": keep one, or give a flag"}
		}
	}
	if len(given) > 1 {
		return nil, usageError{"give one of --" + strings.Join(given, ", --") + ", not several"}
	}
	// One process's output at a time: over HTTP/1.1, it streams faster.
	o := client.Options{Token: g.token, User: g.user, InsecureSkipVerify: g.insecure, OutputHTTP1: true}
	if len(given) == 1 {
		switch v := *vals[given[0]]; given[0] {
		case "addr":
			if v == "" {
				return nil, usageError{"--addr is empty: give envd's URL, e.g. http://127.0.0.1:49983"}
			}
			if i := strings.Index(v, "://"); i >= 0 {
				if scheme := strings.ToLower(v[:i]); scheme != "http" && scheme != "https" {
					return nil, usageError{fmt.Sprintf("--addr %s: unsupported scheme %q: use http:// or https://", v, scheme)}
				}
			}
			o.Addr = v
		case "unix":
			if v == "" {
				return nil, usageError{"--unix is empty: give the socket's path"}
			}
			o.Dialer = client.Unix(v)
		case "vsock":
			cid, port, err := parseVsock(v)
			if err != nil {
				return nil, err
			}
			o.Dialer = client.Vsock(cid, port)
		case "fc-uds":
			path, port, err := parseFCUDS(v)
			if err != nil {
				return nil, err
			}
			o.Dialer = client.FirecrackerUDS(path, port)
		}
	}
	return client.New(o), nil
}

func parseVsock(v string) (cid, port uint32, err error) {
	bad := usageError{fmt.Sprintf("--vsock %q: want CID:PORT, two numbers, e.g. 3:49983", v)}
	c, p, ok := strings.Cut(v, ":")
	if !ok {
		return 0, 0, bad
	}
	c64, err1 := strconv.ParseUint(c, 10, 32)
	p64, err2 := strconv.ParseUint(p, 10, 32)
	if err1 != nil || err2 != nil || p64 == 0 {
		return 0, 0, bad
	}
	return uint32(c64), uint32(p64), nil
}

func parseFCUDS(v string) (string, uint32, error) {
	bad := usageError{fmt.Sprintf("--fc-uds %q: want PATH:PORT, e.g. /srv/vm/v.sock:49983", v)}
	i := strings.LastIndexByte(v, ':')
	if i <= 0 {
		return "", 0, bad
	}
	p, err := strconv.ParseUint(v[i+1:], 10, 32)
	if err != nil || p == 0 {
		return "", 0, bad
	}
	return v[:i], uint32(p), nil
}

func usage(w io.Writer) {
	fmt.Fprint(w, `envctl talks to envd, the agent inside a sandbox.

usage: envctl [global flags] COMMAND [flags] [args]

commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
global flags (before or after the command):
`)
	gfs := newFlagSet("envctl")
	(&globals{}).register(gfs, noEnv)
	printFlags(w, gfs)
	fmt.Fprint(w, `
Each of --addr, --unix, --vsock, --fc-uds, --token and --user can also come
from ENVCTL_ADDR, ENVCTL_UNIX, ENVCTL_VSOCK, ENVCTL_FC_UDS, ENVCTL_TOKEN and
ENVCTL_USER; a flag wins.

exit codes:
  0    ok
  1    the operation failed in the sandbox (exec-code: the code raised or did
       not end well; pkg: the installer failed, or a package to remove is not
       installed)
  2    usage: a bad command line
  3    refused: envd refused the token (or its lack), the user or its permission
  4    not found: the file, directory, process or context does not exist
  125  envctl itself failed, or envd could not be reached; any other error
  run exits with the process's code (128+N for signal N), 127 when the
  command does not exist, 126 when it cannot be run.
  shell run exits with the command's status ($?: 128+N for signal N), 124
  when it ran out of its --timeout, 130 when it was interrupted, the
  shell's status when the command ended the session.

Run envctl help COMMAND for a command's flags; envctl --version for the version.
`)
}

func cmdUsage(w io.Writer, c *command) {
	fmt.Fprintf(w, "usage: envctl %s %s\n\n%s\n", c.name, c.args, c.summary)
	if len(c.aliases) > 0 {
		fmt.Fprintf(w, "\nalso: envctl %s\n", strings.Join(c.aliases, ", envctl "))
	}
	fs := newFlagSet(c.name)
	if c.flags != nil {
		c.flags(fs)
	}
	has := false
	fs.VisitAll(func(*flag.Flag) { has = true })
	if has {
		fmt.Fprintln(w, "\nflags:")
		printFlags(w, fs)
	}
}

// flagErrorName finds the flag the flag package names in its errors, which
// it writes -name.
var flagErrorName = regexp.MustCompile(`^(flag provided but not defined: |flag needs an argument: |invalid value ".*?" for flag |invalid boolean value ".*?" for )-([^\s:]+)`)

// flagError is the flag package's error with the flag written as help
// writes it (flagName).
func flagError(err error) string {
	return flagErrorName.ReplaceAllStringFunc(err.Error(), func(m string) string {
		sub := flagErrorName.FindStringSubmatch(m)
		return sub[1] + flagName(sub[2])
	})
}

// flagName is how envctl writes a flag, in usage lines and in help:
// --name, or -x for one letter (the flag package takes -name and --name
// alike).
func flagName(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// printFlags is flag.PrintDefaults with the flags written as flagName
// writes them.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		var b strings.Builder
		b.WriteString("  " + flagName(f.Name))
		name, usage := flag.UnquoteUsage(f)
		if name != "" {
			b.WriteString(" " + name)
		}
		if b.Len() <= 4 {
			// A one-letter boolean: the usage on the same line, as
			// PrintDefaults puts it.
			b.WriteString("\t")
		} else {
			b.WriteString("\n    \t")
		}
		b.WriteString(strings.ReplaceAll(usage, "\n", "\n    \t"))
		if d := f.DefValue; d != "" && d != "false" && d != "0" {
			if _, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok {
				if strings.ContainsAny(d, " \t") || !isNumber(d) {
					d = strconv.Quote(d)
				}
			}
			fmt.Fprintf(&b, " (default %s)", d)
		}
		fmt.Fprintln(w, b.String())
	})
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

// versionLine is what --version prints: envctl's version (the same as
// the envd of its build), the commit it was built from and the Go version.
func versionLine() string { return "envctl " + buildinfo.Version() + " " + buildinfo.Describe() }
