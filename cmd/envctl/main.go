// Command envctl talks to envd, the agent inside a sandbox, to debug it: run
// commands, copy files both ways, watch directories, run code in stateful
// contexts, manage packages (pip, npm, R, apt), list the sandbox's TCP
// listeners and their forwarding, forward local ports into the sandbox,
// check health and metrics.
// It reaches envd over TCP, a unix socket, AF_VSOCK, or the host side of a
// Firecracker vsock device, through the client package (and
// internal/buildinfo for its -version line).
//
// Run `envctl help` for the commands. Errors are one line on stderr. Exit
// codes follow docker's: `envctl run` exits with the process's code (128+N
// when signal N ended it), 127 when the command does not exist, 126 when it
// cannot be run (not executable, a working directory it cannot use), and
// 125 when envctl itself or the way to envd failed. `envctl pkg` exits 1
// when the operation failed in the sandbox (the installer failed, a package
// to remove is not installed, the installer was killed at the deadline).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/internal/buildinfo"
)

// command is one subcommand.
type command struct {
	name    string
	args    string // the usage after the name
	summary string
	// interspersed lets flags follow positional arguments (not for run,
	// whose arguments after the first are the command's own).
	interspersed bool
	flags        func(fs *flag.FlagSet) any
	run          func(ctx context.Context, e *env, opts any, args []string) error
}

var commands = []*command{
	runCommand, psCommand, killCommand,
	lsCommand, statCommand, catCommand, cpCommand, watchCommand,
	execCodeCommand, languagesCommand, pkgCommand, portsCommand, forwardCommand,
	healthCommand, metricsCommand, envsCommand,
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

// Exit codes of envctl's own, as docker's.
const (
	exitFailed        = 125 // envctl, or the way to envd, failed
	exitCannotRun     = 126 // the command exists but cannot be run
	exitCommandAbsent = 127 // the command does not exist
)

// usageError is a mistake in the command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		// envctl is short-lived, and streaming output it allocates a
		// message's bytes per message: collecting less often costs a few
		// MiB and saves about a tenth of the time of `envctl run` printing
		// a gigabyte (bench/stream.sh: 2.6 s instead of 2.9-3.3 s here).
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
	if ee, ok := errors.AsType[exitError](err); ok {
		if ee.msg != "" {
			fmt.Fprintln(stderr, "envctl: "+oneLine(ee.msg))
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "envctl: "+oneLine(err.Error()))
	return exitFailed
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

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.addr, "addr", os.Getenv("ENVCTL_ADDR"), "envd's `URL` (http:// or https://) or host:port (env ENVCTL_ADDR; default "+client.DefaultAddr+")")
	fs.BoolVar(&g.insecure, "insecure", false, "with an https --addr, accept any certificate (a test proxy's self-signed one)")
	fs.StringVar(&g.unix, "unix", os.Getenv("ENVCTL_UNIX"), "reach envd on this unix socket `PATH` (env ENVCTL_UNIX)")
	fs.StringVar(&g.vsock, "vsock", os.Getenv("ENVCTL_VSOCK"), "reach envd over AF_VSOCK at `CID:PORT` (env ENVCTL_VSOCK)")
	fs.StringVar(&g.fcUDS, "fc-uds", os.Getenv("ENVCTL_FC_UDS"), "reach envd through a Firecracker vsock socket, `PATH:PORT` (env ENVCTL_FC_UDS)")
	fs.StringVar(&g.token, "token", os.Getenv("ENVCTL_TOKEN"), "access `TOKEN` (env ENVCTL_TOKEN)")
	fs.StringVar(&g.user, "user", os.Getenv("ENVCTL_USER"), "run as this `USER` (env ENVCTL_USER; default envd's default user)")
}

var transportFlags = []string{"addr", "unix", "vsock", "fc-uds"}

// env is what a command runs with.
type env struct {
	c      *client.Client
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var g globals
	gfs := newFlagSet("envctl")
	g.register(gfs)
	if err := gfs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return nil
		}
		return usageError{err.Error() + " (run envctl help)"}
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
	g.register(fs)
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
		return usageError{fmt.Sprintf("%s: %v (usage: envctl %s %s)", cmd.name, err, cmd.name, cmd.args)}
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
	return cmd.run(ctx, &env{c: c, stdin: stdin, stdout: stdout, stderr: stderr}, opts, pos)
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
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
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
global flags (before or after the command):
  --addr URL         envd's address (default http://`+client.DefaultAddr+`)
  --unix PATH        envd's unix socket
  --vsock CID:PORT   envd over AF_VSOCK
  --fc-uds PATH:PORT envd through a Firecracker vsock socket (CONNECT handshake)
  --token TOKEN      access token
  --user USER        run as this user
Each can also come from ENVCTL_ADDR, ENVCTL_UNIX, ENVCTL_VSOCK, ENVCTL_FC_UDS,
ENVCTL_TOKEN and ENVCTL_USER; a flag wins.

Run envctl help COMMAND for a command's flags.
`)
}

func cmdUsage(w io.Writer, c *command) {
	fmt.Fprintf(w, "usage: envctl %s %s\n\n%s\n", c.name, c.args, c.summary)
	fs := newFlagSet(c.name)
	if c.flags != nil {
		c.flags(fs)
	}
	has := false
	fs.VisitAll(func(*flag.Flag) { has = true })
	if has {
		fmt.Fprintln(w, "\nflags:")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
}

// versionLine is what --version prints: envctl's version (the same as
// the envd of its build), the commit it was built from and the Go version.
func versionLine() string { return "envctl " + buildinfo.Version() + " " + buildinfo.Describe() }
