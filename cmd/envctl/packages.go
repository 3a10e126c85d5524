package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/envd-dev/envd/client"
)

type pkgOpts struct {
	manager string
	dir     string
	json    bool
	source  string
	upgrade bool
	purge   bool
}

const pkgUsage = "ls|add|rm [--manager pip|npm|r|apt] [--dir DIR] [ls: --json] [add: --source PATH --upgrade] [rm: --purge] [NAME[==VERSION]...]"

var pkgCommand = &command{
	words:        []string{"ls", "add", "rm"},
	name:         "pkg",
	args:         pkgUsage,
	summary:      "list (ls), install (add) and remove (rm) packages with pip, npm, r or apt, streaming the installer's output",
	interspersed: true,
	flags: func(fs *flag.FlagSet) any {
		o := &pkgOpts{}
		fs.StringVar(&o.manager, "manager", "pip", "the package `MANAGER`: pip (the kernels' Python environment), npm (a project Deno imports npm: packages from), r, or apt (Debian, as root)")
		fs.StringVar(&o.dir, "dir", "", "npm's project `DIR`ectory, absolute (default: the default user's home)")
		fs.BoolVar(&o.json, "json", false, "ls: print JSON (snake_case names)")
		fs.StringVar(&o.source, "source", "", "add: install from this local `PATH` in the sandbox: a file (wheel, sdist, R .tar.gz, npm .tgz, .deb), or for pip a directory of wheels (--no-index --find-links)")
		fs.BoolVar(&o.upgrade, "upgrade", false, "add: upgrade packages that are installed already")
		fs.BoolVar(&o.purge, "purge", false, "rm: also remove a Debian package's configuration files (apt)")
		return o
	},
	run: runPkg,
}

func runPkg(ctx context.Context, e *env, opts any, args []string) error {
	o := opts.(*pkgOpts)
	if len(args) == 0 {
		return usageError{"pkg: give ls, add or rm (usage: envctl pkg " + pkgUsage + ")"}
	}
	m := client.PackageManager(o.manager)
	if !slices.Contains(client.PackageManagers, m) {
		return usageError{fmt.Sprintf("pkg: --manager %q: give pip, npm, r or apt", o.manager)}
	}
	sub, names := args[0], args[1:]
	only := func(flagName string, set bool, subs ...string) error {
		if set && !slices.Contains(subs, sub) {
			return usageError{fmt.Sprintf("pkg %s: --%s is for pkg %s", sub, flagName, strings.Join(subs, ", pkg "))}
		}
		return nil
	}
	for _, err := range []error{only("json", o.json, "ls"), only("source", o.source != "", "add"), only("upgrade", o.upgrade, "add"), only("purge", o.purge, "rm")} {
		if err != nil {
			return err
		}
	}
	switch sub {
	case "ls", "list":
		if len(names) > 0 {
			return usageError{fmt.Sprintf("pkg ls: unexpected argument %q (usage: envctl pkg ls [--manager M] [--dir DIR] [--json])", names[0])}
		}
		return pkgList(ctx, e, m, o)
	case "add", "install":
		if len(names) == 0 && o.source == "" {
			return usageError{"pkg add: name at least one package, or give --source (usage: envctl pkg add [--manager M] NAME[==VERSION]... [--source PATH] [--upgrade])"}
		}
		specs := make([]client.PackageSpec, len(names))
		for i, n := range names {
			specs[i] = parseSpec(m, n)
		}
		op, err := e.c.InstallPackages(ctx, m, specs, client.InstallOptions{Upgrade: o.upgrade, Source: o.source, Dir: o.dir})
		if err != nil {
			return err
		}
		return followPkg(e, op)
	case "rm", "remove":
		if len(names) == 0 {
			return usageError{"pkg rm: name at least one package (usage: envctl pkg rm [--manager M] NAME... [--purge])"}
		}
		op, err := e.c.RemovePackages(ctx, m, names, client.RemoveOptions{Purge: o.purge, Dir: o.dir})
		if err != nil {
			return err
		}
		return followPkg(e, op)
	}
	return usageError{fmt.Sprintf("pkg: unknown subcommand %q: give ls, add or rm", sub)}
}

// parseSpec splits NAME==VERSION, or the manager's own spelling: npm's
// NAME@VERSION (@scope/name@1.2), apt's NAME=VERSION.
func parseSpec(m client.PackageManager, s string) client.PackageSpec {
	if name, version, ok := strings.Cut(s, "=="); ok {
		return client.PackageSpec{Name: name, Version: version}
	}
	switch m {
	case client.ManagerNpm:
		if i := strings.LastIndexByte(s, '@'); i > 0 {
			return client.PackageSpec{Name: s[:i], Version: s[i+1:]}
		}
	case client.ManagerApt:
		if name, version, ok := strings.Cut(s, "="); ok {
			return client.PackageSpec{Name: name, Version: version}
		}
	}
	return client.PackageSpec{Name: s}
}

// packageJSON is what pkg ls --json prints for each package.
type packageJSON struct {
	Name     string `json:"name"`
	Version  string `json:"version"`
	Location string `json:"location,omitempty"`
	System   bool   `json:"system"`
	Shadowed bool   `json:"shadowed"`
}

func pkgList(ctx context.Context, e *env, m client.PackageManager, o *pkgOpts) error {
	l, err := e.c.ListPackages(ctx, m, client.PackageOptions{Dir: o.dir})
	if err != nil {
		return err
	}
	if o.json {
		out := make([]packageJSON, len(l.Packages))
		for i, p := range l.Packages {
			out[i] = packageJSON{Name: p.Name, Version: p.Version, Location: p.Location, System: p.System, Shadowed: p.Shadowed}
		}
		return printJSON(e.stdout, out)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if m == client.ManagerApt {
		fmt.Fprintln(tw, "NAME\tVERSION")
		for _, p := range l.Packages {
			fmt.Fprintf(tw, "%s\t%s\n", p.Name, p.Version)
		}
		return tw.Flush()
	}
	fmt.Fprintln(tw, "NAME\tVERSION\tLOCATION\tNOTE")
	for _, p := range l.Packages {
		var note []string
		if p.System {
			note = append(note, "system")
		}
		if p.Shadowed {
			note = append(note, "shadowed")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Name, p.Version, p.Location, strings.Join(note, ","))
	}
	return tw.Flush()
}

// followPkg streams an operation's output (each command it runs, as
// "+ command" on stderr), then prints what changed on stdout. A failed
// operation exits 1 with its error (the installer's exit status and last
// lines); envctl's own failures, and refusals of the request, exit 125.
func followPkg(e *env, op *client.PackageOp) error {
	for ev, err := range op.Events() {
		if err != nil {
			if errors.Is(err, client.ErrFailedPrecondition) || errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrDeadlineExceeded) {
				return exitError{code: 1, msg: err.Error()}
			}
			return err
		}
		switch {
		case ev.Command != nil:
			fmt.Fprintf(e.stderr, "+ %s\n", shellJoin(ev.Command.Args))
		case ev.Stdout != nil:
			e.stdout.Write(ev.Stdout)
		case ev.Stderr != nil:
			e.stderr.Write(ev.Stderr)
		case ev.Lost > 0:
			fmt.Fprintf(e.stderr, "envctl: %d bytes of the installer's output were lost (read too slowly)\n", ev.Lost)
		}
	}
	res, err := op.Wait()
	if err != nil {
		return err
	}
	printChanges(e.stdout, res)
	return nil
}

func printChanges(w io.Writer, res *client.PackageResult) {
	if len(res.Changes) == 0 {
		fmt.Fprintln(w, "no package changed")
	}
	for _, c := range res.Changes {
		switch {
		case c.Old == "":
			fmt.Fprintf(w, "installed %s %s\n", c.Name, c.New)
		case c.New == "":
			fmt.Fprintf(w, "removed %s %s\n", c.Name, c.Old)
		default:
			fmt.Fprintf(w, "changed %s %s -> %s\n", c.Name, c.Old, c.New)
		}
	}
	for _, s := range res.Stale {
		fmt.Fprintf(w, "context %s: %s\n", s.ContextID, s.Message)
	}
}
