package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"

	"golang.org/x/term"

	"github.com/envd-dev/envd/client"
)

type execOpts struct {
	lang    string
	context string
}

var execCodeCommand = &command{
	name:         "exec-code",
	args:         "[--lang L] [--context ID] [FILE|-]",
	summary:      "run code in a stateful context: a file, stdin, or an interactive prompt",
	interspersed: true,
	flags: func(fs *flag.FlagSet) any {
		o := &execOpts{}
		fs.StringVar(&o.lang, "lang", "", "`LANGUAGE`: python (default), javascript, typescript, r, bash, or another of envctl languages")
		fs.StringVar(&o.context, "context", "", "run on the context with this `ID` (default: the language's default context)")
		return o
	},
	run: runExecCode,
}

var languagesCommand = &command{
	name:    "languages",
	args:    "",
	summary: "list the languages exec-code can run (one per installed Jupyter kernel)",
	run: func(ctx context.Context, e *env, _ any, args []string) error {
		if len(args) > 0 {
			return usageError{fmt.Sprintf("languages: unexpected argument %q (usage: envctl languages)", args[0])}
		}
		langs, err := e.c.Languages(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "LANGUAGE\tKERNEL\tALIASES\tDEFAULT CONTEXT\tDISPLAY NAME")
		for _, l := range langs {
			def := "-"
			switch {
			case l.DefaultContextID != "" && l.DefaultContextRunning:
				def = l.DefaultContextID + " (running)"
			case l.DefaultContextID != "":
				def = l.DefaultContextID + " (starts on first use)"
			}
			aliases := strings.Join(l.Aliases, ",")
			if aliases == "" {
				aliases = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", l.Name, l.KernelName, aliases, def, l.DisplayName)
		}
		return tw.Flush()
	},
}

func runExecCode(ctx context.Context, e *env, opts any, args []string) error {
	o := opts.(*execOpts)
	if o.lang != "" && o.context != "" {
		return usageError{"exec-code: give --lang or --context, not both (a context has its language)"}
	}
	if len(args) > 1 {
		return usageError{"exec-code: give at most one FILE (usage: envctl exec-code [--lang L] [--context ID] [FILE|-])"}
	}
	x := &executor{e: e, opts: client.ExecOptions{ContextID: o.context, Language: o.lang}}
	if len(args) == 1 && args[0] != "-" {
		b, err := os.ReadFile(args[0])
		if err != nil {
			return fmt.Errorf("exec-code: %w", err)
		}
		return x.runOnce(ctx, string(b))
	}
	if f, ok := e.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return x.prompt(ctx)
	}
	b, err := io.ReadAll(e.stdin)
	if err != nil {
		return fmt.Errorf("exec-code: read stdin: %w", err)
	}
	return x.runOnce(ctx, string(b))
}

// executor runs code and prints what it produces.
type executor struct {
	e    *env
	opts client.ExecOptions
}

func (x *executor) runOnce(ctx context.Context, code string) error {
	res, err := x.exec(ctx, code)
	if err != nil {
		return err
	}
	return outcome(res)
}

// outcome is the error of an execution that did not end well.
func outcome(res *client.ExecResult) error {
	switch res.Reason {
	case client.EndOK:
		return nil
	case client.EndError:
		return exitError{code: 1} // the traceback is on stderr
	}
	return fmt.Errorf("execution %s", res)
}

// exec runs code on the executor's context, printing output as it comes:
// stdout and results on stdout, stderr and tracebacks on stderr. Ctrl-C
// interrupts the code.
func (x *executor) exec(ctx context.Context, code string) (*client.ExecResult, error) {
	opts := x.opts
	opts.OnStdout = func(o client.Output) { io.WriteString(x.e.stdout, o.Text) }
	opts.OnStderr = func(o client.Output) { io.WriteString(x.e.stderr, o.Text) }
	opts.OnNotice = func(n client.Notice) { fmt.Fprintf(x.e.stderr, "envctl: note: %s\n", n.Text) }
	opts.OnResult = func(r client.Result) {
		if r.Text != "" {
			fmt.Fprintln(x.e.stdout, r.Text)
			return
		}
		var kinds []string
		for k := range r.Data {
			kinds = append(kinds, k)
		}
		fmt.Fprintf(x.e.stdout, "<result: %s>\n", strings.Join(kinds, ", "))
	}
	opts.OnError = func(ce client.CodeError) {
		if ce.Traceback != "" {
			fmt.Fprintln(x.e.stderr, strings.TrimRight(ce.Traceback, "\n"))
			return
		}
		fmt.Fprintln(x.e.stderr, ce.Error())
	}
	// Ctrl-C interrupts the code, not envctl.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	run, err := x.e.c.Execute(context.WithoutCancel(ctx), code, opts)
	if err != nil {
		return nil, err
	}
	defer run.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-sigs:
			x.e.c.Interrupt(context.WithoutCancel(ctx), run.ContextID())
		case <-done:
		}
	}()
	res, err := run.Wait()
	if err != nil {
		return nil, err
	}
	// Later lines go to the same context, whatever the default was.
	x.opts.ContextID, x.opts.Language = res.ContextID, ""
	return res, nil
}

// prompt reads code line by line from the terminal and runs each on the
// same context, so state carries over. A line ending in ":" opens a block
// that an empty line closes, as in Python's prompt.
func (x *executor) prompt(ctx context.Context) error {
	in := bufio.NewReader(x.e.stdin)
	lang := x.opts.Language
	if lang == "" {
		lang = "python"
	}
	if x.opts.ContextID != "" {
		lang = "context " + x.opts.ContextID
	}
	fmt.Fprintf(x.e.stderr, "envctl exec-code: %s on %s; Ctrl-D to quit, Ctrl-C to interrupt\n", lang, x.e.c.Target())
	for {
		code, err := readBlock(in, x.e.stdout)
		if errors.Is(err, io.EOF) {
			fmt.Fprintln(x.e.stdout)
			return nil
		}
		if err != nil {
			return fmt.Errorf("exec-code: read: %w", err)
		}
		if strings.TrimSpace(code) == "" {
			continue
		}
		res, err := x.exec(ctx, code)
		if err != nil {
			// The context may be gone or the kernel dead: say so and go on.
			fmt.Fprintln(x.e.stderr, "envctl: "+oneLine(err.Error()))
			if errors.Is(err, client.ErrUnavailable) {
				return exitError{code: 1}
			}
			continue
		}
		if res.Reason != client.EndOK && res.Reason != client.EndError {
			fmt.Fprintf(x.e.stderr, "envctl: execution %s\n", res)
		}
	}
}

// readBlock reads one statement: a line, or a block opened by a line that
// ends in ":" and closed by an empty line.
func readBlock(in *bufio.Reader, out io.Writer) (string, error) {
	var b strings.Builder
	prompt := ">>> "
	for {
		io.WriteString(out, prompt)
		line, err := in.ReadString('\n')
		if err != nil && !(errors.Is(err, io.EOF) && line != "") {
			if errors.Is(err, io.EOF) && b.Len() > 0 {
				return b.String(), nil
			}
			return "", err
		}
		line = strings.TrimRight(line, "\r\n")
		block := b.Len() > 0
		if block && strings.TrimSpace(line) == "" {
			return b.String(), nil
		}
		b.WriteString(line)
		b.WriteByte('\n')
		if !block && !strings.HasSuffix(strings.TrimSpace(line), ":") && !strings.HasSuffix(line, "\\") {
			return b.String(), nil
		}
		prompt = "... "
	}
}
