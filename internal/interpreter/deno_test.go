package interpreter_test

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// denoSpec is Deno's kernelspec as installed (scripts/install-deps.sh),
// with env added to the kernel's environment.
func denoSpec(t *testing.T, env map[string]string) map[string]any {
	t.Helper()
	for _, dir := range []string{"/usr/local/share/jupyter/kernels/deno", "/usr/share/jupyter/kernels/deno"} {
		b, err := os.ReadFile(filepath.Join(dir, "kernel.json"))
		if err != nil {
			continue
		}
		var spec map[string]any
		if err := json.Unmarshal(b, &spec); err != nil {
			t.Fatal(err)
		}
		all := map[string]any{}
		if e, ok := spec["env"].(map[string]any); ok {
			all = e
		}
		for k, v := range env {
			all[k] = v
		}
		spec["env"] = all
		spec["display_name"] = "Deno (test)"
		return spec
	}
	t.Fatalf("no Deno kernelspec: %s", installHint)
	return nil
}

// TestDenoImportReason: an npm: import Deno's kernel cannot resolve (its
// registry does not answer) ends with the reason, not Deno's bare
// "Execution failed"; a URL import's reason is Deno's own; code that fails
// before running with no npm: import says what is known.
func TestDenoImportReason(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing answers there
	name := specName("deno")
	installSpec(t, name, denoSpec(t, map[string]string{"NPM_CONFIG_REGISTRY": "http://" + closed + "/"}))
	removeDefaultAtCleanup(t, name)
	c := newContext(t, name, "")

	r := run(t, c.ID, `import x from "npm:left-pad-envd-absent"; console.log(x)`)
	e := r.lastError()
	if e == nil || e.Name != "TypeError" || !strings.HasPrefix(e.Value, `Cannot import "npm:left-pad-envd-absent": `) ||
		!strings.Contains(e.Value, "http://"+closed+"/left-pad-envd-absent") || !strings.Contains(e.Value, "Connection refused") || e.Traceback == "" {
		t.Errorf("npm: import: %+v", r.errors)
	}
	if len(r.errors) != 1 || r.out() != "" {
		t.Errorf("npm: import: errors %+v, stdout %q (the probe must be silent)", r.errors, r.out())
	}

	r = run(t, c.ID, `import "http://`+closed+`/x.js"`)
	if e := r.lastError(); e == nil || e.Name != "TypeError" || !strings.Contains(e.Value, "Import 'http://"+closed+"/x.js' failed") ||
		!strings.Contains(e.Value, "Connection refused") {
		t.Errorf("URL import: %+v", r.errors)
	}

	r = run(t, c.ID, `const x: = 1`)
	if e := r.lastError(); e == nil || !strings.HasPrefix(e.Value, "Execution failed: Deno's kernel stopped before running the code and gave no reason") {
		t.Errorf("syntax error: %+v", r.errors)
	}

	// The context is usable still, and kept its state.
	run(t, c.ID, `var kept = 41`).mustOK(t)
	if got := strings.TrimSpace(run(t, c.ID, `console.log(kept + 1)`).mustOK(t).out()); got != "42" {
		t.Errorf("after the failures: %q", got)
	}
}
