package interpreter

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/envd-dev/envd/internal/jupyter"
)

// Notice queues text for the next execution of context id (an
// EventNotice of kind NoticePackagesChanged: the SDKs see a line on
// stderr). It fails with ErrContextNotFound.
func (e *Engine) Notice(id, text string) error {
	c, err := e.Context(id)
	if err != nil {
		return err
	}
	c.notice(NoticePackagesChanged, text)
	return nil
}

// moduleName is what Loaded accepts: Python dotted module names and R
// package names, nothing that needs quoting.
var moduleName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

// Loaded reports, for each context whose kernel runs envd's code for lang
// ("python" or "r") and is running now, which of modules (Python module
// names, R package names; others are ignored) it has loaded
// (Python: sys.modules; R: loadedNamespaces()). Contexts busy running code
// until ctx ends are left out, as are those whose kernel cannot answer:
// Loaded asks each one in turn, behind the code already queued there.
func (e *Engine) Loaded(ctx context.Context, lang string, modules []string) (map[string][]string, error) {
	// A name no import could give (a stray top_level.txt line) is left
	// out, never put in code.
	modules = slices.DeleteFunc(slices.Clone(modules), func(m string) bool { return !moduleName.MatchString(m) })
	if len(modules) == 0 {
		return map[string][]string{}, nil
	}
	list, err := json.Marshal(modules)
	if err != nil {
		return nil, err
	}
	var code string
	opts := jupyter.ExecuteOptions{Silent: true}
	switch lang {
	case "python":
		// No names left in the user's namespace.
		code = fmt.Sprintf(`print("\n".join(m for m in %s if m in __import__("sys").modules))`, list)
	case "r":
		quoted := make([]string, len(modules))
		for i, m := range modules {
			quoted[i] = `"` + m + `"`
		}
		code = fmt.Sprintf(`cat(intersect(c(%s), loadedNamespaces()), sep = "\n")`, strings.Join(quoted, ", "))
		// IRkernel discards what silent requests print.
		opts = jupyter.ExecuteOptions{NoHistory: true}
	default:
		return nil, fmt.Errorf("interpreter: cannot tell what a %s kernel loaded", lang)
	}
	e.mu.Lock()
	var cs []*Context
	for _, c := range e.order {
		if c.code == lang {
			cs = append(cs, c)
		}
	}
	e.mu.Unlock()
	out := make(map[string][]string)
	for _, c := range cs {
		if ctx.Err() != nil {
			break
		}
		loaded, err := c.loaded(ctx, code, opts)
		if err != nil {
			e.log.Info("cannot tell which modules a context loaded", "context_id", c.ID, "error", err)
			continue
		}
		if len(loaded) > 0 {
			out[c.ID] = loaded
		}
	}
	return out, nil
}

// loaded runs a probe in the context's running kernel, in its turn, and
// returns the lines it printed. A context without a running kernel has
// loaded nothing.
func (c *Context) loaded(ctx context.Context, code string, opts jupyter.ExecuteOptions) ([]string, error) {
	if !c.running() {
		return nil, nil
	}
	ticket := c.queue.Enqueue()
	select {
	case <-ticket:
	case <-ctx.Done():
		c.queue.Cancel(ticket)
		return nil, fmt.Errorf("busy: %w", ctx.Err())
	}
	defer c.queue.Release()
	c.mu.Lock()
	ks := c.ks
	c.mu.Unlock()
	if ks == nil || !ks.usable() {
		return nil, nil
	}
	var b strings.Builder
	if err := c.silentOutput(ctx, ks, code, opts, &b); err != nil {
		return nil, err
	}
	var lines []string
	for _, l := range strings.Split(b.String(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines, nil
}
