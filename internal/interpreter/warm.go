package interpreter

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/envd-dev/envd/internal/jupyter/startup"
)

// WarmKernels is how many prestarted kernels the engine keeps ready per
// language (normalized: python, r, bash), so that creating a context, or
// the first use of a language's default, takes a kernel that is already
// up instead of waiting for one to start (see pool). A language missing or
// at 0 has none.
//
// Memory: each one is a whole idle kernel. Measured RSS: a python3
// kernel with envd's startup files about 70 MB, an R kernel about 90 MB,
// envd's bash kernel (a Python kernel driving a bash) about 70 MB.
type WarmKernels map[string]int

// MaxWarmKernels bounds the prestarted kernels of one language.
const MaxWarmKernels = 8

// DefaultWarmKernels is envd's default: one Python kernel.
func DefaultWarmKernels() WarmKernels { return WarmKernels{Python: 1} }

// ParseWarmKernels parses "language=count" items separated by commas
// ("python=1,r=0"); "" is none. Languages go by envd's names and aliases
// (py, python3, ir, sh); a count is a whole number from 0 to
// MaxWarmKernels. Only languages whose kernels envd moves to a context's
// directory and environment after their start can be prestarted: python,
// r and bash. JavaScript, TypeScript and Java are refused above 0, with
// the reason.
func ParseWarmKernels(s string) (WarmKernels, error) {
	out := WarmKernels{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, count, ok := strings.Cut(item, "=")
		name, count = strings.TrimSpace(name), strings.TrimSpace(count)
		if !ok || name == "" {
			return nil, fmt.Errorf("%s: want language=count items separated by commas, e.g. python=1,r=0", item)
		}
		n, err := strconv.Atoi(count)
		if err != nil || n < 0 || n > MaxWarmKernels {
			return nil, fmt.Errorf("%s: the count must be a whole number from 0 to %d", item, MaxWarmKernels)
		}
		lang, err := warmLanguage(name)
		if err != nil && (n > 0 || errors.Is(err, errUnknownWarm)) {
			return nil, fmt.Errorf("%s: %w", item, err)
		}
		if _, dup := out[lang]; dup {
			return nil, fmt.Errorf("%s: %s is given twice", item, lang)
		}
		out[lang] = n
	}
	return out, nil
}

// String is the parseable form, sorted by language ("python=1,r=0").
func (w WarmKernels) String() string {
	items := make([]string, 0, len(w))
	for _, lang := range slices.Sorted(maps.Keys(w)) {
		items = append(items, lang+"="+strconv.Itoa(w[lang]))
	}
	return strings.Join(items, ",")
}

// Validate reports the first language that cannot be prestarted or count
// out of range, as ParseWarmKernels would.
func (w WarmKernels) Validate() error {
	_, err := ParseWarmKernels(w.String())
	return err
}

// wanted returns the languages to keep kernels of, normalized, with their
// counts (zeros dropped). w must be valid.
func (w WarmKernels) wanted() map[string]int {
	out := map[string]int{}
	for name, n := range w {
		if lang, err := warmLanguage(name); err == nil && n > 0 {
			out[lang] += n
		}
	}
	return out
}

var errUnknownWarm = errors.New("unknown language")

// warmLanguage normalizes a language name of WarmKernels and says why its
// kernels cannot be prestarted, if they cannot.
func warmLanguage(name string) (string, error) {
	lang := NormalizeLanguage(name)
	for _, b := range builtins {
		if lang == b.kernel {
			lang = b.name // python3, ir, deno: the kernelspecs' names
		}
	}
	switch lang {
	case Python, R, Bash:
		return lang, nil
	case JavaScript, TypeScript:
		return lang, errors.New("JavaScript and TypeScript kernels (Deno) cannot be prestarted: Deno resolves npm " +
			"packages and its node_modules from the directory it starts in, and a prestarted kernel starts before its " +
			"context's directory is known")
	case "java":
		//lint:ignore ST1005 Java is the language's name, which starts with a capital wherever it stands.
		return lang, errors.New("Java kernels cannot be prestarted: their JVMs keep the directory they start in " +
			"(setting user.dir does not move them), and a prestarted kernel starts before its context's directory is known")
	}
	return lang, fmt.Errorf("%w %q: kernels can be prestarted for python, r and bash", errUnknownWarm, name)
}

// movedCode is what a prestarted kernel of language code (python, r,
// bash) runs, before setup's own chdir, each time it starts in warmDir
// (prestarted, or restarted by Jupyter) to become what a kernel started
// in dir is after its setup:
//
//	python  IPython records its start directory: the directory history
//	        (_dh, %dhist) and the shell's starting_dir
//	r       R's launcher, a shell script, exports its start directory as PWD
//	bash    cd sets OLDPWD: a fresh kernel's setup moves from dir to dir
//
// Each also changes to dir first, so that setup's chdir then moves from
// dir to dir, as in a fresh kernel. The path travels as JSON, as in every
// snippet of package startup.
func movedCode(code, dir string) (string, error) {
	chdir, err := startup.ChdirCode(code, dir)
	if err != nil {
		return "", err
	}
	switch code {
	case Python:
		return chdir + "\n" + `if "_dh" in globals() and "get_ipython" in globals(): ` +
			`_dh[:] = [__import__("pathlib").Path.cwd()]; get_ipython().starting_dir = __import__("os").getcwd()`, nil
	case R:
		pwd, err := startup.SetGlobalEnvCode(code, map[string]*string{"PWD": &dir})
		if err != nil {
			return "", err
		}
		return chdir + "\n" + pwd, nil
	}
	return chdir, nil
}
