package interpreter

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Deno's kernel resolves the npm: packages a cell imports before it runs
// the cell. When that fails (a package that does not exist, a registry
// that does not answer), it replies "Execution failed" and nothing else:
// no error on iopub, no traceback, nothing on its stderr (not even with
// --log-level=debug); a cell that does not parse ends the same way. The
// same import made at run time, of a specifier the kernel cannot see
// before, raises the reason as a TypeError ("npm package 'x' does not
// exist.", "Failed loading URL for package "x": ... Connection refused").
// So when a JavaScript or TypeScript execution ends that way, envd imports
// each npm: specifier the code names, one at a time and silently, until
// one fails, and reports that failure in place of "Execution failed". The
// cell stopped before any of it ran: importing what it names is what it
// would have done first. URL and jsr: imports fail at run time with their
// reason already.

// denoSilentFailure tells whether ev is the error Deno's kernel replies
// with when the code failed before it ran.
func denoSilentFailure(ev *ErrorValue) bool {
	return ev != nil && ev.Name == "Error" && ev.Value == "Execution failed" && ev.Traceback == ""
}

// npmSpecifier matches an npm: specifier in a string literal.
var npmSpecifier = regexp.MustCompile("[\"'`](npm:[^\"'`\\s]+)[\"'`]")

// maxImportProbes bounds how many specifiers one failure tries.
const maxImportProbes = 16

// importProbeTimeout bounds all the imports one failure tries: Deno's
// own fetches, retries included, end sooner.
const importProbeTimeout = 2 * time.Minute

// npmImports returns the distinct npm: specifiers code names, in order.
func npmImports(code string) []string {
	var out []string
	for _, m := range npmSpecifier.FindAllStringSubmatch(code, -1) {
		if len(out) == maxImportProbes {
			break
		}
		if s := m[1]; !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// importProbeMarker starts the line the import probe prints.
const importProbeMarker = "__envd_import_probe__"

// importProbe imports SPEC (a JSON string of its scheme and the rest, so
// that the kernel does not resolve it before running the probe, as it does
// a literal) and prints importProbeMarker and the JSON of [name, message]
// of what it raised, or [] when it imported.
const importProbe = `await (async () => {
  const s = SPEC.join("");
  let r = [];
  try { await import(s); } catch (e) { r = [String(e?.name ?? "Error"), String(e?.message ?? e)]; }
  console.log("` + importProbeMarker + `" + JSON.stringify(r));
})();`

// explainDenoFailure replaces the reply's "Execution failed" of a Deno
// kernel (see denoSilentFailure) by the reason an npm: import of the code
// fails with, or says what is known when none fails. ctx is the
// execution's attention: an interrupt stops the search.
func (r *runner) explainDenoFailure(ctx context.Context) {
	x := r.x
	if !isJS(x.c.code) || r.errored || r.stopping || r.exitAsked || !denoSilentFailure(r.replyErr) || r.ks == nil {
		return
	}
	specs := npmImports(x.code)
	ctx, cancel := context.WithTimeout(ctx, importProbeTimeout)
	defer cancel()
	for _, spec := range specs {
		if !r.ks.usable() || ctx.Err() != nil {
			return
		}
		name, msg, err := r.probeImport(ctx, spec)
		if err != nil {
			x.eng.log.Warn("cannot find why Deno's kernel failed before running the code", "context_id", x.ContextID,
				"execution_id", x.ID, "import", spec, "error", err)
			return
		}
		if msg == "" {
			continue
		}
		value := fmt.Sprintf("Cannot import %q: %s", spec, msg)
		r.replyErr = &ErrorValue{Name: name, Value: value, Traceback: name + ": " + value}
		x.eng.log.Info("code failed before running: an npm import cannot be resolved", "context_id", x.ContextID,
			"language", x.Language, "execution_id", x.ID, "import", spec, "reason", msg)
		return
	}
	why := "a syntax error, or an npm: import it cannot resolve, stops it so"
	if len(specs) > 0 {
		why = "its npm: imports resolve now, so most likely a syntax error stopped it"
	}
	value := "Execution failed: Deno's kernel stopped before running the code and gave no reason (" + why + ")"
	r.replyErr = &ErrorValue{Name: "Error", Value: value, Traceback: "Error: " + value}
	x.eng.log.Info("code failed before running, and Deno's kernel gave no reason", "context_id", x.ContextID,
		"language", x.Language, "execution_id", x.ID, "npm_imports", len(specs))
}

// probeImport imports spec in the kernel, silently, and returns what that
// raised ("" when it imported).
func (r *runner) probeImport(ctx context.Context, spec string) (name, msg string, err error) {
	scheme, rest, _ := strings.Cut(spec, ":")
	parts, err := json.Marshal([]string{scheme + ":", rest})
	if err != nil {
		return "", "", err
	}
	code := strings.Replace(importProbe, "SPEC", string(parts), 1)
	line, err := r.x.c.silentAnswer(ctx, r.ks, code, importProbeMarker, "import probe")
	if err != nil {
		return "", "", err
	}
	var res []string
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		return "", "", fmt.Errorf("decode the import probe's answer: %w", err)
	}
	if len(res) != 2 {
		return "", "", nil
	}
	return res[0], res[1], nil
}
