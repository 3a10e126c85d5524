// Package pkgtest builds what the package tests install, with the real
// tools and no registry: a virtual environment, wheels, R source packages,
// npm tarballs and Debian packages; and Kernels, a code engine stand-in
// that records what it is asked. Only tests import it.
package pkgtest

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/envd-dev/envd/internal/identity"
)

// Owner is who the package tests install as: the sandbox account `user`
// when the tests run as root (then the directories they make are its),
// else the tests' own account.
func Owner(tb testing.TB) *identity.User {
	tb.Helper()
	if os.Geteuid() == 0 {
		if u, err := identity.Lookup("user"); err == nil {
			return u
		}
	}
	u, err := identity.Current()
	if err != nil {
		tb.Fatal(err)
	}
	return u
}

// Dir returns a fresh directory that u owns and everyone may enter, in a
// directory everyone may enter; it is removed when the test ends.
func Dir(tb testing.TB, u *identity.User) string {
	tb.Helper()
	base, err := os.MkdirTemp("", "envd-pkgtest-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(base) })
	dir := filepath.Join(base, "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		tb.Fatal(err)
	}
	Chown(tb, dir, u)
	return dir
}

// Chown gives the tree at p to u (nothing to do when u is the tests' own
// account).
func Chown(tb testing.TB, p string, u *identity.User) {
	tb.Helper()
	if int(u.UID) == os.Geteuid() {
		return
	}
	err := filepath.Walk(p, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(u.UID), int(u.GID))
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// Run runs a command, failing the test with its output when it fails.
func Run(tb testing.TB, dir string, name string, args ...string) string {
	tb.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Python is Debian's python, which the sandbox's environment is built on.
const Python = "/usr/bin/python3"

// Venv makes a virtual environment as scripts/install-deps.sh does (from
// Debian's python3, with the system site packages) in a fresh directory,
// owned by u, and returns its directory.
func Venv(tb testing.TB, u *identity.User) string {
	tb.Helper()
	venv := filepath.Join(Dir(tb, u), "venv")
	Run(tb, "/", Python, "-m", "venv", "--system-site-packages", venv)
	Chown(tb, venv, u)
	return venv
}

// Wheel writes a pure-Python wheel of distribution dist at version, whose
// one module is module (its __init__.py holds VERSION), into dir, and
// returns its path. A wheel is a zip of the package and its dist-info,
// whose RECORD lists each file's hash.
func Wheel(tb testing.TB, dir, dist, version, module string) string {
	tb.Helper()
	return WheelRequiring(tb, dir, dist, version, module)
}

// WheelRequiring is Wheel, for a distribution that requires others
// (Requires-Dist: pip fetches them from its index).
func WheelRequiring(tb testing.TB, dir, dist, version, module string, requires ...string) string {
	tb.Helper()
	stem := strings.ReplaceAll(dist, "-", "_")
	info := fmt.Sprintf("%s-%s.dist-info", stem, version)
	var reqs strings.Builder
	for _, r := range requires {
		reqs.WriteString("Requires-Dist: " + r + "\n")
	}
	files := [][2]string{
		{module + "/__init__.py", fmt.Sprintf("VERSION = %q\n", version)},
		{info + "/METADATA", fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: envd test package\n%s", dist, version, reqs.String())},
		{info + "/WHEEL", "Wheel-Version: 1.0\nGenerator: envd-pkgtest\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
		{info + "/top_level.txt", module + "\n"},
	}
	var record strings.Builder
	for _, f := range files {
		sum := sha256.Sum256([]byte(f[1]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f[0], base64.RawURLEncoding.EncodeToString(sum[:]), len(f[1]))
	}
	fmt.Fprintf(&record, "%s/RECORD,,\n", info)
	files = append(files, [2]string{info + "/RECORD", record.String()})
	p := filepath.Join(dir, fmt.Sprintf("%s-%s-py3-none-any.whl", stem, version))
	f, err := os.Create(p)
	if err != nil {
		tb.Fatal(err)
	}
	z := zip.NewWriter(f)
	for _, file := range files {
		w, err := z.Create(file[0])
		if err == nil {
			_, err = w.Write([]byte(file[1]))
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
	if err := z.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return p
}

// RPackage builds the R source package name at version (one function,
// name_version(), returns the version) with R CMD build into dir, and
// returns the tarball's path.
func RPackage(tb testing.TB, dir, name, version string) string {
	tb.Helper()
	src := filepath.Join(dir, "src-"+version, name)
	if err := os.MkdirAll(filepath.Join(src, "R"), 0o755); err != nil {
		tb.Fatal(err)
	}
	write(tb, filepath.Join(src, "DESCRIPTION"), fmt.Sprintf("Package: %s\nVersion: %s\nTitle: An envd Test Package\n"+
		"Description: For envd's package tests.\nAuthor: envd\nMaintainer: envd <envd@example.invalid>\nLicense: MIT\n", name, version))
	write(tb, filepath.Join(src, "NAMESPACE"), "export(pkgtest_version)\n")
	write(tb, filepath.Join(src, "R", "version.R"), fmt.Sprintf("pkgtest_version <- function() %q\n", version))
	Run(tb, filepath.Dir(src), "R", "CMD", "build", "--no-build-vignettes", "--no-manual", name)
	out := filepath.Join(dir, fmt.Sprintf("%s_%s.tar.gz", name, version))
	if err := os.Rename(filepath.Join(filepath.Dir(src), filepath.Base(out)), out); err != nil {
		tb.Fatal(err)
	}
	return out
}

// NpmTarball packs the npm package name at version (an ES module whose
// export version is the version) with npm pack into dir, and returns its
// path.
func NpmTarball(tb testing.TB, dir, name, version string) string {
	tb.Helper()
	src := filepath.Join(dir, "npmsrc-"+version)
	pj, _ := json.Marshal(map[string]string{"name": name, "version": version, "type": "module", "main": "index.js"})
	write(tb, filepath.Join(src, "package.json"), string(pj))
	write(tb, filepath.Join(src, "index.js"), fmt.Sprintf("export const version = %q\n", version))
	Run(tb, src, "npm", "pack", "--silent", "--pack-destination", dir)
	return filepath.Join(dir, fmt.Sprintf("%s-%s.tgz", strings.ReplaceAll(strings.TrimPrefix(name, "@"), "/", "-"), version))
}

// Deb builds the Debian package name at version (Architecture: all; one
// file, /usr/share/NAME/version) with dpkg-deb --build into dir, and
// returns its path.
func Deb(tb testing.TB, dir, name, version string) string {
	tb.Helper()
	root := filepath.Join(dir, "deb-"+name+"-"+version)
	write(tb, filepath.Join(root, "DEBIAN", "control"), fmt.Sprintf("Package: %s\nVersion: %s\nArchitecture: all\n"+
		"Maintainer: envd <envd@example.invalid>\nSection: misc\nPriority: optional\nDescription: envd test package\n A package envd's tests install and purge.\n", name, version))
	write(tb, filepath.Join(root, "usr", "share", name, "version"), version+"\n")
	out := filepath.Join(dir, fmt.Sprintf("%s_%s_all.deb", name, version))
	Run(tb, dir, "dpkg-deb", "--root-owner-group", "--build", root, out)
	return out
}

func write(tb testing.TB, p, content string) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// Kernels stands in for the code engine: Loaded answers from Set, and
// both record their calls.
type Kernels struct {
	mu      sync.Mutex
	loaded  map[string]map[string][]string // lang -> context id -> modules loaded
	asked   map[string][][]string          // lang -> the modules of each Loaded call
	notices map[string][]string            // context id -> texts
}

// Set says that context id, of language lang, has loaded modules.
func (k *Kernels) Set(lang, id string, modules ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.loaded == nil {
		k.loaded = map[string]map[string][]string{}
	}
	if k.loaded[lang] == nil {
		k.loaded[lang] = map[string][]string{}
	}
	k.loaded[lang][id] = modules
}

// Loaded answers as the engine does: each context of lang that loaded one
// of modules, with those it loaded.
func (k *Kernels) Loaded(_ context.Context, lang string, modules []string) (map[string][]string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.asked == nil {
		k.asked = map[string][][]string{}
	}
	k.asked[lang] = append(k.asked[lang], slices.Clone(modules))
	out := map[string][]string{}
	for id, mods := range k.loaded[lang] {
		for _, m := range mods {
			if slices.Contains(modules, m) {
				out[id] = append(out[id], m)
			}
		}
	}
	return out, nil
}

// Notice records text for context id.
func (k *Kernels) Notice(id, text string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.notices == nil {
		k.notices = map[string][]string{}
	}
	k.notices[id] = append(k.notices[id], text)
	return nil
}

// Notices returns, and forgets, the texts noticed to context id.
func (k *Kernels) Notices(id string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := k.notices[id]
	delete(k.notices, id)
	return out
}

// Asked returns, and forgets, the modules of each Loaded call for lang.
func (k *Kernels) Asked(lang string) [][]string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := k.asked[lang]
	delete(k.asked, lang)
	return out
}
