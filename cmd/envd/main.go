// Command envd is the agent inside every sandbox: processes, files and
// stateful code execution over Connect-RPC and HTTP. See README.md.
//
// Every flag can also be set through the environment: -default-user is
// ENVD_DEFAULT_USER, and so on. A flag given on the command line wins.
// Secrets belong in the environment: every user of the machine can read a
// process's command line in /proc/PID/cmdline, so envd warns at startup when
// -access-token is on it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/envd-dev/envd/buildinfo"
	"github.com/envd-dev/envd/internal/cgroup"
	"github.com/envd-dev/envd/internal/daemon"
	"github.com/envd-dev/envd/internal/handover"
	"github.com/envd-dev/envd/internal/interpreter"
	"github.com/envd-dev/envd/internal/mmds"
	"github.com/envd-dev/envd/internal/process"
)

func main() {
	// A live upgrade's new envd: take the handover before anything else
	// (it unsets its variables). Until the daemon commits it, any failure,
	// a panic included, execs the old binary back with it.
	ho, err := handover.Take()
	if err != nil {
		fmt.Fprintln(os.Stderr, "envd:", ho.Rollback(err))
		os.Exit(1)
	}
	if ho != nil {
		defer func() {
			if r := recover(); r != nil {
				if !ho.Committed() {
					fmt.Fprintln(os.Stderr, "envd:", ho.Rollback(fmt.Errorf("envd %s panicked: %v", daemon.Version, r)))
					os.Exit(2)
				}
				panic(r)
			}
		}()
	}
	if err := run(ho); err != nil {
		if ho != nil && !ho.Committed() {
			err = ho.Rollback(err)
		}
		fmt.Fprintln(os.Stderr, "envd:", err)
		os.Exit(1)
	}
}

func run(ho *handover.Pending) error {
	var cfg daemon.Config
	fs := flag.NewFlagSet("envd", flag.ContinueOnError)
	fs.StringVar(&cfg.Host, "host", "0.0.0.0", "address to listen on")
	fs.IntVar(&cfg.Port, "port", 49983, "port of the envd API (processes, files, HTTP API, and the code API too)")
	fs.IntVar(&cfg.CodePort, "code-port", 49999, "port of the code-interpreter API; 0 turns it off")
	fs.StringVar(&cfg.DefaultUser, "default-user", "", "user that requests run as when they name none (default: `user` if it exists, else envd's own account)")
	fs.StringVar(&cfg.AccessToken, "access-token", "", "the token every request but /health must carry in X-Access-Token; better: ENVD_ACCESS_TOKEN (default: none)")
	vsockPort := fs.Uint("vsock-port", 0, "also listen on this AF_VSOCK port (0: off)")
	fs.StringVar(&cfg.UnixSocket, "unix-socket", "", "also listen on this unix socket path")
	fs.BoolVar(&cfg.NoJupyter, "no-jupyter", false, "run without code execution")
	fs.StringVar(&cfg.JupyterURL, "jupyter-url", "", "use the Jupyter server at this URL instead of starting one")
	fs.StringVar(&cfg.JupyterToken, "jupyter-token", "", "token of the -jupyter-url server")
	fs.BoolVar(&cfg.JupyterAsRoot, "jupyter-as-root", false, "run Jupyter and its kernels as root in every mode (README, \"Flags\")")
	fs.BoolVar(&cfg.StrictUsers, "strict-users", false, "give each request exactly its user's rights, and run the kernels as the default user")
	fs.BoolVar(&cfg.ForwardPorts, "forward-ports", true, "forward the sandbox's external addresses to TCP servers listening only on loopback")
	fs.StringVar(&cfg.Cgroups, "cgroups", "auto", "cgroups of the processes envd starts: auto, v1, v2 or off")
	fs.StringVar(&cfg.CgroupFSRoot, "cgroup-root", cgroup.DefaultFSRoot, "where the cgroup filesystems are mounted (upstream's flag)")
	fs.StringVar(&cfg.CgroupTree, "cgroup-tree", "envd", "name of envd's cgroup tree (user, pty, jupyter) under envd's own cgroup in each hierarchy")
	noCgroups := fs.Bool("no-cgroups", false, "run without cgroups, as -cgroups off (upstream's flag)")
	isNotFC := fs.Bool("isnotfc", false, "not in a Firecracker guest (upstream's flag): no MMDS read, no logs shipped to the host, E2B_SANDBOX=false")
	verbose := fs.Bool("verbose", false, "write the log to stdout instead of stderr (upstream's flag)")
	fs.BoolVar(&cfg.ShipLogs, "ship-logs", true, "send each log record to the logs collector the MMDS names, as upstream does in a Firecracker guest")
	fs.DurationVar(&cfg.FSFreezeWatchdog, "fsfreeze-watchdog", 30*time.Second, "longest time POST /fsfreeze leaves the root filesystem frozen before envd thaws it itself")
	fs.BoolVar(&cfg.SyncClock, "sync-clock", false, "let POST /init set the machine's clock from its timestamp (off: the clock is never touched)")
	fs.StringVar(&cfg.RunDir, "run-dir", "/run/e2b", "where envd writes .E2B_SANDBOX, .E2B_SANDBOX_ID and .E2B_TEMPLATE_ID; '' writes none")
	fs.StringVar(&cfg.MMDSURL, "mmds-url", mmds.DefaultURL, "where the host's boot metadata (Firecracker's MMDS) is read; off: not read")
	warmKernels := fs.String("warm-kernels", interpreter.DefaultWarmKernels().String(), "prestarted kernels per language, as language=count items (python=1,r=1); '' for none")
	fs.BoolVar(&cfg.Zygote, "zygote", false, "fork Python kernels from a zygote with ipykernel and the data stack loaded (fast first imports; more memory)")
	fs.StringVar(&cfg.DebugAddr, "debug-addr", "", "serve Go's pprof profiles on this loopback IP:PORT, with no token (default: off)")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	version := fs.Bool("version", false, "print the version (semver: upstream's wire version, the commit as build metadata) and exit")
	commit := fs.Bool("commit", false, "print the commit envd was built from and exit")
	resume := fs.Bool("resume-handover", false, "accepted for upstream's command line; envd's own live upgrade passes its handover otherwise")
	check := fs.Bool(handover.CheckFlag, false, "check these flags, print the version and the handover schemas read, and exit")
	fs.Usage = func() { usage(fs) }
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil // -h printed the usage: not a failure
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: envd takes only flags (see envd -h)", fs.Arg(0))
	}
	onCmdline := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCmdline[f.Name] = true })
	if err := fromEnv(fs, onCmdline); err != nil {
		return err
	}
	// from names where a flag's value came from, for messages.
	from := func(name string) string {
		if !onCmdline[name] {
			if env := envName(name); os.Getenv(env) != "" {
				return env + "="
			}
		}
		return "-" + name + " "
	}
	if *version {
		fmt.Println(buildinfo.Version())
		return nil
	}
	if *commit {
		fmt.Println(buildinfo.Commit())
		return nil
	}
	if !filepath.IsAbs(cfg.CgroupFSRoot) {
		return fmt.Errorf("%s%q: want the absolute path where the cgroup filesystems are mounted (envd's own tree is named by -cgroup-tree)", from("cgroup-root"), cfg.CgroupFSRoot)
	}
	if *noCgroups {
		cfg.Cgroups = "off"
	}
	if *isNotFC {
		cfg.MMDSURL, cfg.ShipLogs, cfg.NotFirecracker = "off", false, true
	}
	if *vsockPort > math.MaxUint32 {
		return fmt.Errorf("%s%d: want at most %d", from("vsock-port"), *vsockPort, uint32(math.MaxUint32))
	}
	cfg.VsockPort = uint32(*vsockPort)
	warm, err := interpreter.ParseWarmKernels(*warmKernels)
	if err != nil {
		return fmt.Errorf("%s%q: %v", from("warm-kernels"), *warmKernels, err)
	}
	cfg.WarmKernels = warm
	if err := daemon.CheckDebugAddr(cfg.DebugAddr); err != nil {
		return fmt.Errorf("%s%q: %v", from("debug-addr"), cfg.DebugAddr, err)
	}
	if cfg.Port != 0 && cfg.Port == cfg.CodePort {
		return fmt.Errorf("%s%d and %s%d are the same port: give the code API another one, or -code-port 0 to serve it on -port alone",
			from("port"), cfg.Port, from("code-port"), cfg.CodePort)
	}

	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("%s%q: want debug, info, warn or error", from("log-level"), *logLevel)
	}
	hopts := &slog.HandlerOptions{Level: level, ReplaceAttr: readableDurations}
	logTo := os.Stderr
	if *verbose {
		logTo = os.Stdout
	}
	switch *logFormat {
	case "text":
		cfg.Logger = slog.New(slog.NewTextHandler(logTo, hopts))
	case "json":
		cfg.Logger = slog.New(slog.NewJSONHandler(logTo, hopts))
	default:
		return fmt.Errorf("%s%q: want text or json", from("log-format"), *logFormat)
	}
	// Whatever logs through slog's default (or the log package) is in
	// the same format, at the same level.
	slog.SetDefault(cfg.Logger)
	if *check {
		fmt.Println(handover.CheckLine(daemon.Version))
		return nil
	}
	cfg.Handover = ho
	if *resume && ho == nil {
		cfg.Logger.Warn("-resume-handover: no handover from an envd of ours is pending (upstream's handover record is not read); starting afresh")
	}
	if onCmdline["access-token"] && cfg.AccessToken != "" {
		cfg.Logger.Warn("the access token is on envd's command line, which every user of the machine can read in /proc; set ENVD_ACCESS_TOKEN instead of -access-token")
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	process.LeaveSignalsDefault()
	return daemon.Run(ctx, cfg)
}

// envName is the variable that sets a flag: ENVD_<NAME>, dashes as
// underscores.
func envName(flagName string) string {
	return "ENVD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// fromEnv sets each flag but those given on the command line (skip) from
// its variable (envName) when that is set.
func fromEnv(fs *flag.FlagSet, skip map[string]bool) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if skip[f.Name] {
			return
		}
		name := envName(f.Name)
		if v, ok := os.LookupEnv(name); ok && err == nil {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %s", name, v, want(f))
			}
		}
	})
	return err
}

// want says what values a flag takes, for an error about a variable.
func want(f *flag.Flag) string {
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return "want true or false (or 1 or 0)"
	}
	switch f.Value.(flag.Getter).Get().(type) {
	case int, uint, int64, uint64:
		return "want a whole number"
	}
	return "invalid value"
}

// usage is -h: the flags, and where else they can come from.
func usage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprintf(w, "Usage: envd [flags]\n\n")
	fmt.Fprintf(w, "envd serves processes, files and code execution inside a sandbox.\n\n")
	fmt.Fprintf(w, "Every flag can also be set by an environment variable: -default-user by\n")
	fmt.Fprintf(w, "ENVD_DEFAULT_USER, -no-jupyter by ENVD_NO_JUPYTER=true, and so on (dashes\n")
	fmt.Fprintf(w, "as underscores); a flag on the command line wins. Pass the access token as\n")
	fmt.Fprintf(w, "ENVD_ACCESS_TOKEN: every user of the machine can read a command line.\n\nFlags:\n")
	fs.PrintDefaults()
}

// readableDurations rounds every duration logged to three significant
// digits ("1.23s", "45.7ms", "812µs"), as a person reads them, not
// "1.234567891s".
func readableDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.DurationValue(roundDuration(a.Value.Duration()))
	}
	return a
}

// roundDuration keeps three significant digits of d.
func roundDuration(d time.Duration) time.Duration {
	unit := time.Duration(1)
	for m := d.Abs(); m >= 1000; m /= 10 {
		unit *= 10
	}
	return d.Round(unit)
}
