package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/envd-dev/envd/client"
)

// jsonOpts is the --json flag of the commands that have one.
type jsonOpts struct{ json bool }

func jsonFlag(fs *flag.FlagSet) any {
	o := &jsonOpts{}
	fs.BoolVar(&o.json, "json", false, "print JSON (snake_case names)")
	return o
}

var psCommand = &command{
	noFiles:      true,
	name:         "ps",
	args:         "[--json]",
	summary:      "list the processes envd runs",
	interspersed: true,
	flags:        jsonFlag,
	run: func(ctx context.Context, e *env, opts any, args []string) error {
		if len(args) > 0 {
			return usageError{fmt.Sprintf("ps: unexpected argument %q (usage: envctl ps [--json])", args[0])}
		}
		ps, err := e.c.ListProcesses(ctx)
		if err != nil {
			return err
		}
		slices.SortFunc(ps, func(a, b client.ProcessInfo) int { return int(a.PID) - int(b.PID) })
		if opts.(*jsonOpts).json {
			out := make([]processJSON, len(ps))
			for i, p := range ps {
				out[i] = toProcessJSON(p)
			}
			return printJSON(e.stdout, out)
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PID\tTAG\tCOMMAND")
		for _, p := range ps {
			fmt.Fprintf(tw, "%d\t%s\t%s\n", p.PID, p.Tag, shellJoin(append([]string{p.Name}, p.Args...)))
		}
		return tw.Flush()
	},
}

// shellJoin quotes words that need it, for display.
func shellJoin(words []string) string {
	out := make([]string, len(words))
	for i, w := range words {
		if w == "" || strings.ContainsAny(w, " \t\n'\"\\$`|&;<>()*?[]{}~#!") {
			w = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
		}
		out[i] = w
	}
	return strings.Join(out, " ")
}

type killOpts struct{ signal string }

var killCommand = &command{
	noFiles:      true,
	name:         "kill",
	args:         "PID [--signal SIGNAL]",
	summary:      "send a signal to a process (default SIGTERM; HUP, INT, QUIT, KILL, USR1, USR2, ALRM, TERM, CONT, STOP, TSTP, WINCH)",
	interspersed: true,
	flags: func(fs *flag.FlagSet) any {
		o := &killOpts{}
		fs.StringVar(&o.signal, "signal", "TERM", "the `SIGNAL`: a name (TERM, KILL, HUP, INT, USR1...; with or without SIG) or its number")
		return o
	},
	run: func(ctx context.Context, e *env, opts any, args []string) error {
		o := opts.(*killOpts)
		if len(args) != 1 {
			return usageError{"kill: give exactly one PID (usage: envctl kill PID [--signal SIGNAL])"}
		}
		pid, err := strconv.ParseUint(args[0], 10, 32)
		if err != nil || pid == 0 {
			return usageError{fmt.Sprintf("kill: %q is not a process id", args[0])}
		}
		sig, err := parseSignal(o.signal)
		if err != nil {
			return err
		}
		return e.c.Signal(ctx, client.Selector{PID: uint32(pid)}, sig)
	},
}

// parseSignal reads TERM, SIGTERM, 15 and the like. envd itself decides
// which signals it delivers.
func parseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	name := strings.TrimPrefix(strings.ToUpper(s), "SIG")
	if sig, ok := signalNames[name]; ok {
		return sig, nil
	}
	return 0, usageError{fmt.Sprintf("kill: unknown signal %q: use one of HUP, INT, QUIT, KILL, USR1, USR2, ALRM, TERM, CONT, STOP, TSTP, WINCH", s)}
}

// signalNames are the signals envd delivers (its Signal enum).
var signalNames = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
	"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "ALRM": syscall.SIGALRM, "TERM": syscall.SIGTERM,
	"CONT": syscall.SIGCONT, "STOP": syscall.SIGSTOP, "TSTP": syscall.SIGTSTP, "WINCH": syscall.SIGWINCH,
}

var healthCommand = &command{
	noFiles:      true,
	name:         "health",
	args:         "[--json]",
	summary:      "check that envd answers, and that it takes the access token (exit 3 when it refuses it)",
	interspersed: true,
	flags:        jsonFlag,
	run: func(ctx context.Context, e *env, opts any, args []string) error {
		if len(args) > 0 {
			return usageError{fmt.Sprintf("health: unexpected argument %q (usage: envctl health [--json])", args[0])}
		}
		start := time.Now()
		if err := e.c.Health(ctx); err != nil {
			return err
		}
		latency := time.Since(start)
		// /health answers anyone: one cheap call that needs the token
		// tells whether envd takes it.
		token, refusal := "accepted", error(nil)
		if !e.token {
			token = "none"
		}
		if _, err := e.c.Envs(ctx); err != nil {
			if exitCode(err) != exitRefused {
				return err
			}
			token, refusal = "refused", err
		}
		if opts.(*jsonOpts).json {
			out := healthJSON{OK: true, Target: e.c.Target(), LatencyMS: float64(latency.Microseconds()) / 1000, Token: token}
			if refusal != nil {
				out.TokenError = refusalText(refusal)
			}
			if err := printJSON(e.stdout, out); err != nil {
				return err
			}
		} else if refusal == nil {
			what := "token accepted"
			if !e.token {
				what = "no token needed"
			}
			fmt.Fprintf(e.stdout, "ok: envd at %s answered in %v; %s\n", e.c.Target(), latency.Round(time.Microsecond), what)
		}
		if refusal != nil {
			return exitError{code: exitRefused, msg: tokenRefused(e, refusal)}
		}
		return nil
	},
}

// refusalText is envd's reason for refusing a call.
func refusalText(err error) string {
	if ce, ok := errors.AsType[*client.Error](err); ok && ce.Message != "" {
		return ce.Message
	}
	return err.Error()
}

// tokenRefused says that envd answers but refuses the token (or its lack),
// with envd's reason.
func tokenRefused(e *env, err error) string {
	if !e.token {
		return fmt.Sprintf("envd at %s answers but wants an access token (--token or ENVCTL_TOKEN): %s", e.c.Target(), refusalText(err))
	}
	return fmt.Sprintf("envd at %s answers but refuses the token: %s", e.c.Target(), refusalText(err))
}

type metricsOpts struct{ json bool }

var metricsCommand = &command{
	noFiles:      true,
	name:         "metrics",
	args:         "[--json]",
	summary:      "show the sandbox's CPU, memory and disk use",
	interspersed: true,
	flags: func(fs *flag.FlagSet) any {
		o := &metricsOpts{}
		fs.BoolVar(&o.json, "json", false, "print JSON")
		return o
	},
	run: func(ctx context.Context, e *env, opts any, args []string) error {
		if len(args) > 0 {
			return usageError{fmt.Sprintf("metrics: unexpected argument %q (usage: envctl metrics [--json])", args[0])}
		}
		m, err := e.c.Metrics(ctx)
		if err != nil {
			return err
		}
		if opts.(*metricsOpts).json {
			return printJSON(e.stdout, toMetricsJSON(m))
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "cpu\t%d cores, %.2f%% used\n", m.CPUCount, m.CPUUsedPercent)
		fmt.Fprintf(tw, "memory\t%s used of %s (%s cache)\n", bytesText(m.MemUsed), bytesText(m.MemTotal), bytesText(m.MemCache))
		fmt.Fprintf(tw, "disk\t%s used of %s\n", bytesText(m.DiskUsed), bytesText(m.DiskTotal))
		fmt.Fprintf(tw, "time\t%s\n", m.Time.UTC().Format(time.RFC3339))
		return tw.Flush()
	},
}

var envsCommand = &command{
	noFiles: true,
	name:    "envs",
	args:    "",
	summary: "show the environment variables envd gives every process",
	run: func(ctx context.Context, e *env, _ any, args []string) error {
		if len(args) > 0 {
			return usageError{fmt.Sprintf("envs: unexpected argument %q (usage: envctl envs)", args[0])}
		}
		m, err := e.c.Envs(ctx)
		if err != nil {
			return err
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			fmt.Fprintf(e.stdout, "%s=%s\n", k, m[k])
		}
		return nil
	},
}

// bytesText prints a size in binary units.
func bytesText(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
