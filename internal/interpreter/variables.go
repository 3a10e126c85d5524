package interpreter

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/jupyter/startup"
)

// The variables query of each language. Each runs without changing the
// kernel's execution count or history, and what it produces reaches envd
// only: iopub messages are routed by request, so no execution (of this
// context or another) sees them.
//
//	python      the user expression __envd_variables() (envd's IPython
//	            startup, envd_kernel/variables.py) of a silent request with
//	            no code: the answer comes in the execute_reply. Hidden:
//	            names starting with "_", modules, IPython's own (In, Out,
//	            exit, get_ipython...); envd's helpers live in builtins.
//	bash        the user expression "envd:variables" of envd's bash kernel,
//	            in a silent request: the variables that did not exist when
//	            the shell started, without envd's and bash's dynamic ones
//	            (envd_bash_kernel/kernel.py says which).
//	javascript  (and typescript; Deno's kernel) the globals the kernel's
//	            completion lists (var, let, const, function, class and
//	            globalThis properties alike), less those it listed right
//	            after the kernel started (its builtins, captured at setup)
//	            and names starting with "_"; their values are read by a
//	            silent request that prints JSON (Deno.inspect, bounded).
//	r           ls() of the global environment (dot-names are hidden), read
//	            by a request that prints JSON (utils::str, bounded), not
//	            stored in history: IRkernel drops every output of a silent
//	            request, and does not count one that is not stored.
const variablesMarker = "__envd_variables__"

// variablesMIME is the MIME type the Python and bash user expressions
// answer with.
const variablesMIME = "application/vnd.envd.variables+json"

// bashKernel is envd's bash kernelspec, the only bash kernel that answers
// the variables query.
const bashKernel = startup.BashKernelName

// rawVariables is the JSON every query produces.
type rawVariables struct {
	Variables []Variable `json:"variables"`
	Total     int        `json:"total"`
	Truncated bool       `json:"truncated"`
}

func (c *Context) variables(ctx context.Context, ks *kernelState) (*Variables, error) {
	var raw rawVariables
	var err error
	switch c.code {
	case "python":
		err = c.expressionVariables(ctx, ks, fmt.Sprintf("__envd_variables(%d, %d)", MaxVariables, MaxReprLen), &raw)
	case "bash":
		err = c.expressionVariables(ctx, ks, "envd:variables", &raw)
	case "javascript", "typescript":
		err = c.jsVariables(ctx, ks, &raw)
	case "r":
		err = c.printedVariables(ctx, ks, rVariables, jupyter.ExecuteOptions{NoHistory: true}, &raw)
	}
	if err != nil {
		return nil, err
	}
	out := &Variables{Variables: raw.Variables, Total: raw.Total, Truncated: raw.Truncated}
	if out.Variables == nil {
		out.Variables = []Variable{}
	}
	for i := range out.Variables {
		out.Variables[i].Repr = cut(out.Variables[i].Repr, MaxReprLen)
	}
	return out, nil
}

// cut shortens s to at most n characters, ending with "..." if cut.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-3]) + "..."
}

// expressionVariables evaluates expr as the user expression of a silent
// request without code, and decodes its variablesMIME value.
func (c *Context) expressionVariables(ctx context.Context, ks *kernelState, expr string, out *rawVariables) error {
	_, rep, err := c.runQuery(ctx, ks, "", jupyter.ExecuteOptions{Silent: true, UserExpressions: map[string]string{"v": expr}})
	if err != nil {
		return err
	}
	raw, ok := rep.UserExpressions["v"]
	if !ok {
		return newErr(ErrNotSupported, nil, "%s: the %s kernel (kernelspec %q) ignores user expressions",
			ErrNotSupported.Error(), c.Language, c.kernelName)
	}
	var res struct {
		Status string                     `json:"status"`
		Data   map[string]json.RawMessage `json:"data"`
		jupyter.ErrorContent
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("decode the variables answer: %w", err)
	}
	if res.Status != "ok" {
		if res.EName == "NameError" {
			return newErr(ErrNotSupported, nil, "%s: the %s kernel lacks envd's helper (%s: %s): was it started "+
				"without envd's kernel startup files?", ErrNotSupported.Error(), c.Language, res.EName, res.EValue)
		}
		return &KernelError{Name: res.EName, Value: res.EValue}
	}
	data, ok := res.Data[variablesMIME]
	if !ok {
		return fmt.Errorf("the variables answer has no %s", variablesMIME)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode the variables answer: %w", err)
	}
	return nil
}

// printedVariables runs code that prints variablesMarker and the JSON on
// one line, and decodes that line.
func (c *Context) printedVariables(ctx context.Context, ks *kernelState, code string, opts jupyter.ExecuteOptions, out *rawVariables) error {
	printed, _, err := c.runQuery(ctx, ks, code, opts)
	if err != nil {
		return err
	}
	line, ok := markedLine(printed, variablesMarker)
	if !ok {
		return fmt.Errorf("the variables query printed no answer")
	}
	if err := json.Unmarshal([]byte(line), out); err != nil {
		return fmt.Errorf("decode the variables answer: %w", err)
	}
	return nil
}

// jsVariables lists the globals the kernel completes that it did not
// list at setup, then reads them.
func (c *Context) jsVariables(ctx context.Context, ks *kernelState, out *rawVariables) error {
	rep, err := ks.kernel.Complete(ctx, "", 0)
	if err != nil {
		return err
	}
	var names []string
	seen := map[string]bool{}
	for _, n := range rep.Matches {
		if ks.baseline[n] || seen[n] || strings.HasPrefix(n, "_") || !jsIdent(n) {
			continue
		}
		seen[n] = true
		names = append(names, n)
	}
	sort.Strings(names)
	total := len(names)
	names = names[:min(len(names), MaxVariables)]
	if len(names) == 0 {
		out.Total = total
		return nil
	}
	lit, err := json.Marshal(names)
	if err != nil {
		return err
	}
	lit2, err := json.Marshal(string(lit))
	if err != nil {
		return err
	}
	code := strings.ReplaceAll(jsVariables, "NAMES", string(lit2))
	code = strings.ReplaceAll(code, "REPRLEN", fmt.Sprint(MaxReprLen))
	if err := c.printedVariables(ctx, ks, code, jupyter.ExecuteOptions{Silent: true}, out); err != nil {
		return err
	}
	out.Total = total - (len(names) - len(out.Variables)) // names that vanished meanwhile
	out.Truncated = total > MaxVariables
	return nil
}

// isJS reports whether code (a context's setup language) runs on a
// JavaScript kernel (Deno's).
func isJS(code string) bool { return code == "javascript" || code == "typescript" }

// jsIdent reports whether s can be evaluated as a bare name.
func jsIdent(s string) bool {
	for i, r := range s {
		ok := r == '_' || r == '$' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || r > 0x7f || (i > 0 && r >= '0' && r <= '9')
		if !ok {
			return false
		}
	}
	return s != ""
}

// jsBaseline records the globals a fresh JavaScript kernel has: its
// builtins, left out of its variables. Deno completes "" with the names
// of globalThis and of its prototypes (and symbols, which jsVariables
// skips): this lists the same by running code, not by a completion. An
// execution is watched (a kernel that stops answering ends it); a
// complete_request is only waited for, and a creation must not wait on
// what may never come.
func (c *Context) jsBaseline(ctx context.Context, ks *kernelState) error {
	line, err := c.silentAnswer(ctx, ks, jsGlobals, variablesMarker, "globals query")
	if err != nil {
		return err
	}
	var names []string
	if err := json.Unmarshal([]byte(line), &names); err != nil {
		return fmt.Errorf("decode the globals answer: %w", err)
	}
	ks.baseline = make(map[string]bool, len(names))
	for _, n := range names {
		ks.baseline[n] = true
	}
	return nil
}

// jsGlobals prints variablesMarker and the JSON array of the names on
// globalThis and its prototype chain.
const jsGlobals = `void (function () {
  var seen = new Set();
  for (var o = globalThis; o; o = Object.getPrototypeOf(o)) {
    Object.getOwnPropertyNames(o).forEach(function (n) { seen.add(n); });
  }
  console.log("` + variablesMarker + `" + JSON.stringify(Array.from(seen)));
})();`

// jsVariables reads the values of NAMES (a JSON string of a JSON array)
// in global scope; indirect eval sees let, const and class bindings too.
const jsVariables = `void (function (names, max) {
  var inspect = function (v) {
    try {
      if (typeof Deno !== "undefined") return Deno.inspect(v, { depth: 1, iterableLimit: 12, strAbbreviateSize: max, colors: false, compact: true, breakLength: Infinity });
      return String(v);
    } catch (e) { return "<inspect failed>"; }
  };
  var out = [];
  for (var i = 0; i < names.length; i++) {
    var n = names[i], v;
    try { v = (0, eval)(n); } catch (e) { continue; }
    var t = typeof v;
    if (v === null) t = "null";
    else if (Array.isArray(v)) t = "Array";
    else if (t === "object") { try { t = (v.constructor && v.constructor.name) || "Object"; } catch (e) { t = "Object"; } }
    var d = { name: n, type: t, repr: "" };
    var r = inspect(v);
    d.repr = r.length > max ? r.slice(0, max - 3) + "..." : r;
    try {
      if (typeof v === "string" || Array.isArray(v) || ArrayBuffer.isView(v)) d.len = v.length;
      else if (v instanceof Map || v instanceof Set) d.len = v.size;
    } catch (e) {}
    out.push(d);
  }
  console.log("` + variablesMarker + `" + JSON.stringify({ variables: out, total: out.length, truncated: false }));
})(JSON.parse(NAMES), REPRLEN);`

// rVariables lists R's global environment (ls() hides dot-names).
var rVariables = `local({
  nm <- sort(ls(globalenv()))
  total <- length(nm)
  nm <- head(nm, ` + fmt.Sprint(MaxVariables) + `)
  out <- lapply(nm, function(n) {
    v <- get(n, envir = globalenv())
    d <- list(name = n, type = class(v)[1])
    r <- tryCatch(paste(utils::capture.output(utils::str(v, max.level = 1, vec.len = 3, list.len = 5,
      give.attr = FALSE, nchar.max = ` + fmt.Sprint(MaxReprLen) + `)), collapse = " "), error = function(e) "<str failed>")
    r <- gsub("\\s+", " ", trimws(r))
    if (nchar(r) > ` + fmt.Sprint(MaxReprLen) + `) r <- paste0(substr(r, 1, ` + fmt.Sprint(MaxReprLen-3) + `), "...")
    d$repr <- r
    dm <- dim(v)
    if (!is.null(dm)) d$shape <- as.list(dm) else if (is.vector(v) || is.list(v)) d$len <- length(v)
    if (is.atomic(v)) d$dtype <- typeof(v)
    d
  })
  cat("` + variablesMarker + `", jsonlite::toJSON(list(variables = out, total = total, truncated = total > ` +
	fmt.Sprint(MaxVariables) + `), auto_unbox = TRUE, null = "null", digits = NA), "\n", sep = "")
})`
