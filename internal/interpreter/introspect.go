package interpreter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/envd-dev/envd/internal/jupyter"
)

// Introspection: completion and inspection at a cursor (Jupyter's
// complete_request and inspect_request) and a context's variables (a query
// per language, run silently).
//
// Every query takes its turn in the context's queue, as an execution does:
// a context busy running code (or with code queued) makes it wait, until
// ctx ends; then it answers ErrBusy, naming what runs. Adapters bound the
// wait with the request's deadline, or QueryWait without one. A query
// never starts a kernel: a context without a usable one answers
// ErrKernelUnavailable, saying why (its kernel has not started yet, died
// for good, or died during the query).

// QueryWait is how long the adapters let an introspection query wait for
// a busy context when the request has no deadline of its own.
const QueryWait = 10 * time.Second

// Limits of ListVariables.
const (
	// MaxVariables bounds how many variables a query returns; the total
	// says how many there were.
	MaxVariables = 1000
	// MaxReprLen bounds a variable's repr, in characters.
	MaxReprLen = 200
)

// maxQueryOutput bounds what a variables query may print.
const maxQueryOutput = 8 << 20

// Completion is what a kernel completes at a cursor. Positions count
// Unicode code points in the code, as Jupyter's do: the matches replace
// code[CursorStart:CursorEnd].
type Completion struct {
	Matches     []string `json:"matches"`
	CursorStart int      `json:"cursor_start"`
	CursorEnd   int      `json:"cursor_end"`
	// Types gives each match's kind ("function", "instance", "module",
	// "keyword", ...) and signature, when the kernel tells them (IPython
	// does); empty otherwise.
	Types []CompletionType `json:"types,omitempty"`
}

// CompletionType describes one match.
type CompletionType struct {
	Text      string `json:"text"`
	Type      string `json:"type"`
	Signature string `json:"signature,omitempty"`
}

// Inspection is what a kernel says about the name at a cursor
// (documentation, signature, value).
type Inspection struct {
	// Found is false when the kernel knows nothing there (Deno's kernel
	// never does).
	Found bool `json:"found"`
	// Text is the text/plain form without its ANSI escape sequences
	// (IPython colours its help).
	Text string `json:"text"`
	// Data is the kernel's whole MIME bundle, values as the kernel sent
	// them (text/plain with its escapes).
	Data map[string]json.RawMessage `json:"data"`
}

// Variable is one of a context's variables.
type Variable struct {
	Name string `json:"name"`
	// Type is the language's: a Python class name ("int", "DataFrame"), a
	// JavaScript constructor name or typeof, an R class, bash's kind
	// ("string", "array", "associative array", "integer", with
	// " (exported)").
	Type string `json:"type"`
	// Repr is a short form of the value, at most MaxReprLen characters,
	// cut with "..." (built without building a big value's whole repr
	// where the language allows).
	Repr string `json:"repr"`
	// Len is the length when cheap: a container's items, a string's
	// characters, a bash array's elements. Nil when not known.
	Len *int64 `json:"len,omitempty"`
	// Shape of an array or data frame (numpy, pandas, R's dim), when it
	// has one.
	Shape []int64 `json:"shape,omitempty"`
	// DType is the element type of an array (numpy's dtype, R's typeof).
	DType string `json:"dtype,omitempty"`
}

// Variables is a context's variables, sorted by name.
type Variables struct {
	Variables []Variable `json:"variables"`
	// Total counts the variables found; more than len(Variables) when
	// Truncated (at most MaxVariables are returned).
	Total     int  `json:"total"`
	Truncated bool `json:"truncated"`
}

// CursorEnd as a cursor means the end of the code.
const CursorEnd = -1

// checkCursor validates a query's code and cursor and returns the cursor
// (CursorEnd resolved).
func checkCursor(code string, cursor int) (int, error) {
	if code == "" {
		return 0, newErr(ErrBadQuery, nil, "%s: code is empty: give the code and a cursor position in it", ErrBadQuery.Error())
	}
	n := utf8.RuneCountInString(code)
	if cursor == CursorEnd {
		return n, nil
	}
	if cursor < 0 || cursor > n {
		return 0, newErr(ErrBadQuery, nil, "%s: cursor_pos %d is out of range: the code has %d code points (0 to %d)",
			ErrBadQuery.Error(), cursor, n, n)
	}
	return cursor, nil
}

// Complete asks the context's kernel for the completions at cursor (code
// points; CursorEnd: the end of code). See the package's introspection
// notes for how it waits and fails; also ErrContextNotFound, ErrBadQuery.
func (e *Engine) Complete(ctx context.Context, contextID, code string, cursor int) (*Completion, error) {
	cursor, err := checkCursor(code, cursor)
	if err != nil {
		return nil, err
	}
	c, err := e.Context(contextID)
	if err != nil {
		return nil, err
	}
	var out *Completion
	err = c.query(ctx, "completion", func(ctx context.Context, ks *kernelState) error {
		rep, err := ks.kernel.Complete(ctx, code, cursor)
		if err != nil {
			return err
		}
		if rep.Status != "" && rep.Status != "ok" {
			return &KernelError{Name: rep.EName, Value: rep.EValue}
		}
		out = completion(c, code, cursor, rep)
		return nil
	})
	return out, err
}

func completion(c *Context, code string, cursor int, rep *jupyter.CompleteReply) *Completion {
	out := &Completion{Matches: rep.Matches, CursorStart: rep.CursorStart, CursorEnd: rep.CursorEnd}
	if out.Matches == nil {
		out.Matches = []string{}
	}
	if isJS(c.code) && out.CursorStart == cursor && out.CursorEnd == cursor {
		// Deno's kernel answers a bare name with every global, to be
		// inserted at the cursor: keep those that complete the name, and
		// replace it.
		if p := identBefore(code, cursor); p != "" {
			kept := out.Matches[:0:0]
			for _, m := range out.Matches {
				if strings.HasPrefix(m, p) {
					kept = append(kept, m)
				}
			}
			out.Matches = kept
			out.CursorStart = cursor - utf8.RuneCountInString(p)
		}
	}
	for _, t := range rep.Metadata.Types {
		out.Types = append(out.Types, CompletionType{Text: t.Text, Type: t.Type, Signature: t.Signature})
	}
	return out
}

// identBefore is the identifier (letters, digits, _ and $) that ends at
// the cursor (in code points).
func identBefore(code string, cursor int) string {
	runes := []rune(code)[:cursor]
	i := len(runes)
	for i > 0 && (unicode.IsLetter(runes[i-1]) || unicode.IsDigit(runes[i-1]) || runes[i-1] == '_' || runes[i-1] == '$') {
		i--
	}
	return string(runes[i:])
}

// Inspect asks the context's kernel about the name at cursor (code
// points; CursorEnd: the end of code); detail 1 asks for more (IPython:
// the source). Errors as Complete's.
func (e *Engine) Inspect(ctx context.Context, contextID, code string, cursor, detail int) (*Inspection, error) {
	cursor, err := checkCursor(code, cursor)
	if err != nil {
		return nil, err
	}
	if detail != 0 && detail != 1 {
		return nil, newErr(ErrBadQuery, nil, "%s: detail_level %d: give 0 or 1", ErrBadQuery.Error(), detail)
	}
	c, err := e.Context(contextID)
	if err != nil {
		return nil, err
	}
	var out *Inspection
	err = c.query(ctx, "inspection", func(ctx context.Context, ks *kernelState) error {
		rep, err := ks.kernel.Inspect(ctx, code, cursor, detail)
		if err != nil {
			return err
		}
		if rep.Status != "" && rep.Status != "ok" {
			return &KernelError{Name: rep.EName, Value: rep.EValue}
		}
		out = &Inspection{Found: rep.Found, Data: rep.Data}
		if out.Data == nil {
			out.Data = map[string]json.RawMessage{}
		}
		var text string
		if raw, ok := rep.Data["text/plain"]; ok && json.Unmarshal(raw, &text) == nil {
			out.Text = StripANSI(text)
		}
		return nil
	})
	return out, err
}

// ansi matches ANSI escape sequences: CSI (colours, cursor moves), OSC
// (ended by BEL or ST), character set designations and two-character
// escapes.
var ansi = regexp.MustCompile(`\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[()*+][0-9A-Za-z]|[@-Z\\-_])`)

// StripANSI removes ANSI escape sequences from s.
func StripANSI(s string) string {
	if !strings.Contains(s, "\x1b") {
		return s
	}
	return ansi.ReplaceAllString(s, "")
}

// Variables lists the context's variables: at most MaxVariables, sorted by
// name, without hidden ones (per language: see variables.go). The query
// runs silently: no execution count, no history, nothing other clients
// see. Errors as Complete's, and ErrNotSupported for a language envd has
// no query for (Java, kernelspecs envd does not know).
func (e *Engine) Variables(ctx context.Context, contextID string) (*Variables, error) {
	c, err := e.Context(contextID)
	if err != nil {
		return nil, err
	}
	switch c.code {
	case "python", "javascript", "typescript", "r":
	case "bash":
		if c.kernelName != bashKernel {
			return nil, newErr(ErrNotSupported, nil, "%s: listing variables in bash needs envd's bash kernel, "+
				"not kernelspec %q", ErrNotSupported.Error(), c.kernelName)
		}
	default:
		return nil, newErr(ErrNotSupported, nil, "%s: envd cannot list the variables of a %s context",
			ErrNotSupported.Error(), c.Language)
	}
	var out *Variables
	err = c.query(ctx, "variables query", func(ctx context.Context, ks *kernelState) error {
		var err error
		out, err = c.variables(ctx, ks)
		return err
	})
	return out, err
}

// query runs fn on the context's kernel in the context's turn (see the
// introspection notes above), after bringing the kernel up to date (cwd
// and env after a restart). what names the query in errors.
func (c *Context) query(ctx context.Context, what string, fn func(context.Context, *kernelState) error) error {
	e := c.eng
	if e.isClosed() {
		return errClosed
	}
	began := e.clock.Now()
	ticket := c.queue.Enqueue()
	select {
	case <-ticket:
	case <-e.ctx.Done():
		c.queue.Cancel(ticket)
		return errClosed
	case <-ctx.Done():
		c.queue.Cancel(ticket)
		return c.busy(what, e.clock.Since(began), ctx.Err())
	}
	defer c.queue.Release()
	c.mu.Lock()
	ks, removed := c.ks, c.removed || c.removing
	c.mu.Unlock()
	switch {
	case removed:
		return notFound(c.ID)
	case ks == nil:
		return newErr(ErrKernelUnavailable, nil, "%s: context %s has no kernel now: it starts (with fresh state) on the "+
			"context's next execution", ErrKernelUnavailable.Error(), c.ID)
	case !ks.usable():
		return newErr(ErrKernelUnavailable, nil, "%s: the %s kernel of context %s is gone (it died and could not be "+
			"restarted, or the Jupyter server restarted): the context's next execution starts a new one with fresh state",
			ErrKernelUnavailable.Error(), c.Language, c.ID)
	}
	if err := c.setup(ctx, ks); err != nil {
		return c.queryErr(what, ks, err)
	}
	if err := fn(ctx, ks); err != nil {
		return c.queryErr(what, ks, err)
	}
	return nil
}

// busy is ErrBusy for a query that waited d for its turn.
func (c *Context) busy(what string, d time.Duration, cause error) error {
	running := "code queued before it"
	if x := c.Current(); x != nil {
		running = "execution " + x.ID
	}
	return newErr(ErrBusy, cause, "%s: context %s is running code (%s): the %s waited %s for its turn; "+
		"retry when it ends, or interrupt it", ErrBusy.Error(), c.ID, running, what, d.Round(time.Millisecond))
}

// queryErr says what a kernel failure during a query means.
func (c *Context) queryErr(what string, ks *kernelState, err error) error {
	var kerr *KernelError
	switch {
	case errors.As(err, &kerr), errors.Is(err, ErrNotSupported), errors.Is(err, ErrClosed):
		return err
	case c.isRemoved():
		return notFound(c.ID)
	case c.eng.isClosed():
		return errClosed
	case errors.Is(err, jupyter.ErrKernelRestarted):
		return newErr(ErrKernelUnavailable, err, "%s: the %s kernel of context %s died during the %s and was "+
			"restarted with fresh state: retry", ErrKernelUnavailable.Error(), c.Language, c.ID, what)
	case gone(err), errors.Is(err, jupyter.ErrConnectionLost), errors.Is(err, jupyter.ErrClosed):
		return newErr(ErrKernelUnavailable, err, "%s: the %s kernel of context %s went away during the %s: "+
			"the context's next execution starts a new one with fresh state", ErrKernelUnavailable.Error(), c.Language, c.ID, what)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return newErr(ErrBusy, err, "%s: the %s kernel of context %s did not answer the %s in time",
			ErrBusy.Error(), c.Language, c.ID, what)
	}
	return fmt.Errorf("%s in context %s: %w", what, c.ID, err)
}

// runQuery runs internal code with opts and returns what it printed on
// stdout (at most maxQueryOutput bytes) and its execute_reply.
func (c *Context) runQuery(ctx context.Context, ks *kernelState, code string, opts jupyter.ExecuteOptions) (string, *jupyter.ExecuteReplyContent, error) {
	x, err := ks.kernel.Execute(ctx, code, opts)
	if err != nil {
		return "", nil, err
	}
	var out strings.Builder
	var rep *jupyter.ExecuteReplyContent
	var kerr error
	for {
		m, err := x.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", nil, err
		}
		switch m.Type() {
		case "stream":
			var s jupyter.StreamContent
			if m.DecodeContent(&s) == nil && s.Name == "stdout" && out.Len()+len(s.Text) <= maxQueryOutput {
				out.WriteString(s.Text)
			}
		case "error":
			var ec jupyter.ErrorContent
			if kerr == nil && m.DecodeContent(&ec) == nil {
				kerr = &KernelError{Name: ec.EName, Value: ec.EValue}
			}
		case "execute_reply":
			var r jupyter.ExecuteReplyContent
			if m.DecodeContent(&r) == nil {
				rep = &r
				if r.Status != "ok" && kerr == nil {
					kerr = &KernelError{Name: r.EName, Value: r.EValue}
				}
			}
		}
	}
	if kerr != nil {
		return "", nil, kerr
	}
	if rep == nil {
		return "", nil, jupyter.ErrNoReply
	}
	return out.String(), rep, nil
}
