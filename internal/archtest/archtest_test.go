package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// module is the module's path: every rule speaks of paths relative to it.
const module = "github.com/envd-dev/envd"

// domains are the domain packages: what envd does, without the wire. Each
// is the package itself; the adapters and test helpers beside it
// (interpreter/codeconnect, ports/portsconnect, packages/pkgtest, ...) are
// not domains.
var domains = []string{
	"internal/process",
	"internal/filesystem",
	"internal/interpreter",
	"internal/jupyter",
	"internal/packages",
	"internal/ports",
	"internal/cgroup",
	"internal/outbuf",
	"internal/reaper",
	"internal/identity",
	"internal/shell",
}

// httpAllowed lists the domain packages that may import net/http, and why:
// each is a client of an HTTP peer inside the sandbox, never a server or a
// wire adapter. An entry whose package no longer imports net/http fails the
// test: the list shrinks with the code.
var httpAllowed = map[string]string{
	"internal/jupyter":  "an HTTP client of the local Jupyter server: its REST API, and the handshake of a kernel's WebSocket",
	"internal/packages": "reach.go tells whether a package index is reachable through the configured proxy: it writes a CONNECT (or, for a plain http index, HEAD) request to the proxy and reads the status of its answer",
}

// public are the packages that must stand on public packages alone: the
// client and everything under it, and envctl (which is what a user of the
// client would write). A path ending in "/..." is that package and every
// package under it.
var public = []string{
	"client/...",
	"cmd/envctl",
}

// pkg is what the rules need of one package of the module.
type pkg struct {
	path string   // relative to the module: "internal/process", "client"
	name string   // the package clause's name of the files checked for a doc
	imps []string // the imports of its non-test files, full paths
	// docs are the package doc comments of the files checked for one
	// (non-test files; a test-only package's test files), as text, one
	// per file that has one, in file name order.
	docs []string
	// testOnly says the package has no non-test Go file: docs come from its
	// tests.
	testOnly bool
}

// forbiddenInDomain says why a domain package may not import imp, or ""
// when it may.
func forbiddenInDomain(domain, imp string) string {
	switch {
	case imp == "connectrpc.com/connect" || strings.HasPrefix(imp, "connectrpc.com/connect/"):
		return "Connect belongs in the domain's adapter"
	case strings.HasPrefix(imp, module+"/gen/"):
		return "the generated wire types belong in the domain's adapter"
	case imp == module+"/internal/server" || strings.HasPrefix(imp, module+"/internal/server/"):
		return "the HTTP front is built around the domains, not imported by them"
	case imp == "net/http" || strings.HasPrefix(imp, "net/http/"):
		if _, ok := httpAllowed[domain]; ok && imp == "net/http" {
			return ""
		}
		return "HTTP belongs in the domain's adapter (or add the package to httpAllowed with its reason, if it is an HTTP client)"
	}
	return ""
}

// checkDomains applies the domain rule: no domain package imports the
// wire. It also fails on a domain package or an allowlist entry that no
// longer exists, so that the rule cannot pass on nothing.
func checkDomains(pkgs map[string]*pkg) []string {
	var bad []string
	for _, d := range domains {
		p, ok := pkgs[d]
		if !ok {
			bad = append(bad, fmt.Sprintf("%s: domain package not found (moved or renamed? update domains in archtest_test.go)", d))
			continue
		}
		for _, imp := range p.imps {
			if why := forbiddenInDomain(d, imp); why != "" {
				bad = append(bad, fmt.Sprintf("%s: a domain package imports %s: %s", d, imp, why))
			}
		}
	}
	for d := range httpAllowed {
		if !slices.Contains(domains, d) {
			bad = append(bad, fmt.Sprintf("%s: in httpAllowed but not a domain package", d))
			continue
		}
		if p, ok := pkgs[d]; ok && !slices.Contains(p.imps, "net/http") {
			bad = append(bad, fmt.Sprintf("%s: in httpAllowed but no longer imports net/http: remove its entry", d))
		}
	}
	slices.Sort(bad)
	return bad
}

// isPublic says whether the package at path must stand on public packages.
func isPublic(path string) bool {
	for _, p := range public {
		if root, ok := strings.CutSuffix(p, "/..."); ok {
			if path == root || strings.HasPrefix(path, root+"/") {
				return true
			}
		} else if path == p {
			return true
		}
	}
	return false
}

// isInternal says whether the full import path imp is one of envd's
// internal packages.
func isInternal(imp string) bool {
	return strings.HasPrefix(imp, module+"/internal/")
}

// checkPublic applies the public rule: no package of client/... or
// cmd/envctl imports a package under internal/, directly or through other
// packages of the module (the chain is in the message).
func checkPublic(pkgs map[string]*pkg) []string {
	var bad []string
	for _, want := range public {
		if _, ok := pkgs[strings.TrimSuffix(want, "/...")]; !ok {
			bad = append(bad, fmt.Sprintf("%s: public package not found (moved or renamed? update public in archtest_test.go)", want))
		}
	}
	for path, p := range pkgs {
		if !isPublic(path) {
			continue
		}
		// Breadth first through the module's packages that are not public,
		// so that each internal package is reported with a shortest chain.
		via := map[string]string{path: ""} // package -> the one that imported it
		queue := []string{path}
		reported := map[string]bool{}
		for len(queue) > 0 {
			cur := queue[0]
			queue = queue[1:]
			q, ok := pkgs[cur]
			if !ok {
				continue
			}
			for _, imp := range q.imps {
				rel, inModule := strings.CutPrefix(imp, module+"/")
				if !inModule {
					continue
				}
				if isInternal(imp) {
					if !reported[imp] {
						reported[imp] = true
						bad = append(bad, fmt.Sprintf("%s: a public package imports %s%s: client/... and cmd/envctl must stand on public packages (move what they need out of internal/)", p.path, imp, chain(via, cur)))
					}
					continue
				}
				// Another public package is checked on its own: a chain
				// through it is reported there, once.
				if _, seen := via[rel]; !seen && !isPublic(rel) {
					via[rel] = cur
					queue = append(queue, rel)
				}
			}
		}
	}
	slices.Sort(bad)
	return bad
}

// chain is " (through a -> b)" for the packages between a public package
// and cur, cur included, or "" when cur is the public package itself.
func chain(via map[string]string, cur string) string {
	var path []string
	for p := cur; via[p] != ""; p = via[p] {
		path = append(path, p)
	}
	if len(path) == 0 {
		return ""
	}
	slices.Reverse(path)
	return " (through " + strings.Join(path, " -> ") + ")"
}

// isGenerated says whether the package at path is generated code (gen/).
func isGenerated(path string) bool {
	return path == "gen" || strings.HasPrefix(path, "gen/")
}

// checkDocs applies the doc rule: every package but the generated ones
// has a package doc comment that starts "Package <name>" ("Command <dir>"
// for a main package).
func checkDocs(pkgs map[string]*pkg) []string {
	var bad []string
	for path, p := range pkgs {
		if isGenerated(path) {
			continue
		}
		where, hint := "its non-test files", "in doc.go or atop the main file"
		if p.testOnly {
			where, hint = "its test files (it has no other)", "atop its main test file"
		}
		want := []string{"Package " + p.name}
		switch {
		case p.name == "main":
			want = []string{"Command " + filepath.Base(path)}
		case p.testOnly:
			// Its files may be package x, or x_test, or both.
			base := strings.TrimSuffix(p.name, "_test")
			want = []string{"Package " + base + "_test", "Package " + base}
		}
		if len(p.docs) == 0 {
			bad = append(bad, fmt.Sprintf("%s: no package doc comment in %s: write one (\"// %s ...\"), %s", path, where, want[0], hint))
			continue
		}
		if d := p.docs[0]; !slices.ContainsFunc(want, func(w string) bool { return startsWithWord(d, w) }) {
			first, _, _ := strings.Cut(d, "\n")
			bad = append(bad, fmt.Sprintf("%s: the package doc comment starts %q; want %q", path, first, want[0]+" ..."))
		}
	}
	slices.Sort(bad)
	return bad
}

// startsWithWord says whether s starts with prefix followed by a space, a
// newline, or its end.
func startsWithWord(s, prefix string) bool {
	rest, ok := strings.CutPrefix(s, prefix)
	return ok && (rest == "" || rest[0] == ' ' || rest[0] == '\n')
}

// listed is what `go list -json` says of a package.
type listed struct {
	ImportPath   string
	Dir          string
	GoFiles      []string
	CgoFiles     []string
	TestGoFiles  []string
	XTestGoFiles []string
	Error        *struct{ Err string }
}

// load lists the module's packages with go list (which applies the build
// constraints) and parses the files of each itself: the imports and doc
// comments come from files this test opens, so that go test's cache of its
// result is invalidated when any of them changes.
func load() (map[string]*pkg, error) {
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Dir,GoFiles,CgoFiles,TestGoFiles,XTestGoFiles,Error", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w\n%s", err, stderr.Bytes())
	}
	pkgs := map[string]*pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var l listed
		if err := dec.Decode(&l); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("decode go list's output: %w", err)
		}
		rel, ok := strings.CutPrefix(l.ImportPath, module+"/")
		if !ok {
			if l.ImportPath == module {
				rel = "."
			} else {
				return nil, fmt.Errorf("go list: %s is not in %s", l.ImportPath, module)
			}
		}
		// A package go list could not read (a file that does not parse)
		// is go build's to report; its rules are checked once it builds.
		if l.Error != nil && len(l.GoFiles)+len(l.CgoFiles)+len(l.TestGoFiles)+len(l.XTestGoFiles) == 0 {
			continue
		}
		// Reading the directory lets go test's cache see a file added or
		// removed.
		if _, err := os.ReadDir(l.Dir); err != nil {
			return nil, fmt.Errorf("%s: %w", rel, err)
		}
		p := &pkg{path: rel}
		files := append(slices.Clone(l.GoFiles), l.CgoFiles...)
		if len(files) == 0 {
			p.testOnly = true
			files = append(slices.Clone(l.TestGoFiles), l.XTestGoFiles...)
		}
		slices.Sort(files)
		fset := token.NewFileSet()
		for _, name := range files {
			f, err := parser.ParseFile(fset, filepath.Join(l.Dir, name), nil, parser.ImportsOnly|parser.ParseComments)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", rel, err)
			}
			if p.name == "" {
				p.name = f.Name.Name
			}
			if f.Doc != nil {
				p.docs = append(p.docs, f.Doc.Text())
			}
			if p.testOnly {
				continue // a test's imports are its own
			}
			for _, is := range f.Imports {
				imp, err := strconv.Unquote(is.Path.Value)
				if err != nil {
					return nil, fmt.Errorf("%s: import %s: %w", rel, is.Path.Value, err)
				}
				if !slices.Contains(p.imps, imp) {
					p.imps = append(p.imps, imp)
				}
			}
		}
		slices.Sort(p.imps)
		pkgs[rel] = p
	}
	if len(pkgs) < 10 {
		return nil, fmt.Errorf("go list found only %d packages in %s", len(pkgs), module)
	}
	return pkgs, nil
}

var (
	loadOnce sync.Once
	loaded   map[string]*pkg
	loadErr  error
)

// modulePackages is the module's packages, loaded once for every test.
func modulePackages(t *testing.T) map[string]*pkg {
	t.Helper()
	loadOnce.Do(func() { loaded, loadErr = load() })
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	return loaded
}

func report(t *testing.T, bad []string) {
	t.Helper()
	for _, b := range bad {
		t.Error(b)
	}
}

func TestDomainsDoNotImportTheWire(t *testing.T) {
	t.Parallel()
	report(t, checkDomains(modulePackages(t)))
}

func TestPublicPackagesDoNotImportInternal(t *testing.T) {
	t.Parallel()
	report(t, checkPublic(modulePackages(t)))
}

func TestEveryPackageHasADoc(t *testing.T) {
	t.Parallel()
	report(t, checkDocs(modulePackages(t)))
}

// fakeModule is a small module that keeps every rule, for the checkers'
// own tests to break one at a time.
func fakeModule() map[string]*pkg {
	// m gives the fake module's own packages among imports their full path.
	m := func(s ...string) []string {
		for i := range s {
			if strings.HasPrefix(s[i], "internal/") || strings.HasPrefix(s[i], "gen/") || s[i] == "wirecodec" || s[i] == "client" {
				s[i] = module + "/" + s[i]
			}
		}
		return s
	}
	pkgs := map[string]*pkg{
		"client":               {imps: m("connectrpc.com/connect", "gen/process", "net/http", "wirecodec"), docs: []string{"Package client is the client.\n"}},
		"client/sub":           {imps: m("client"), docs: []string{"Package sub is a part of the client.\n"}},
		"wirecodec":            {imps: m("gen/process"), docs: []string{"Package wirecodec is a codec.\n"}},
		"cmd/envctl":           {name: "main", imps: m("client", "flag"), docs: []string{"Command envctl talks to envd.\n"}},
		"internal/jupyter":     {imps: m("net/http", "internal/outbuf"), docs: []string{"Package jupyter runs Jupyter.\n"}},
		"internal/packages":    {imps: m("net/http"), docs: []string{"Package packages manages packages.\n"}},
		"internal/ports/conn":  {imps: m("connectrpc.com/connect", "gen/ports", "internal/ports", "internal/server"), docs: []string{"Package conn is the adapter.\n"}},
		"internal/server":      {imps: m("net/http"), docs: []string{"Package server serves.\n"}},
		"gen/process":          {},
		"test/e2e":             {name: "e2e_test", testOnly: true, docs: []string{"Package e2e_test runs the binary.\n"}},
		"internal/interpreter": {imps: m("internal/jupyter"), docs: []string{"Package interpreter runs code.\n", "Package interpreter, again.\n"}},
	}
	for _, d := range domains {
		if _, ok := pkgs[d]; !ok {
			pkgs[d] = &pkg{imps: m("context", "errors", "internal/outbuf"), docs: []string{"Package " + filepath.Base(d) + " is a domain.\n"}}
		}
	}
	for path, p := range pkgs {
		p.path = path
		if p.name == "" {
			p.name = filepath.Base(path)
		}
	}
	return pkgs
}

func TestCheckers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(pkgs map[string]*pkg)
		check  func(map[string]*pkg) []string
		want   []string // each a substring of one violation, in order
	}{
		{
			name:   "the fake module keeps the domain rule",
			mutate: func(map[string]*pkg) {},
			check:  checkDomains,
		},
		{
			name:   "the fake module keeps the public rule",
			mutate: func(map[string]*pkg) {},
			check:  checkPublic,
		},
		{
			name:   "the fake module keeps the doc rule",
			mutate: func(map[string]*pkg) {},
			check:  checkDocs,
		},
		{
			name: "a domain imports connect, gen and the server",
			mutate: func(pkgs map[string]*pkg) {
				pkgs["internal/process"].imps = append(pkgs["internal/process"].imps, "connectrpc.com/connect", module+"/gen/process/processconnect", module+"/internal/server")
			},
			check: checkDomains,
			want: []string{
				"internal/process: a domain package imports connectrpc.com/connect",
				"internal/process: a domain package imports github.com/envd-dev/envd/gen/process/processconnect",
				"internal/process: a domain package imports github.com/envd-dev/envd/internal/server",
			},
		},
		{
			name: "a domain outside the allowlist imports net/http",
			mutate: func(pkgs map[string]*pkg) {
				pkgs["internal/filesystem"].imps = append(pkgs["internal/filesystem"].imps, "net/http")
			},
			check: checkDomains,
			want:  []string{"internal/filesystem: a domain package imports net/http"},
		},
		{
			name: "an allowlisted domain imports more of net/http than net/http",
			mutate: func(pkgs map[string]*pkg) {
				pkgs["internal/jupyter"].imps = append(pkgs["internal/jupyter"].imps, "net/http/httputil")
			},
			check: checkDomains,
			want:  []string{"internal/jupyter: a domain package imports net/http/httputil"},
		},
		{
			name: "a stale allowlist entry",
			mutate: func(pkgs map[string]*pkg) {
				pkgs["internal/packages"].imps = nil
			},
			check: checkDomains,
			want:  []string{"internal/packages: in httpAllowed but no longer imports net/http"},
		},
		{
			name:   "a domain package went away",
			mutate: func(pkgs map[string]*pkg) { delete(pkgs, "internal/reaper") },
			check:  checkDomains,
			want:   []string{"internal/reaper: domain package not found"},
		},
		{
			name: "an adapter beside a domain is not a domain",
			mutate: func(pkgs map[string]*pkg) {
				pkgs["internal/process/procconnect"] = &pkg{path: "internal/process/procconnect", imps: []string{"connectrpc.com/connect", "net/http"}}
			},
			check: checkDomains,
		},
		{
			name: "the client imports an internal package",
			mutate: func(pkgs map[string]*pkg) {
				pkgs["client"].imps = append(pkgs["client"].imps, module+"/internal/relay")
			},
			check: checkPublic,
			want:  []string{"client: a public package imports github.com/envd-dev/envd/internal/relay: "},
		},
		{
			name: "a package under client imports an internal package",
			mutate: func(pkgs map[string]*pkg) {
				pkgs["client/sub"].imps = append(pkgs["client/sub"].imps, module+"/internal/errkind")
			},
			check: checkPublic,
			want:  []string{"client/sub: a public package imports github.com/envd-dev/envd/internal/errkind: "},
		},
		{
			name: "the client imports an internal package through a public one",
			mutate: func(pkgs map[string]*pkg) {
				pkgs["wirecodec"].imps = append(pkgs["wirecodec"].imps, module+"/internal/outbuf")
			},
			check: checkPublic,
			want:  []string{"client: a public package imports github.com/envd-dev/envd/internal/outbuf (through wirecodec)"},
		},
		{
			name: "a chain of public packages",
			mutate: func(pkgs map[string]*pkg) {
				pkgs["wirecodec"].imps = append(pkgs["wirecodec"].imps, module+"/pool")
				pkgs["pool"] = &pkg{path: "pool", imps: []string{module + "/internal/outbuf"}}
			},
			check: checkPublic,
			want:  []string{"client: a public package imports github.com/envd-dev/envd/internal/outbuf (through wirecodec -> pool)"},
		},
		{
			name: "the internal packages' own imports of internal/ are theirs",
			mutate: func(pkgs map[string]*pkg) {
				pkgs["internal/server"].imps = append(pkgs["internal/server"].imps, module+"/internal/auth")
			},
			check: checkPublic,
		},
		{
			name:   "envctl went away",
			mutate: func(pkgs map[string]*pkg) { delete(pkgs, "cmd/envctl") },
			check:  checkPublic,
			want:   []string{"cmd/envctl: public package not found"},
		},
		{
			name: "a package without a doc comment",
			mutate: func(pkgs map[string]*pkg) {
				pkgs["internal/outbuf"].docs = nil
			},
			check: checkDocs,
			want:  []string{`internal/outbuf: no package doc comment in its non-test files: write one ("// Package outbuf ...")`},
		},
		{
			name: "a test-only package without a doc comment",
			mutate: func(pkgs map[string]*pkg) {
				pkgs["test/e2e"].docs = nil
			},
			check: checkDocs,
			want:  []string{`test/e2e: no package doc comment in its test files (it has no other): write one ("// Package e2e_test ..."), atop its main test file`},
		},
		{
			name: "a doc comment that does not name the package",
			mutate: func(pkgs map[string]*pkg) {
				pkgs["internal/cgroup"].docs = []string{"Cgroups, made and joined.\n"}
				pkgs["internal/identity"].docs = []string{"Package identityx is another.\n"}
			},
			check: checkDocs,
			want: []string{
				`internal/cgroup: the package doc comment starts "Cgroups, made and joined."; want "Package cgroup ..."`,
				`internal/identity: the package doc comment starts "Package identityx is another."; want "Package identity ..."`,
			},
		},
		{
			name: "a command documented as a package",
			mutate: func(pkgs map[string]*pkg) {
				pkgs["cmd/envctl"].docs = []string{"Package main is envctl.\n"}
			},
			check: checkDocs,
			want:  []string{`cmd/envctl: the package doc comment starts "Package main is envctl."; want "Command envctl ..."`},
		},
		{
			name: "generated packages need no doc",
			mutate: func(pkgs map[string]*pkg) {
				pkgs["gen/envd/ports/v1"] = &pkg{path: "gen/envd/ports/v1", name: "portsv1"}
			},
			check: checkDocs,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pkgs := fakeModule()
			tt.mutate(pkgs)
			got := tt.check(pkgs)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d violations, want %d:\n%s", len(got), len(tt.want), strings.Join(got, "\n"))
			}
			for i := range got {
				if !strings.Contains(got[i], tt.want[i]) {
					t.Errorf("violation %d is %q; want it to contain %q", i, got[i], tt.want[i])
				}
			}
		})
	}
}
