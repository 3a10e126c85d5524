package startup

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// A kernel starts in its context's working directory, which sandbox code
// may be able to write (the default user's home is the default), while
// envd may run the kernel as root. Whatever a kernel reads from its
// working directory while it starts runs before envd or the caller has
// run anything: each language's such files are turned off here.
//   - Python kernels (ipykernel, envd's bash and Java wrappers) run
//     `python -m`, which puts the working directory first on sys.path: a
//     planted ipykernel_launcher.py or json.py would run. -P (safePath)
//     leaves it out; IPython itself still adds the working directory once
//     started, so code imports the modules beside it as in any notebook.
//   - R sources .Rprofile and reads .Renviron from the working directory
//     before the home's, and restores .RData (whose .First runs): the ir
//     kernelspec here points R_PROFILE_USER and R_ENVIRON_USER at the home's
//     and adds --no-restore.
//   - The Java agent's class path is its own directory, not ".".

// safePath is python's -P: no unsafe path (the working directory, the
// script's directory) prepended to sys.path.
const safePath = "-P"

// RKernelName is the kernelspec name of IRkernel's R kernel.
const RKernelName = "ir"

// systemKernelDirs are where Debian's packages install kernelspecs.
var systemKernelDirs = []string{"/usr/local/share/jupyter/kernels", "/usr/share/jupyter/kernels"}

// systemKernelSpec returns the installed kernelspec name from the system
// directories (first found), or nil.
func systemKernelSpec(name string) map[string]any {
	for _, dir := range systemKernelDirs {
		b, err := os.ReadFile(filepath.Join(dir, name, "kernel.json"))
		if err != nil {
			continue
		}
		var spec map[string]any
		if json.Unmarshal(b, &spec) == nil {
			return spec
		}
	}
	return nil
}

// addRKernel adds an ir kernelspec to want: the installed one (IRkernel's
// from Debian) with R's startup files taken from the home only and the
// workspace not restored. Without an installed ir kernelspec, none.
func addRKernel(want map[string][]byte) error {
	spec := systemKernelSpec(RKernelName)
	if spec == nil {
		return nil
	}
	b, err := rKernelSpec(spec)
	if err != nil {
		return err
	}
	want["kernels/"+RKernelName+"/kernel.json"] = b
	return nil
}

func rKernelSpec(spec map[string]any) ([]byte, error) {
	raw, _ := spec["argv"].([]any)
	var argv []string
	for _, a := range raw {
		s, ok := a.(string)
		if !ok {
			return nil, fmt.Errorf("startup: ir kernelspec: argv holds %v", a)
		}
		argv = append(argv, s)
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("startup: ir kernelspec has no argv")
	}
	if !slices.Contains(argv, "--no-restore") && !slices.Contains(argv, "--vanilla") {
		argv = slices.Insert(argv, 1, "--no-restore")
	}
	spec["argv"] = argv
	env, _ := spec["env"].(map[string]any)
	if env == nil {
		env = map[string]any{}
	}
	// R expands the tilde itself, for whichever account runs the kernel.
	env["R_PROFILE_USER"] = "~/.Rprofile"
	env["R_ENVIRON_USER"] = "~/.Renviron"
	spec["env"] = env
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("startup: encode ir kernelspec: %w", err)
	}
	return append(b, '\n'), nil
}
