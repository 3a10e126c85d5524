package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// unitFile is the systemd unit that starts envd in a Firecracker guest.
const unitFile = "deploy/firecracker/envd.service"

// unit is a parsed systemd unit file: section -> key -> values, in order
// (a key may be given more than once).
type unit map[string]map[string][]string

// parseUnit reads a unit file as systemd does for what these tests look at:
// [Section] headers, Key=Value lines, comments (# and ;) and lines
// continued with a trailing backslash. Anything else fails the test.
func parseUnit(t *testing.T, rel string) unit {
	t.Helper()
	u := unit{}
	section := ""
	var cont strings.Builder
	for n, line := range strings.Split(readRepoFile(t, rel), "\n") {
		line = strings.TrimSpace(line)
		if cont.Len() == 0 && (line == "" || line[0] == '#' || line[0] == ';') {
			continue
		}
		if c, ok := strings.CutSuffix(line, `\`); ok {
			cont.WriteString(c + " ")
			continue
		}
		cont.WriteString(line)
		line = strings.TrimSpace(cont.String())
		cont.Reset()
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = line[1 : len(line)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || section == "" {
			t.Fatalf("%s:%d: not a Key=Value line in a section: %q", rel, n+1, line)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		u[section][k] = append(u[section][k], v)
	}
	return u
}

// one is the only value of a key, failing the test when it is not set
// exactly once.
func (u unit) one(t *testing.T, section, key string) string {
	t.Helper()
	vs := u[section][key]
	if len(vs) != 1 {
		t.Fatalf("%s: [%s] %s= is set %d times, want once", unitFile, section, key, len(vs))
	}
	return vs[0]
}

// environment is what the unit's Environment= lines set, as KEY=VALUE (each
// line holds space-separated assignments, double-quoted when they hold a
// space).
func (u unit) environment(t *testing.T) []string {
	t.Helper()
	var env []string
	for _, line := range u["Service"]["Environment"] {
		for _, word := range splitQuoted(t, line) {
			if k, _, ok := strings.Cut(word, "="); !ok || k == "" {
				t.Fatalf("%s: Environment=%s: %q is no KEY=VALUE", unitFile, line, word)
			}
			env = append(env, word)
		}
	}
	return env
}

// splitQuoted splits s at spaces outside double quotes, removing the quotes.
func splitQuoted(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	var cur strings.Builder
	quoted, inWord := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("%s: unbalanced quotes in %q", unitFile, s)
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}

// lookupEnv is the value of name in a KEY=VALUE list (the last one wins).
func lookupEnv(env []string, name string) (string, bool) {
	val, found := "", false
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == name {
			val, found = v, true
		}
	}
	return val, found
}

// goMemLimit parses a GOMEMLIMIT value as the Go runtime does (a byte count
// with an optional B, KiB, MiB, GiB or TiB suffix) into bytes.
func goMemLimit(s string) (int64, bool) {
	m := regexp.MustCompile(`^([0-9]+)(B|KiB|MiB|GiB|TiB)?$`).FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, false
	}
	shift := map[string]uint{"": 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30, "TiB": 40}[m[2]]
	return n << shift, true
}

// unitEntrypoint is how the unit starts envd: ExecStart's command line and
// the unit's Environment=.
func unitEntrypoint(t *testing.T) entrypoint {
	t.Helper()
	u := parseUnit(t, unitFile)
	return entrypoint{file: unitFile, argv: strings.Fields(u.one(t, "Service", "ExecStart")), env: u.environment(t)}
}

// TestFirecrackerUnit checks the unit as E2B's guest needs it: systemd
// accepts it (systemd-analyze verify, against a copy whose ExecStart is the
// built envd: verify checks that the program exists), it starts
// /usr/bin/envd with no flags, restarts it always, never lets the OOM
// killer pick it nor stops it when the workload is OOM-killed, and gives
// it a GOMEMLIMIT.
func TestFirecrackerUnit(t *testing.T) {
	t.Parallel()
	u := parseUnit(t, unitFile)
	if got := u.one(t, "Service", "ExecStart"); got != "/usr/bin/envd" {
		t.Errorf("ExecStart=%s; want /usr/bin/envd with no flags, as E2B starts it", got)
	}
	for _, kv := range [][3]string{
		{"Service", "Restart", "always"},
		{"Service", "OOMScoreAdjust", "-1000"},
		{"Service", "OOMPolicy", "continue"},
		{"Service", "User", "root"},
		{"Install", "WantedBy", "multi-user.target"},
	} {
		if got := u.one(t, kv[0], kv[1]); got != kv[2] {
			t.Errorf("[%s] %s=%s; want %s", kv[0], kv[1], got, kv[2])
		}
	}
	env := u.environment(t)
	lim, ok := lookupEnv(env, "GOMEMLIMIT")
	if !ok {
		t.Errorf("no Environment=GOMEMLIMIT=...: envd's heap limit, the guest's memory")
	} else if n, ok := goMemLimit(lim); !ok || n < 256<<20 {
		t.Errorf("GOMEMLIMIT=%s: want a size Go reads (e.g. 2048MiB) of at least 256MiB", lim)
	}

	// systemd's own check of the file.
	analyze := requireTool(t, "systemd-analyze", "systemd")
	text := readRepoFile(t, unitFile)
	re := regexp.MustCompile(`(?m)^ExecStart=/usr/bin/envd\s*$`)
	if !re.MatchString(text) {
		t.Fatalf("%s: no ExecStart=/usr/bin/envd line to point at the built envd", unitFile)
	}
	copyPath := filepath.Join(t.TempDir(), "envd.service")
	if err := os.WriteFile(copyPath, []byte(re.ReplaceAllLiteralString(text, "ExecStart="+envdBin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", copyPath).CombinedOutput()
	// verify exits 0 after warnings about the unit (an unknown key, a
	// value it ignores): any line about it fails the test too.
	var about []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.Contains(line, "envd.service") {
			about = append(about, line)
		}
	}
	if err != nil || len(about) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unitFile, err, out)
	} else if len(out) > 0 {
		t.Logf("systemd-analyze verify, about other units:\n%s", out)
	}
}

// TestFirecrackerUnitRuns runs the unit's ExecStart with its Environment=,
// as systemd would in the guest, without code execution: envd with no
// flags polls the MMDS at 169.254.169.254, which the sandbox's network
// namespace cannot reach, and must serve all the same.
func TestFirecrackerUnitRuns(t *testing.T) {
	t.Parallel()
	ep := unitEntrypoint(t)
	if slices.ContainsFunc(ep.env, func(kv string) bool { return strings.HasPrefix(kv, "ENVD_") }) {
		t.Fatalf("%s sets ENVD_* variables: E2B's unit sets none, and this one must start envd as it does", unitFile)
	}
	s := startSandbox(t, ep, runOptions{})
	s.checkServes(t)
	s.stop(t)
}
