package interpreter_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/interpreter"
)

// deafKernel is a kernel whose first start, marked by a file, answers
// kernel_info but never an execution (as a Deno kernel was seen doing on
// a loaded machine); later starts are ipykernel as usual.
const deafKernel = `import os, sys, time
marker, conn = sys.argv[1], sys.argv[2]
first = not os.path.exists(marker)
if first:
    open(marker, "w").close()
from ipykernel.ipkernel import IPythonKernel
from ipykernel.kernelapp import IPKernelApp
class Deaf(IPythonKernel):
    async def do_execute(self, *args, **kwargs):
        while first:
            time.sleep(1)
        return await super().do_execute(*args, **kwargs)
IPKernelApp.launch_instance(kernel_class=Deaf, argv=["-f", conn])
`

// A kernel started for a context that does not answer its setup within
// Options.SetupStall is deleted and another started: the context is
// created, on the second kernel, and runs code.
func TestSetupStallStartsAnother(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := filepath.Join(dir, "deaf.py")
	if err := os.WriteFile(script, []byte(deafKernel), 0o644); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "started-once")
	name := specName("deaf")
	installSpec(t, name, map[string]any{
		"argv":         []string{"/usr/bin/python3", script, marker, "{connection_file}"},
		"display_name": "deaf once",
		"language":     "python", // so that setup runs Python's snippets
	})
	eng := ownEngine(t, interpreter.Options{SetupStall: 3 * time.Second})
	ctx := t.Context()
	start := time.Now()
	c, err := eng.CreateContext(ctx, name, "")
	if err != nil {
		t.Fatalf("create after a deaf first kernel: %v", err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the deaf kernel never started: %v", err)
	}
	if out, _ := runOn(t, eng, c.ID, "print(6 * 7)"); out != "42\n" {
		t.Errorf("printed %q, want 42", out)
	}
	t.Logf("created in %s, the first kernel given up after %s", time.Since(start).Round(time.Millisecond), 3*time.Second)
}
