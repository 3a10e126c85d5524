package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/envd-dev/envd/client"
)

type portsOpts struct {
	watch, json, forwarded, all bool
	ports, family               string
	pid                         int
}

const portsUsage = "[--watch] [--json] [--all] [--port PORTS] [--pid PID] [--family ipv4|ipv6] [--forwarded]"

var portsCommand = &command{
	noFiles:      true,
	name:         "ports",
	args:         portsUsage,
	summary:      "list the sandbox's TCP listeners and where envd forwards them from (--watch: then their changes, until interrupted); envd's, its Jupyter server's and the kernels' private ones only with --all",
	interspersed: true,
	flags: func(fs *flag.FlagSet) any {
		o := &portsOpts{}
		fs.BoolVar(&o.watch, "watch", false, "after the list, print each change (opened, closed, updated) until interrupted")
		fs.BoolVar(&o.json, "json", false, "print JSON (snake_case names): the list as one array; with --watch, one object a line")
		fs.StringVar(&o.ports, "port", "", "only these `PORTS` (comma-separated)")
		fs.IntVar(&o.pid, "pid", 0, "only the listeners of the process `PID`")
		fs.StringVar(&o.family, "family", "", "only this `FAMILY`: ipv4 or ipv6")
		fs.BoolVar(&o.forwarded, "forwarded", false, "only the listeners envd forwards to")
		fs.BoolVar(&o.all, "all", false, "also the private listeners (never forwarded), marked whose: envd (envd's own), jupyter (its Jupyter server's), kernel (a kernel's line to that server)")
		return o
	},
	run: runPorts,
}

func runPorts(ctx context.Context, e *env, opts any, args []string) error {
	o := opts.(*portsOpts)
	if len(args) > 0 {
		return usageError{fmt.Sprintf("ports: unexpected argument %q (usage: envctl ports %s)", args[0], portsUsage)}
	}
	f := client.PortFilter{PID: o.pid, Family: o.family, ForwardedOnly: o.forwarded}
	if o.family != "" && o.family != "ipv4" && o.family != "ipv6" {
		return usageError{fmt.Sprintf("ports: --family %q: give ipv4 or ipv6", o.family)}
	}
	if o.pid < 0 {
		return usageError{fmt.Sprintf("ports: --pid %d: give a process id", o.pid)}
	}
	if o.ports != "" {
		for s := range strings.SplitSeq(o.ports, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 1 || n > 65535 {
				return usageError{fmt.Sprintf("ports: --port %q: %q is not a port (1-65535)", o.ports, s)}
			}
			f.Ports = append(f.Ports, n)
		}
	}
	if !o.watch {
		ps, err := e.c.ListPorts(ctx, f)
		if err != nil {
			return err
		}
		if !o.all {
			ps = slices.DeleteFunc(ps, isPrivate)
		}
		if o.json {
			out := make([]portJSON, len(ps))
			for i, p := range ps {
				out[i] = toPortJSON(p)
			}
			return printJSON(e.stdout, out)
		}
		return printPorts(e.stdout, ps, o.all)
	}
	w, err := e.c.WatchPorts(ctx, f)
	if err != nil {
		return err
	}
	defer w.Close()
	shown := watchShown{}
	if !o.all {
		w.Snapshot = slices.DeleteFunc(w.Snapshot, isPrivate)
		shown.snapshot(w.Snapshot)
	}
	if o.json {
		snap := make([]portJSON, len(w.Snapshot))
		for i, p := range w.Snapshot {
			snap[i] = toPortJSON(p)
		}
		if err := printJSON(e.stdout, portEventJSON{Event: "snapshot", Ports: snap}); err != nil {
			return nil
		}
	} else if err := printPorts(e.stdout, w.Snapshot, o.all); err != nil {
		return nil
	}
	for ch, err := range w.Changes() {
		if err != nil {
			return err
		}
		if !o.all && !shown.pass(&ch) {
			continue
		}
		var werr error
		if o.json {
			p := toPortJSON(ch.Port)
			werr = printJSON(e.stdout, portEventJSON{Event: ch.Kind, Port: &p})
		} else {
			_, werr = fmt.Fprintf(e.stdout, "%-7s %s\n", ch.Kind, describePort(ch.Port))
		}
		if werr != nil {
			return nil // stdout closed: nobody is reading any more
		}
	}
	// The iteration ends without error once ctx is cancelled (Ctrl-C).
	if ctx.Err() == nil {
		return errors.New("ports --watch: the watch ended")
	}
	return nil
}

// watchShown is what a watch without --all has shown: the listeners that
// are not private. A listener that was shown and becomes private (its
// owner changed) is shown once more, so that its last line is not stale;
// one that was private and no longer is shows as opened.
type watchShown map[portKey]bool

// portKey tells a listener apart from the others in a watch.
type portKey struct {
	address string
	port    int
	pid     int
}

func keyOf(p client.Port) portKey { return portKey{p.Address, p.Port, p.PID} }

func (s watchShown) snapshot(ps []client.Port) {
	for _, p := range ps {
		s[keyOf(p)] = true
	}
}

// pass says whether ch is shown, and makes its kind what the watch's
// reader expects.
func (s watchShown) pass(ch *client.PortChange) bool {
	k := keyOf(ch.Port)
	switch {
	case isPrivate(ch.Port) && !s[k]:
		return false
	case !s[k] && ch.Kind == "updated":
		ch.Kind = "opened"
	}
	if ch.Kind == "closed" || isPrivate(ch.Port) {
		delete(s, k)
	} else {
		s[k] = true
	}
	return true
}

// whose says whose a private listener is ("" for the workload's): an envd
// that predates Private says only that it is envd's.
func whose(p client.Port) string {
	if p.Private == "" && p.Envd {
		return "envd"
	}
	return p.Private
}

func isPrivate(p client.Port) bool { return whose(p) != "" }

// printPorts prints ps as a table; with all, a column says whose the
// private ones are.
func printPorts(w io.Writer, ps []client.Port, all bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if all {
		fmt.Fprintln(tw, "PORT\tADDRESS\tPID\tPROCESS\tPRIVATE\tFORWARDED FROM")
	} else {
		fmt.Fprintln(tw, "PORT\tADDRESS\tPID\tPROCESS\tFORWARDED FROM")
	}
	for _, p := range ps {
		if all {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", p.Port, p.Address, pidString(p.PID), p.Process, cmp.Or(whose(p), "-"), forwardNote(p))
		} else {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", p.Port, p.Address, pidString(p.PID), p.Process, forwardNote(p))
		}
	}
	return tw.Flush()
}

func pidString(pid int) string {
	if pid == 0 {
		return "-"
	}
	return strconv.Itoa(pid)
}

// forwardNote says where p is reached from, beyond its own address.
func forwardNote(p client.Port) string {
	var out []string
	out = append(out, p.ForwardedFrom...)
	for _, f := range p.ForwardFailures {
		out = append(out, f.From+" (failed: "+f.Message+")")
	}
	switch {
	case len(out) > 0:
		return strings.Join(out, ", ")
	case isPrivate(p):
		return "- (private)"
	case p.Loopback:
		return "- (loopback only)"
	}
	return "-"
}

// describePort is one line about p, for --watch.
func describePort(p client.Port) string {
	s := fmt.Sprintf("%s port %d", p.Address, p.Port)
	if p.PID != 0 {
		s += fmt.Sprintf(" pid %d (%s)", p.PID, p.Process)
	}
	switch {
	case p.Forwarded || len(p.ForwardFailures) > 0:
		s += " forwarded from " + forwardNote(p)
	case isPrivate(p):
		s += " (private: " + whose(p) + ")"
	case p.Loopback:
		s += " (loopback only)"
	}
	return s
}

// What ports --json prints.
type portJSON struct {
	Port            int               `json:"port"`
	Address         string            `json:"address"`
	Family          string            `json:"family"`
	PID             int               `json:"pid"`
	Process         string            `json:"process"`
	Loopback        bool              `json:"loopback"`
	Envd            bool              `json:"envd"`    // private (never forwarded)
	Private         string            `json:"private"` // whose: envd, jupyter, kernel; "": the workload's
	Forwarded       bool              `json:"forwarded"`
	ForwardedFrom   []string          `json:"forwarded_from"`
	ForwardFailures []portFailureJSON `json:"forward_failures,omitempty"`
}

type portFailureJSON struct {
	From    string `json:"from"`
	Message string `json:"message"`
}

// portEventJSON is one line of ports --watch --json.
type portEventJSON struct {
	Event string     `json:"event"` // snapshot, opened, closed, updated
	Ports []portJSON `json:"ports,omitempty"`
	Port  *portJSON  `json:"port,omitempty"`
}

func toPortJSON(p client.Port) portJSON {
	out := portJSON{
		Port: p.Port, Address: p.Address, Family: p.Family, PID: p.PID, Process: p.Process,
		Loopback: p.Loopback, Envd: isPrivate(p), Private: whose(p), Forwarded: p.Forwarded, ForwardedFrom: p.ForwardedFrom,
	}
	if out.ForwardedFrom == nil {
		out.ForwardedFrom = []string{}
	}
	for _, f := range p.ForwardFailures {
		out.ForwardFailures = append(out.ForwardFailures, portFailureJSON{From: f.From, Message: f.Message})
	}
	return out
}
