package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path"
	"strings"

	"github.com/envd-dev/envd/client"
)

type rmOpts struct{ recursive, force bool }

var rmCommand = &command{
	name:         "rm",
	args:         "[-r] [-f] PATH...",
	summary:      "remove files of the sandbox (-r: directories too, with what they hold); a symlink itself, never what it points to",
	interspersed: true,
	flags: func(fs *flag.FlagSet) any {
		o := &rmOpts{}
		fs.BoolVar(&o.recursive, "r", false, "remove directories and everything under them")
		fs.BoolVar(&o.recursive, "R", false, "the same as -r")
		fs.BoolVar(&o.force, "f", false, "ignore paths that do not exist")
		return o
	},
	run: func(ctx context.Context, e *env, opts any, args []string) error {
		o := opts.(*rmOpts)
		if len(args) == 0 {
			return usageError{"rm: no PATH given (usage: envctl rm [-r] [-f] PATH...)"}
		}
		for _, p := range args {
			// envd removes a missing path without a word, and a directory
			// with everything in it: envctl looks first, as rm(1) would.
			fi, err := e.c.Stat(ctx, p)
			if err != nil {
				if o.force && errors.Is(err, client.ErrNotFound) {
					continue
				}
				return renamed(err, "remove "+p)
			}
			if fi.Type == client.TypeDir && !isLink(fi) && !o.recursive {
				return fmt.Errorf("rm: cannot remove '%s': is a directory (-r removes it and everything under it)", p)
			}
			if err := e.c.Remove(ctx, p); err != nil {
				return err
			}
		}
		return nil
	},
}

// renamed is err with another Op, when it is envd's answer: the failure of
// a step (a stat) told as the failure of what the command does.
func renamed(err error, op string) error {
	if ce, ok := errors.AsType[*client.Error](err); ok {
		named := *ce
		named.Op = op
		return &named
	}
	return err
}

var mkdirCommand = &command{
	name:    "mkdir",
	args:    "PATH...",
	summary: "make directories in the sandbox, with their missing parents (a directory that exists already is said so on stderr)",
	run: func(ctx context.Context, e *env, _ any, args []string) error {
		if len(args) == 0 {
			return usageError{"mkdir: no PATH given (usage: envctl mkdir PATH...)"}
		}
		for _, p := range args {
			_, err := e.c.MakeDir(ctx, p)
			switch {
			case errors.Is(err, client.ErrAlreadyExists):
				fmt.Fprintf(e.stderr, "envctl: mkdir: %s exists already\n", p)
			case err != nil:
				return err
			}
		}
		return nil
	},
}

var mvCommand = &command{
	name:    "mv",
	args:    "SRC DST",
	summary: "move or rename a file or directory in the sandbox: into DST when DST is a directory (or ends in /), else to DST, replacing a file there; DST's missing parents are made",
	run: func(ctx context.Context, e *env, _ any, args []string) error {
		if len(args) != 2 {
			return usageError{"mv: give SRC and DST, both in the sandbox (usage: envctl mv SRC DST)"}
		}
		src, dst := args[0], args[1]
		if strings.HasPrefix(src, remotePrefix) || strings.HasPrefix(dst, remotePrefix) {
			return usageError{"mv: both paths are in the sandbox: write them without envd: (cp copies across)"}
		}
		if strings.TrimRight(src, "/") == "" {
			return usageError{"mv: SRC is /"}
		}
		// As mv(1): a directory as destination gets SRC inside it.
		if strings.HasSuffix(dst, "/") {
			dst = path.Join(dst, path.Base(strings.TrimRight(src, "/")))
		} else if fi, err := e.c.Stat(ctx, dst); err == nil && fi.Type == client.TypeDir {
			dst = path.Join(dst, path.Base(strings.TrimRight(src, "/")))
		}
		_, err := e.c.Move(ctx, src, dst)
		return err
	},
}
