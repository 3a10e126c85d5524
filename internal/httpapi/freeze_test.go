package httpapi_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/auth"
	"github.com/envd-dev/envd/internal/cgroup"
	"github.com/envd-dev/envd/internal/httpapi"
	"github.com/envd-dev/envd/internal/server"
	"github.com/envd-dev/envd/internal/testutil"
)

// hooksEnv serves the snapshot hooks, with the access token "tok", through
// envd's middleware.
func hooksEnv(t *testing.T, o httpapi.HooksOptions) (*env, *httpapi.Hooks) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the snapshot hooks need root")
	}
	o.Logger = slog.New(slog.DiscardHandler)
	hooks := httpapi.NewHooks(o)
	e := &env{token: &auth.Token{}}
	e.token.Set("tok")
	h, err := server.New(server.Options{Logger: o.Logger, Token: e.token, Routes: hooks.Routes()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	tr := &http.Transport{}
	e.hc = &http.Client{Transport: tr}
	e.url = srv.URL
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
		hooks.Close()
	})
	return e, hooks
}

var tok = hdr("X-Access-Token", "tok")

func testCgroups(t *testing.T, v cgroup.Version) *cgroup.Manager {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	m, err := cgroup.New(cgroup.Options{Version: v, Root: "envd-test-" + hex.EncodeToString(b), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Thaw()
		if err := m.Close(); err != nil {
			t.Errorf("remove the test's cgroups: %v", err)
		}
	})
	return m
}

// TestHooksBadInput: every bad query value gets a 400 naming it; the routes
// need the token; without cgroups /freeze and /unfreeze answer 501; a call
// while another holds the lock answers 503, and the lock is free after.
func TestHooksBadInput(t *testing.T) {
	e, hooks := hooksEnv(t, httpapi.HooksOptions{FSPath: t.TempDir()})
	for _, c := range []struct{ query, want string }{
		{"mode=frozen", `mode "frozen"`},
		{"maxCgroups=0", `maxCgroups "0"`},
		{"maxCgroups=lots", `maxCgroups "lots"`},
		{"maxCgroups=99999999", `maxCgroups "99999999"`},
		{"maxWaitMs=-1", `maxWaitMs "-1"`},
		{"maxWaitMs=", `maxWaitMs ""`},
		{"maxWaitMs=1.5", `maxWaitMs "1.5"`},
		{"maxWaitMs=600001", `maxWaitMs "600001"`},
	} {
		r := e.do(t, "POST", "/freeze?"+c.query, nil, tok, nil)
		wantError(t, r, 400, c.want)
	}
	wantError(t, e.do(t, "POST", "/freeze", nil, tok, nil), 501, "cgroups are unavailable")
	wantError(t, e.do(t, "POST", "/unfreeze", nil, tok, nil), 501, "cgroups are unavailable")
	for _, p := range []string{"/freeze", "/unfreeze", "/fsfreeze", "/fsthaw", "/collapse"} {
		wantError(t, e.do(t, "POST", p, nil, nil, nil), 401)
		if r := e.do(t, "GET", p, nil, tok, nil); r.status != http.StatusMethodNotAllowed {
			t.Errorf("GET %s: %d", p, r.status)
		}
	}
	release := httpapi.HoldLock(hooks)
	for _, p := range []string{"/freeze", "/unfreeze", "/fsfreeze", "/fsthaw", "/collapse"} {
		wantError(t, e.do(t, "POST", p, nil, tok, nil), 503, "in progress")
	}
	release()
	if r := e.do(t, "POST", "/collapse", nil, tok, nil); r.status != 200 {
		t.Errorf("collapse after the lock was released: %d %s", r.status, r.body)
	}
}

// TestFreezeRoutes: /freeze without maxWaitMs answers 204 and the workload
// reads back frozen; with it, 200 and the full result; /unfreeze thaws it.
// On cgroup v1 and v2.
func TestFreezeRoutes(t *testing.T) {
	for _, v := range []cgroup.Version{cgroup.V1, cgroup.V2} {
		t.Run(v.String(), func(t *testing.T) {
			cg := testCgroups(t, v)
			e, _ := hooksEnv(t, httpapi.HooksOptions{Cgroups: cg, FSPath: t.TempDir()})
			g, err := cg.Group(cgroup.User).NewChild()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
			if err := g.Start(cmd, cmd.Start); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cg.Thaw(); cmd.Wait(); g.Remove() })

			if r := e.do(t, "POST", "/freeze", nil, tok, nil); r.status != 204 {
				t.Fatalf("freeze: %d %s", r.status, r.body)
			}
			testutil.Poll(t, "the loop's cgroup to read back frozen", func() bool { ok, _ := g.Frozen(); return ok })
			if r := e.do(t, "POST", "/unfreeze", nil, tok, nil); r.status != 204 {
				t.Fatalf("unfreeze: %d %s", r.status, r.body)
			}
			if ok, _ := g.Frozen(); ok {
				t.Fatal("still frozen after /unfreeze")
			}

			// The loop's start made spare cgroups under user (one per
			// process to come): the sweep visits them too.
			testutil.Poll(t, "the spare cgroups", func() bool { return cg.Spares() == 2 })
			r := e.do(t, "POST", "/freeze", q("mode", "legacy", "maxWaitMs", "15000", "maxCgroups", "100"), tok, nil)
			if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
				t.Fatalf("freeze with maxWaitMs: %d %s", r.status, r.body)
			}
			var res map[string]any
			if err := json.Unmarshal([]byte(r.body), &res); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"mode", "visited", "allowlisted", "truncated", "preFrozen", "requested", "frozen", "notFrozen", "failed", "unobservable", "sweepMs", "waitMs"} {
				if _, ok := res[k]; !ok {
					t.Errorf("result %s lacks %s", r.body, k)
				}
			}
			if res["mode"] != "legacy" || res["requested"] != 3.0 || res["frozen"] != 3.0 || res["visited"] != 6.0 {
				t.Errorf("result %s: want legacy, 6 visited (user, pty, jupyter, the loop's, 2 spares), 3 requested and frozen", r.body)
			}
			if r := e.do(t, "POST", "/unfreeze", nil, tok, nil); r.status != 204 {
				t.Fatalf("unfreeze: %d %s", r.status, r.body)
			}
			if ok, _ := g.Frozen(); ok {
				t.Fatal("still frozen after /unfreeze")
			}
		})
	}
}

// TestInitResumes: /init thaws what /freeze froze (a sandbox resumed from a
// snapshot taken frozen runs again), never a cgroup the guest froze
// itself; an /init without the token thaws nothing.
func TestInitResumes(t *testing.T) {
	for _, v := range []cgroup.Version{cgroup.V1, cgroup.V2} {
		t.Run(v.String(), func(t *testing.T) {
			if os.Geteuid() != 0 {
				t.Skip("the snapshot hooks need root")
			}
			cg := testCgroups(t, v)
			hooks := httpapi.NewHooks(httpapi.HooksOptions{Logger: slog.New(slog.DiscardHandler), Cgroups: cg, FSPath: t.TempDir()})
			t.Cleanup(func() { hooks.Close() })
			e := newEnv(t, envOpts{hooks: hooks})
			e.token.Set("tok")
			start := func() *cgroup.Group {
				g, err := cg.Group(cgroup.User).NewChild()
				if err != nil {
					t.Fatal(err)
				}
				cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
				if err := g.Start(cmd, cmd.Start); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cmd.Process.Kill(); g.Thaw(); cg.Thaw(); cmd.Wait(); g.Remove() })
				return g
			}
			ours, guests := start(), start()
			if err := guests.Freeze(); err != nil { // the guest freezes its own
				t.Fatal(err)
			}
			if r := e.do(t, "POST", "/freeze", q("maxWaitMs", "15000"), tok, nil); r.status != 200 {
				t.Fatalf("freeze: %d %s", r.status, r.body)
			}
			if ok, _ := ours.Frozen(); !ok {
				t.Fatal("not frozen after /freeze")
			}
			if r := e.do(t, "POST", "/init", nil, nil, strings.NewReader(`{}`)); r.status != 401 {
				t.Fatalf("/init without the token: %d %s", r.status, r.body)
			}
			if ok, _ := ours.Frozen(); !ok {
				t.Fatal("an unauthorized /init thawed the workload")
			}
			if r := e.do(t, "POST", "/init", nil, nil, strings.NewReader(`{"accessToken":"tok"}`)); r.status != 204 {
				t.Fatalf("/init: %d %s", r.status, r.body)
			}
			if ok, _ := ours.Frozen(); ok {
				t.Error("still frozen after /init")
			}
			if ok, _ := guests.Frozen(); !ok {
				t.Error("/init thawed a cgroup the guest froze itself")
			}
		})
	}
}

// TestCollapse: /collapse answers its counts; on a kernel without
// MADV_COLLAPSE every chunk is skipped, not an error.
func TestCollapse(t *testing.T) {
	e, _ := hooksEnv(t, httpapi.HooksOptions{FSPath: t.TempDir()})
	r := e.do(t, "POST", "/collapse", nil, tok, nil)
	if r.status != 200 {
		t.Fatalf("collapse: %d %s", r.status, r.body)
	}
	var res httpapi.CollapseResult
	if err := json.Unmarshal([]byte(r.body), &res); err != nil {
		t.Fatal(err)
	}
	if res.Regions == 0 || res.Collapsed+res.Skipped != res.Chunks {
		t.Errorf("result %s", r.body)
	}
}

// fsNSEnv marks the re-executed test binary that runs in a private mount
// namespace.
const fsNSEnv = "ENVD_TEST_FSFREEZE_NS"

// TestFSFreeze: /fsfreeze freezes a loop-mounted ext4 the test makes (in a
// private mount namespace: never the machine's root), idempotently; /fsthaw
// thaws it; a filesystem left frozen is thawed by the watchdog (a write
// that blocked on it completes, with no /fsthaw).
func TestFSFreeze(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("fsfreeze needs root")
	}
	if os.Getenv(fsNSEnv) == "" {
		cmd := exec.Command("unshare", "-m", "--propagation", "private", os.Args[0], "-test.run=^TestFSFreeze$", "-test.count=1")
		cmd.Env = append(os.Environ(), fsNSEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "PASS") {
			t.Fatalf("in a private mount namespace: %v\n%s", err, out)
		}
		return
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "mnt")
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	run("truncate", "-s", "32M", img)
	run("mkfs.ext4", "-q", img)
	dev := run("losetup", "-f", "--show", img)
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
	run("mount", dev, mnt)
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })

	e, _ := hooksEnv(t, httpapi.HooksOptions{FSPath: mnt, FSWatchdog: time.Second})
	post := func(p string) {
		t.Helper()
		if r := e.do(t, "POST", p, nil, tok, nil); r.status != 204 {
			t.Fatalf("%s: %d %s", p, r.status, r.body)
		}
	}
	frozen := func() bool { // FIFREEZE on a frozen filesystem is EBUSY
		f, err := os.Open(mnt)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), 0xc0045877, 0)
		if errno == 0 {
			unix.Syscall(unix.SYS_IOCTL, f.Fd(), 0xc0045878, 0)
			return false
		}
		return errors.Is(errno, unix.EBUSY)
	}
	post("/fsfreeze")
	post("/fsfreeze")
	if !frozen() {
		t.Fatal("not frozen after /fsfreeze")
	}
	post("/fsthaw")
	post("/fsthaw")
	if frozen() {
		t.Fatal("frozen after /fsthaw")
	}

	// Left frozen: the watchdog thaws it; a write waits until then.
	post("/fsfreeze")
	wrote := make(chan error, 1)
	go func() { wrote <- os.WriteFile(filepath.Join(mnt, "after"), []byte("x"), 0o644) }()
	if err := testutil.RequireReceive(t, wrote); err != nil {
		t.Fatal(err)
	}
	if frozen() {
		t.Fatal("still frozen after the watchdog")
	}
}
