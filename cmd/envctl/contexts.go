package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/envd-dev/envd/client"
)

const contextsUsage = "[ls] [--json] | restart ID... | rm ID..."

var contextsCommand = &command{
	words:        []string{"ls", "restart", "rm"},
	noFiles:      true,
	name:         "contexts",
	aliases:      []string{"ctx"},
	args:         contextsUsage,
	summary:      "list the code contexts (ls, the default), restart them (a fresh kernel: their state is lost) or remove them",
	interspersed: true,
	flags:        jsonFlag,
	run:          runContexts,
}

func runContexts(ctx context.Context, e *env, opts any, args []string) error {
	o := opts.(*jsonOpts)
	sub, ids := "ls", args
	if len(args) > 0 {
		sub, ids = args[0], args[1:]
	}
	if o.json && sub != "ls" && sub != "list" {
		return usageError{fmt.Sprintf("contexts %s: --json is for contexts ls", sub)}
	}
	switch sub {
	case "ls", "list":
		if len(ids) > 0 {
			return usageError{fmt.Sprintf("contexts ls: unexpected argument %q (usage: envctl contexts [ls] [--json])", ids[0])}
		}
		return listContexts(ctx, e, o.json)
	case "restart":
		if len(ids) == 0 {
			return usageError{"contexts restart: give the ID of a context (usage: envctl contexts restart ID...; envctl contexts lists them)"}
		}
		for _, id := range ids {
			if _, err := e.c.RestartContext(ctx, id); err != nil {
				return err
			}
		}
		return nil
	case "rm", "remove":
		if len(ids) == 0 {
			return usageError{"contexts rm: give the ID of a context (usage: envctl contexts rm ID...; envctl contexts lists them)"}
		}
		for _, id := range ids {
			if err := e.c.RemoveContext(ctx, id); err != nil {
				return err
			}
		}
		return nil
	}
	return usageError{fmt.Sprintf("contexts: unknown subcommand %q: give ls, restart or rm (usage: envctl contexts %s)", sub, contextsUsage)}
}

func listContexts(ctx context.Context, e *env, asJSON bool) error {
	cs, err := e.c.ListContexts(ctx)
	if err != nil {
		return err
	}
	slices.SortFunc(cs, func(a, b client.CodeContext) int {
		if c := strings.Compare(a.Language, b.Language); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if asJSON {
		out := make([]contextJSON, len(cs))
		for i, c := range cs {
			out[i] = contextJSON{ID: c.ID, Language: c.Language, Cwd: c.Dir}
		}
		return printJSON(e.stdout, out)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLANGUAGE\tCWD")
	for _, c := range cs {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.ID, c.Language, c.Dir)
	}
	return tw.Flush()
}
