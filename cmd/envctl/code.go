package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"golang.org/x/term"

	"github.com/envd-dev/envd/client"
)

type execOpts struct {
	lang    string
	context string
	saveDir string
	json    bool
}

var execCodeCommand = &command{
	name:         "exec-code",
	args:         "[--lang LANGUAGE] [--context ID] [--json] [--save-dir DIR] [FILE|-]",
	summary:      "run code in a stateful context: a file, stdin, or an interactive prompt",
	interspersed: true,
	flags: func(fs *flag.FlagSet) any {
		o := &execOpts{}
		fs.StringVar(&o.lang, "lang", "", "`LANGUAGE`: python (default), javascript, typescript, r, bash, or another of envctl languages, or an alias there (py, js, ts, sh...)")
		fs.StringVar(&o.context, "context", "", "run on the context with this `ID` (default: the language's default context)")
		fs.BoolVar(&o.json, "json", false, "print each event as a line of JSON (type stdout, stderr, result, error, notice, end); reads FILE or stdin, never prompts")
		fs.StringVar(&o.saveDir, "save-dir", "", "write the images of results (PNG, JPEG, SVG) into `DIR`, as output_COUNT_INDEX.EXT, and print their paths")
		return o
	},
	run: runExecCode,
}

var languagesCommand = &command{
	noFiles:      true,
	name:         "languages",
	args:         "[--json]",
	summary:      "list the languages exec-code can run (one per installed Jupyter kernel)",
	interspersed: true,
	flags:        jsonFlag,
	run: func(ctx context.Context, e *env, opts any, args []string) error {
		if len(args) > 0 {
			return usageError{fmt.Sprintf("languages: unexpected argument %q (usage: envctl languages [--json])", args[0])}
		}
		langs, err := e.c.Languages(ctx)
		if err != nil {
			return err
		}
		if opts.(*jsonOpts).json {
			out := make([]languageJSON, len(langs))
			for i, l := range langs {
				out[i] = toLanguageJSON(l)
			}
			return printJSON(e.stdout, out)
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
		return usageError{"exec-code: give at most one FILE (usage: envctl exec-code [--lang LANGUAGE] [--context ID] [FILE|-])"}
	}
	x := &executor{
		e: e, opts: client.ExecOptions{ContextID: o.context, Language: o.lang},
		json: o.json, saveDir: o.saveDir, color: colorOK(e.stderr),
	}
	if o.saveDir != "" {
		if err := os.MkdirAll(o.saveDir, 0o755); err != nil {
			return fmt.Errorf("exec-code: --save-dir: %w", err)
		}
	}
	if len(args) == 1 && args[0] != "-" {
		b, err := os.ReadFile(args[0])
		if err != nil {
			return fmt.Errorf("exec-code: %w", err)
		}
		return x.runOnce(ctx, string(b))
	}
	if in, ok := e.stdin.(*os.File); ok && term.IsTerminal(int(in.Fd())) && !o.json {
		// Line editing, history and Tab completion when the prompt and
		// the echo go to the same terminal.
		if out, ok := e.stdout.(*os.File); ok && term.IsTerminal(int(out.Fd())) {
			tl := newTermLines(in, out)
			tl.complete = x.completer(ctx)
			return x.prompt(ctx, tl)
		}
		return x.prompt(ctx, newPlainLines(e.stdin, e.stdout))
	}
	b, err := io.ReadAll(e.stdin)
	if err != nil {
		return fmt.Errorf("exec-code: read stdin: %w", err)
	}
	return x.runOnce(ctx, string(b))
}

// colorOK tells whether w is a terminal that may get ANSI escapes (unless
// NO_COLOR is set, https://no-color.org).
func colorOK(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd())) && os.Getenv("NO_COLOR") == ""
}

// executor runs code and prints what it produces.
type executor struct {
	e    *env
	opts client.ExecOptions
	// json prints events as JSON lines (execEventJSON).
	json bool
	// saveDir, if set, receives the images of results.
	saveDir string
	// color keeps the ANSI escapes of tracebacks (stderr is a terminal).
	color bool
	// runs counts the executions, for the names of saved images when the
	// kernel gives no execution count.
	runs int64
}

func (x *executor) runOnce(ctx context.Context, code string) error {
	res, err := x.exec(ctx, code)
	if err != nil {
		return err
	}
	return outcome(res)
}

// outcome is the error of an execution that did not end well: exit 1,
// as it failed in the sandbox.
func outcome(res *client.ExecResult) error {
	switch res.Reason {
	case client.EndOK:
		return nil
	case client.EndError:
		return exitError{code: exitSandbox} // the traceback is on stderr
	}
	if res.Error != nil && res.Error.Value == res.Message {
		return exitError{code: exitSandbox} // the error event said it
	}
	return exitError{code: exitSandbox, msg: fmt.Sprintf("execution %s", res)}
}

// exec runs code on the executor's context, printing output as it comes:
// stdout and results on stdout, stderr, notices and tracebacks on stderr;
// with json, every event on stdout. Ctrl-C interrupts the code.
func (x *executor) exec(ctx context.Context, code string) (*client.ExecResult, error) {
	x.runs++
	var run *client.Execution
	var saveErr error
	nresults := 0
	opts := x.opts
	opts.OnResult = func(r client.Result) {
		files, err := x.saveImages(run, nresults, r)
		nresults++
		if err != nil && saveErr == nil {
			saveErr = err
		}
		if x.json {
			x.emit(toResultJSON(r, files))
			return
		}
		switch {
		case r.Text != "":
			fmt.Fprintln(x.e.stdout, r.Text)
		case len(files) == 0:
			fmt.Fprintf(x.e.stdout, "<result: %s>\n", strings.Join(slices.Sorted(maps.Keys(r.Data)), ", "))
		}
		for _, f := range files {
			fmt.Fprintf(x.e.stdout, "<%s: %s>\n", f.mime, f.path)
		}
	}
	if x.json {
		opts.OnStdout = func(o client.Output) { x.emit(outputJSON{Type: "stdout", Text: o.Text, Time: o.Time}) }
		opts.OnStderr = func(o client.Output) { x.emit(outputJSON{Type: "stderr", Text: o.Text, Time: o.Time}) }
		opts.OnNotice = func(n client.Notice) { x.emit(toNoticeJSON(n)) }
		opts.OnQueued = func(behind string) { x.emit(queuedJSON{Type: "queued", Behind: behind}) }
		opts.OnError = func(ce client.CodeError) {
			x.emit(codeErrorJSON{Type: "error", Name: ce.Name, Value: ce.Value, Traceback: ce.Traceback})
		}
	} else {
		opts.OnStdout = func(o client.Output) { io.WriteString(x.e.stdout, o.Text) }
		opts.OnStderr = func(o client.Output) { io.WriteString(x.e.stderr, o.Text) }
		opts.OnNotice = func(n client.Notice) { fmt.Fprintf(x.e.stderr, "envctl: note: %s\n", n.Text) }
		opts.OnQueued = func(behind string) {
			fmt.Fprintf(x.e.stderr, "envctl: waiting for execution %s in this context\n", behind)
		}
		opts.OnError = func(ce client.CodeError) {
			if ce.Traceback != "" {
				fmt.Fprintln(x.e.stderr, formatTraceback(ce.Traceback, x.color))
				return
			}
			fmt.Fprintln(x.e.stderr, ce.Error())
		}
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
	if x.json {
		x.emit(toEndJSON(res))
	}
	// Later lines go to the same context, whatever the default was.
	x.opts.ContextID, x.opts.Language = res.ContextID, ""
	if saveErr != nil {
		return nil, saveErr
	}
	return res, nil
}

// emit prints one event as a line of JSON.
func (x *executor) emit(v any) {
	if err := printJSON(x.e.stdout, v); err != nil {
		fmt.Fprintln(x.e.stderr, "envctl: "+oneLine(err.Error()))
	}
}

// savedImage is an image of a result written to a file.
type savedImage struct{ mime, path string }

// imageTypes are the formats --save-dir writes, in this order; base64
// marks those Jupyter sends base64-encoded.
var imageTypes = []struct {
	mime, ext string
	base64    bool
}{
	{"image/png", "png", true},
	{"image/jpeg", "jpg", true},
	{"image/svg+xml", "svg", false},
}

// saveImages writes the images of r, the index-th result (from 0) of run,
// into the save directory, as output_COUNT_INDEX.EXT (as nbconvert names
// a notebook's outputs).
func (x *executor) saveImages(run *client.Execution, index int, r client.Result) ([]savedImage, error) {
	if x.saveDir == "" {
		return nil, nil
	}
	count := run.Count()
	if count <= 0 {
		count = x.runs
	}
	var out []savedImage
	for _, it := range imageTypes {
		raw, ok := r.Data[it.mime]
		if !ok {
			continue
		}
		b, err := imageBytes(raw, it.base64)
		if err != nil {
			return out, fmt.Errorf("exec-code: --save-dir: the %s of result %d: %w", it.mime, index, err)
		}
		p := filepath.Join(x.saveDir, fmt.Sprintf("output_%d_%d.%s", count, index, it.ext))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return out, fmt.Errorf("exec-code: --save-dir: %w", err)
		}
		out = append(out, savedImage{it.mime, p})
	}
	return out, nil
}

// imageBytes decodes an image as Jupyter gives it: a JSON string (or a
// list of strings, nbformat's multi-line form), base64 for binary formats.
func imageBytes(raw json.RawMessage, b64 bool) ([]byte, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		var lines []string
		if json.Unmarshal(raw, &lines) != nil {
			return nil, errors.New("not a JSON string")
		}
		s = strings.Join(lines, "")
	}
	if !b64 {
		return []byte(s), nil
	}
	b, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		return nil, fmt.Errorf("bad base64: %w", err)
	}
	return b, nil
}

// prompt reads code from the terminal and runs each statement on the same
// context, so state carries over. A line ending in ":" (or "\") opens a
// block that an empty line closes, as in Python's prompt.
func (x *executor) prompt(ctx context.Context, lines lineReader) error {
	lang := x.opts.Language
	if lang == "" {
		lang = "python"
	}
	if x.opts.ContextID != "" {
		lang = "context " + x.opts.ContextID
	}
	fmt.Fprintf(x.e.stderr, "envctl exec-code: %s on %s; Ctrl-D to quit, Ctrl-C to interrupt\n", lang, x.e.c.Target())
	for {
		code, err := readBlock(lines)
		if errors.Is(err, errInterrupted) {
			// Ctrl-C at the prompt drops what was typed, as Python does.
			fmt.Fprintln(x.e.stderr, "KeyboardInterrupt")
			continue
		}
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
		if x.afterRun(res) {
			return nil
		}
	}
}

// errNameExited is the error envd ends an execution with when the code
// exited its kernel (exit(), quit()).
const errNameExited = "KernelExited"

// afterRun tells, at the prompt, what became of the session after an
// execution that did not end well: its end, unless the error event said
// it already, and whether the context's state is gone. It reports whether
// the session is over: code that exited its kernel ends it, as exit() ends
// the language's own prompt, rather than go on as if the state were still
// there.
func (x *executor) afterRun(res *client.ExecResult) (leave bool) {
	if res.Reason == client.EndOK || res.Reason == client.EndError {
		return false
	}
	if res.Error == nil || res.Error.Value != res.Message {
		fmt.Fprintf(x.e.stderr, "envctl: execution %s\n", res)
	}
	switch {
	case res.Error != nil && res.Error.Name == errNameExited:
		fmt.Fprintln(x.e.stderr, "envctl: the code exited the kernel, so this session ends: the context's state "+
			"(variables, imports, definitions) is gone, and its next run starts on a fresh kernel")
		return true
	case res.Reason == client.EndKernelDied, res.Reason == client.EndServerRestarted:
		fmt.Fprintln(x.e.stderr, "envctl: the context's state is gone: what earlier lines defined (variables, "+
			"imports, functions) does not exist any more; the next line runs on a fresh kernel")
	case res.Reason == client.EndContextRestarted:
		fmt.Fprintln(x.e.stderr, "envctl: the context's state is gone: what earlier lines defined (variables, "+
			"imports, functions) does not exist any more")
	}
	return false
}

// readBlock reads one statement: a line, or a block opened by a line that
// ends in ":" or "\" and closed by an empty line.
func readBlock(lines lineReader) (string, error) {
	var b strings.Builder
	prompt := ">>> "
	for {
		if bl, ok := lines.(blockLines); ok {
			bl.setPending(b.String())
		}
		line, err := lines.readLine(prompt)
		if err != nil {
			if errors.Is(err, io.EOF) && b.Len() > 0 {
				return b.String(), nil
			}
			return "", err
		}
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
