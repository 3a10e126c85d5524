package startup_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/envd-dev/envd/internal/testutil"
)

// prebuiltProbe prints, as JSON, the agent's command line that kernel.py
// chooses for each prebuilt root given (argv: java, then roots), and, with
// "run ROOT", starts the agent from ROOT's choice and runs 1+1 in it.
const prebuiltProbe = `
import json, os, sys
import envd_java_kernel.kernel as k
java = sys.argv[1]
if sys.argv[2] == "run":
    argv = k.agent_argv(java, prebuilt=sys.argv[3])
    a = k.Agent(argv, os.getcwd(), dict(os.environ))
    a.wait_ready(240, lambda: False)
    a.send(b"X", b"1+1")
    value = None
    while True:
        frame = a.read_frame(240)
        if frame is None:
            sys.exit("no answer from the agent")
        kind, data = frame
        if kind == b"v":
            value = data.decode()
        if kind == b"d":
            break
    a.close()
    print(json.dumps({"argv": argv, "value": value, "status": data.decode()}))
else:
    print(json.dumps({root: k.agent_argv(java, prebuilt=root) for root in sys.argv[2:]}))
`

// TestJavaKernelPrebuilt checks when the Java kernel runs the agent that
// scripts/install-deps.sh prebuilt (a jar and class data archives in
// PREBUILT/KEY, see kernel.py): only for its own source and java, and only
// when root alone can change them; else it compiles EnvdJShell.java as
// without them. Archives the JVM cannot use (here: not archives at all) are
// ignored by the JVM, and the agent still runs.
func TestJavaKernelPrebuilt(t *testing.T) {
	t.Parallel()
	l := requireJava(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: the prebuilt agent is used only when root's")
	}
	src, err := os.ReadFile(filepath.Join(l.PythonPath, "envd_java_kernel", "EnvdJShell.java"))
	if err != nil {
		t.Fatal(err)
	}
	realJava, err := filepath.EvalSymlinks(l.Java)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(append(append(slices.Clone(src), 0), realJava...))
	key := hex.EncodeToString(sum[:])

	// The jar, as install-deps.sh builds it.
	work := t.TempDir()
	bin := filepath.Dir(l.Java)
	classes := filepath.Join(work, "classes")
	javaSrc := filepath.Join(l.PythonPath, "envd_java_kernel", "EnvdJShell.java")
	if out, err := exec.Command(filepath.Join(bin, "javac"), "-nowarn", "-d", classes, javaSrc).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	jar := filepath.Join(work, "envd-jshell.jar")
	if out, err := exec.Command(filepath.Join(bin, "jar"), "--create", "--file", jar, "-C", classes, ".").CombinedOutput(); err != nil {
		t.Fatalf("jar: %v\n%s", err, out)
	}
	jarData, err := os.ReadFile(jar)
	if err != nil {
		t.Fatal(err)
	}

	// prebuilt makes ROOT/KEY with the jar and two archives that are not
	// archives, modes as install-deps.sh leaves them; change then spoils it.
	roots := filepath.Join(work, "roots")
	if err := os.Mkdir(roots, 0o755); err != nil {
		t.Fatal(err)
	}
	prebuilt := func(name, key string, change func(dir string)) string {
		root := filepath.Join(roots, name)
		dir := filepath.Join(root, key)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []struct {
			name string
			data []byte
		}{{"envd-jshell.jar", jarData}, {"agent.jsa", []byte("not an archive")}, {"remote.jsa", []byte("not an archive")}} {
			if err := os.WriteFile(filepath.Join(dir, f.name), f.data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if change != nil {
			change(dir)
		}
		return root
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	trusted := prebuilt("trusted", key, nil)
	noArchives := prebuilt("no-archives", key, func(dir string) {
		must(os.Remove(filepath.Join(dir, "agent.jsa")))
		must(os.Remove(filepath.Join(dir, "remote.jsa")))
	})
	// Each spoils the jar; with remote, the remote JVM's archive, root's
	// in a directory only root can change, is still used.
	type spoilt struct {
		root   string
		remote bool
	}
	untrusted := map[string]spoilt{
		"another source or java": {prebuilt("other-key", strings.Repeat("0", 64), nil), false},
		"a directory others can write": {prebuilt("dir-writable", key, func(dir string) {
			must(os.Chmod(dir, 0o777))
		}), false},
		"a directory above it its group can write": {prebuilt("root-writable", key, func(dir string) {
			must(os.Chmod(filepath.Dir(dir), 0o775))
		}), false},
		"a directory of another user": {prebuilt("dir-owner", key, func(dir string) {
			must(os.Chown(dir, 65534, 65534))
		}), false},
		"a link to the directory": {prebuilt("dir-link", key, func(dir string) {
			must(os.Rename(dir, dir+".real"))
			must(os.Symlink(filepath.Base(dir)+".real", dir))
		}), false},
		"a jar others can write": {prebuilt("jar-writable", key, func(dir string) {
			must(os.Chmod(filepath.Join(dir, "envd-jshell.jar"), 0o666))
		}), true},
		"a jar of another user": {prebuilt("jar-owner", key, func(dir string) {
			must(os.Chown(filepath.Join(dir, "envd-jshell.jar"), 65534, 65534))
		}), true},
		"a link to the jar": {prebuilt("jar-link", key, func(dir string) {
			must(os.Rename(filepath.Join(dir, "envd-jshell.jar"), filepath.Join(dir, "real.jar")))
			must(os.Symlink("real.jar", filepath.Join(dir, "envd-jshell.jar")))
		}), true},
	}

	probe := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command(python, append([]string{"-c", prebuiltProbe, l.Java}, args...)...)
		cmd.Env = append(l.Environ(os.Environ()), "PYTHONPATH="+l.PythonPath, "PYTHONDONTWRITEBYTECODE=1")
		cmd.Dir = testutil.WorkDir(t)
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("probe %v: %v\n%s", args, err, stderr)
		}
		return out
	}
	args := []string{trusted, noArchives}
	for _, u := range untrusted {
		args = append(args, u.root)
	}
	var argvs map[string][]string
	if err := json.Unmarshal(probe(args...), &argvs); err != nil {
		t.Fatal(err)
	}
	fromJar := func(argv []string, root string) bool {
		return slices.Contains(argv, "EnvdJShell") && slices.Contains(argv, filepath.Join(root, key, "envd-jshell.jar")) &&
			!slices.Contains(argv, javaSrc)
	}
	archives := func(argv []string) []string {
		var out []string
		for _, a := range argv {
			if f, ok := strings.CutPrefix(a, "-XX:SharedArchiveFile="); ok {
				out = append(out, filepath.Base(f))
			}
		}
		return out
	}
	fromSource := func(argv []string) bool {
		return slices.Contains(argv, javaSrc) && !slices.Contains(argv, "EnvdJShell")
	}
	if argv := argvs[trusted]; !fromJar(argv, trusted) ||
		!slices.Contains(argv, "-XX:SharedArchiveFile="+filepath.Join(trusted, key, "agent.jsa")) ||
		argv[len(argv)-1] != "-XX:SharedArchiveFile="+filepath.Join(trusted, key, "remote.jsa") {
		t.Errorf("prebuilt agent and archives: argv %q", argv)
	}
	if argv := argvs[noArchives]; !fromJar(argv, noArchives) || len(archives(argv)) != 0 {
		t.Errorf("prebuilt agent without archives: argv %q", argv)
	}
	for what, u := range untrusted {
		want := []string(nil)
		if u.remote {
			want = []string{"remote.jsa"}
		}
		if argv := argvs[u.root]; !fromSource(argv) || !slices.Equal(archives(argv), want) {
			t.Errorf("%s: want the agent from source, archives %q: argv %q", what, want, argv)
		}
	}

	// The trusted one runs, its broken archives ignored by the JVM.
	var run struct {
		Argv   []string `json:"argv"`
		Value  string   `json:"value"`
		Status string   `json:"status"`
	}
	if err := json.Unmarshal(probe("run", trusted), &run); err != nil {
		t.Fatal(err)
	}
	if !fromJar(run.Argv, trusted) || run.Value != "2" || run.Status != "ok" {
		t.Errorf("1+1 on the prebuilt agent: %+v", run)
	}
}
