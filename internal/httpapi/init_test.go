package httpapi_test

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/auth"
	"github.com/envd-dev/envd/internal/testutil"
)

func TestSignedFiles(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	e := newEnv(t, envOpts{now: func() time.Time { return now }})
	dir := testutil.WorkDir(t)
	testutil.WriteFile(t, dir+"/a.txt", "hello", 0o644)
	p := dir + "/a.txt"

	// No token yet: everything is open, signatures are ignored.
	if r := e.do(t, "GET", "/files", q("path", p, "signature", "v1_junk"), nil, nil); r.status != 200 {
		t.Fatalf("before a token: %d", r.status)
	}
	e.token.Set("secret-token")
	sign := func(path, op, user string, exp int64) string { return auth.Sign(path, op, user, "secret-token", exp) }
	future := strconv.FormatInt(now.Unix()+60, 10)
	past := strconv.FormatInt(now.Unix()-1, 10)
	tests := []struct {
		name   string
		method string
		query  []string
		header []string
		status int
		msg    string
	}{
		{"no token, no signature", "GET", []string{"path", p}, nil, 401, "this envd requires an access token: send it in the X-Access-Token header, or sign the URL"},
		{"token header", "GET", []string{"path", p}, []string{"X-Access-Token", "secret-token"}, 200, ""},
		{"wrong token header", "GET", []string{"path", p}, []string{"X-Access-Token", "nope"}, 401, "the access token in X-Access-Token is not this envd's"},
		{"signed", "GET", []string{"path", p, "signature", sign(p, "read", "", 0)}, nil, 200, ""},
		{"signed with user and expiry", "GET", []string{"path", p, "username", "root", "signature", sign(p, "read", "root", now.Unix()+60), "signature_expiration", future}, nil, 200, ""},
		{"expired", "GET", []string{"path", p, "signature", sign(p, "read", "", now.Unix()-1), "signature_expiration", past}, nil, 401, "signature is already expired"},
		{"bad signature", "GET", []string{"path", p, "signature", "v1_bad"}, nil, 401, "invalid signature"},
		{"signed for another user", "GET", []string{"path", p, "username", "root", "signature", sign(p, "read", "user", 0)}, nil, 401, "invalid signature"},
		{"read signature used to write", "POST", []string{"path", dir + "/w.txt", "signature", sign(dir+"/w.txt", "read", "", 0)}, nil, 401, "invalid signature"},
		{"write signature", "POST", []string{"path", dir + "/w.txt", "signature", sign(dir+"/w.txt", "write", "", 0)}, nil, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := hdr(append([]string{"Content-Type", "application/octet-stream"}, tt.header...)...)
			var body *strings.Reader
			if tt.method == "POST" {
				body = strings.NewReader("w")
			} else {
				body = strings.NewReader("")
			}
			r := e.do(t, tt.method, "/files", q(tt.query...), h, body)
			if tt.status == 200 {
				if r.status != 200 {
					t.Fatalf("%d %s", r.status, r.body)
				}
				return
			}
			wantError(t, r, tt.status, tt.msg)
		})
	}
	// /envs and /metrics need the token; /init checks it itself.
	wantError(t, e.do(t, "GET", "/envs", nil, nil, nil), 401, "this envd requires an access token")
	if r := e.do(t, "GET", "/envs", nil, hdr("X-Access-Token", "secret-token"), nil); r.status != 200 {
		t.Errorf("/envs with the token: %d", r.status)
	}
}

func TestInit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	dir := testutil.WorkDir(t)
	testutil.WriteFile(t, dir+"/in-workdir.txt", "wd", 0o644)
	init := func(body string, token string) response {
		h := hdr("Content-Type", "application/json")
		if token != "" {
			h.Set("X-Access-Token", token)
		}
		return e.do(t, "POST", "/init", nil, h, strings.NewReader(body))
	}
	check := func(r response, status int, msg string) {
		t.Helper()
		if r.header.Get("X-Envd-Version") != "9.8.7" {
			t.Errorf("X-Envd-Version %q", r.header.Get("X-Envd-Version"))
		}
		if status == 204 {
			if r.status != 204 || r.header.Get("Cache-Control") != "no-store" {
				t.Fatalf("%d %s %v", r.status, r.body, r.header)
			}
			return
		}
		wantError(t, r, status, msg)
	}
	envs := func() map[string]string {
		r := e.do(t, "GET", "/envs", nil, hdr("X-Access-Token", e.token.Get()), nil)
		var m map[string]string
		if err := json.Unmarshal([]byte(r.body), &m); err != nil || r.status != 200 || r.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("/envs: %d %q %v", r.status, r.body, err)
		}
		return m
	}

	check(init("", ""), 204, "")
	check(init("{not json", ""), 400, "invalid /init body")
	// A body over the cap is refused as too large, and changes nothing.
	check(init(`{"envVars":{"BIG":"`+strings.Repeat("x", 1<<20)+`"}}`, ""), 413, "/init body larger than 1048576 bytes")
	if m := envs(); m["BIG"] != "" {
		t.Error("a refused /init set env vars")
	}
	check(init(`{"envVars":{"A":"1","E2B_SANDBOX":"false"}}`, ""), 204, "")
	if m := envs(); m["A"] != "1" || m["E2B_SANDBOX"] != "true" {
		t.Errorf("envs %v: A set, E2B_SANDBOX kept", m)
	}
	check(init(`{"envVars":{"B":"2"}}`, ""), 204, "")
	if m := envs(); m["A"] != "" || m["B"] != "2" {
		t.Errorf("envVars replace the previous ones: %v", m)
	}
	check(init(`{"defaultUser":"nosuchuser"}`, ""), 400, "defaultUser 'nosuchuser'")
	if e.defs.UserName() != "user" {
		t.Error("a refused /init changed the default user")
	}
	check(init(`{"defaultUser":"root","defaultWorkdir":"`+dir+`"}`, ""), 204, "")
	if e.defs.UserName() != "root" || e.defs.Workdir() != dir {
		t.Errorf("default user %q workdir %q", e.defs.UserName(), e.defs.Workdir())
	}
	// The new defaults apply to /files: relative paths, the default user.
	testutil.WriteFile(t, dir+"/root-only", "r", 0o600)
	if r := e.do(t, "GET", "/files", q("path", dir+"/root-only"), nil, nil); r.body != "r" {
		t.Errorf("the default user is not root: %d %s", r.status, r.body)
	}

	// Tokens: the first is accepted, the same again too; another, or none,
	// is refused.
	check(init(`{"accessToken":"t1","envVars":{"C":"3"}}`, ""), 204, "")
	if !e.token.Match("t1") {
		t.Fatal("token not set")
	}
	check(init(`{"accessToken":"t1"}`, ""), 204, "")
	check(init(`{"accessToken":"t2","envVars":{"D":"4"}}`, ""), 401, "access token validation failed")
	check(init(`{"envVars":{"D":"4"}}`, "t1"), 401, "access token reset not authorized")
	check(init(``, ""), 401, "access token reset not authorized")
	if m := envs(); m["C"] != "3" || m["D"] != "" {
		t.Errorf("a refused /init changed the env: %v", m)
	}
	if !e.token.Match("t1") {
		t.Error("the token changed")
	}
}

func TestInitClock(t *testing.T) {
	t.Parallel()
	for _, sync := range []bool{false, true} {
		t.Run("sync "+strconv.FormatBool(sync), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOpts{syncClock: sync})
			before := time.Now()
			init := func(ts time.Time) {
				t.Helper()
				r := e.do(t, "POST", "/init", nil, nil, strings.NewReader(`{"timestamp":"`+ts.Format(time.RFC3339Nano)+`","envVars":{"AT":"`+ts.Format(time.RFC3339Nano)+`"}}`))
				if r.status != 204 {
					t.Fatalf("%d %s", r.status, r.body)
				}
			}
			ahead := time.Now().Add(time.Hour) // the machine is an hour behind
			init(ahead)
			init(ahead.Add(-time.Minute)) // stale: ignored entirely
			if got := e.defs.Env()["AT"]; got != ahead.Format(time.RFC3339Nano) {
				t.Errorf("a stale /init was applied: AT=%s", got)
			}
			init(ahead.Add(time.Millisecond)) // an hour ahead, again
			if sync {
				if len(e.clock.set) != 2 || !e.clock.set[0].Equal(ahead) {
					t.Errorf("clock set %v, want %v then the next", e.clock.set, ahead)
				}
			} else if len(e.clock.set) != 0 {
				t.Errorf("the clock was set without -sync-clock: %v", e.clock.set)
			}
			if time.Since(before) > time.Minute {
				t.Error("the real clock moved")
			}
		})
	}
	t.Run("no skew", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envOpts{syncClock: true})
		r := e.do(t, "POST", "/init", nil, nil, strings.NewReader(`{"timestamp":"`+time.Now().Format(time.RFC3339Nano)+`"}`))
		if r.status != 204 || len(e.clock.set) != 0 {
			t.Errorf("%d, clock set %v", r.status, e.clock.set)
		}
	})
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	r := e.do(t, "GET", "/metrics", nil, nil, nil)
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("%d %v", r.status, r.header)
	}
	var m map[string]float64
	if err := json.Unmarshal([]byte(r.body), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ts", "cpu_count", "cpu_used_pct", "mem_total_mib", "mem_used_mib", "mem_total", "mem_used", "mem_cache", "disk_used", "disk_total"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %s in %s", k, r.body)
		}
	}
	if d := time.Since(time.Unix(int64(m["ts"]), 0)); d < -time.Minute || d > time.Minute {
		t.Errorf("ts %v", m["ts"])
	}
	cpus := 0
	stat, _ := os.ReadFile("/proc/stat")
	for line := range strings.SplitSeq(string(stat), "\n") {
		if strings.HasPrefix(line, "cpu") && !strings.HasPrefix(line, "cpu ") {
			cpus++
		}
	}
	if int(m["cpu_count"]) != cpus {
		t.Errorf("cpu_count %v, /proc/stat has %d", m["cpu_count"], cpus)
	}
	if m["cpu_used_pct"] < 0 || m["cpu_used_pct"] > 100 {
		t.Errorf("cpu_used_pct %v", m["cpu_used_pct"])
	}
	if m["mem_used"] <= 0 || m["mem_used"] >= m["mem_total"] || m["mem_total_mib"] != float64(int64(m["mem_total"])>>20) {
		t.Errorf("memory %v", m)
	}
	if m["disk_used"] <= 0 || m["disk_used"] > m["disk_total"] {
		t.Errorf("disk %v", m)
	}
	// A second call measures since the first.
	if r := e.do(t, "GET", "/metrics", nil, nil, nil); r.status != 200 {
		t.Errorf("second call %d", r.status)
	}
}
