package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/internal/testutil"
)

// jupyterServerPid is the pid of envd's child running the Jupyter server,
// 0 when there is none.
func jupyterServerPid(t *testing.T, envdPid int) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, not ")".
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(envdPid) {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if strings.Contains(string(cmd), "jupyter_server") {
			return pid
		}
	}
	return 0
}

// contextIDs lists the ids of the contexts the test made, in order.
func contextIDs(t *testing.T, ctx context.Context, c *client.Client) []string {
	t.Helper()
	list, err := c.ListContexts(ctx)
	if err != nil {
		t.Fatalf("ListContexts: %v", err)
	}
	// Without the default contexts: listed once envd made them, which on
	// a slow machine may be at any point of the test. Asked after the
	// listing: a default stays the default.
	langs, err := c.Languages(ctx)
	if err != nil {
		t.Fatalf("Languages: %v", err)
	}
	defaults := map[string]bool{}
	for _, l := range langs {
		defaults[l.DefaultContextID] = true
	}
	var ids []string
	for _, cc := range list {
		if !defaults[cc.ID] {
			ids = append(ids, cc.ID)
		}
	}
	return ids
}

// runCode runs code in the context and returns its main result's text.
func runCode(t *testing.T, ctx context.Context, c *client.Client, contextID, code string) string {
	t.Helper()
	run, err := c.Execute(ctx, code, client.ExecOptions{ContextID: contextID})
	if err != nil {
		t.Fatalf("Execute %q: %v", code, err)
	}
	res, err := run.Wait()
	if err != nil || res.Reason != client.EndOK {
		t.Fatalf("Execute %q: %+v, %v", code, res, err)
	}
	for _, r := range res.Results {
		if r.Main {
			return r.Text
		}
	}
	return ""
}

// upgradeTo upgrades e to bin, which says version, and waits until it
// serves and reports the upgrade.
func upgradeTo(t *testing.T, e *envd, bin, version string) upgradeState {
	t.Helper()
	code, body := postUpgrade(t, e, fmt.Sprintf(`{"path": %q}`, bin), true)
	if code != http.StatusAccepted {
		t.Fatalf("POST /upgrade: %d %s", code, body)
	}
	if !testutil.PollFor(startTimeout, func() bool { return healthVersion(e) == version || !e.alive() }) || !e.alive() {
		t.Fatalf("/health never said %s\nstderr:\n%s", version, e.stderr)
	}
	return waitUpgraded(t, e, "upgraded")
}

// waitJupyterAdopted waits until GET /upgrade says the Jupyter server was
// adopted (or why not).
func waitJupyterAdopted(t *testing.T, e *envd) {
	t.Helper()
	var jupyter string
	testutil.PollFor(startTimeout, func() bool {
		var raw struct {
			Last *struct {
				Jupyter string `json:"jupyter"`
			} `json:"last"`
		}
		resp, err := tokenClient(t, requestTimeout).Get(e.url + "/upgrade")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil || raw.Last == nil {
			return false
		}
		jupyter = raw.Last.Jupyter
		return jupyter != "adopting" && jupyter != ""
	})
	if jupyter != "adopted" {
		t.Fatalf("GET /upgrade: jupyter %q, want adopted\nstderr:\n%s", jupyter, e.stderr)
	}
}

// TestUpgradeCode: code contexts live through an upgrade with their ids
// and variables, in the same Jupyter server (envd's child, same pid); an
// execution in flight is stopped (its kernel interrupted, so the context
// is free at once after); new contexts work; and all of it again on a
// second upgrade, back to the old binary.
func TestUpgradeCode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("an upgrade wants a root-owned binary: run as root")
	}
	_, oldBin, newBin := upgradeBinaries(t)
	e := startEnvd(t, startOptions{bin: oldBin, jupyter: true, env: []string{"ENVD_ACCESS_TOKEN=" + upgradeToken}})
	c := client.New(client.Options{Addr: e.url, Token: upgradeToken})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), codeTimeout)
	defer cancel()

	cc, err := c.CreateContext(ctx, client.ContextOptions{Language: "python", Dir: "/tmp"})
	if err != nil {
		t.Fatalf("CreateContext: %v\n%s", err, e.stderr)
	}
	runCode(t, ctx, c, cc.ID, "x = 41")
	busy, err := c.CreateContext(ctx, client.ContextOptions{Language: "python"})
	if err != nil {
		t.Fatalf("CreateContext: %v", err)
	}
	runCode(t, ctx, c, busy.ID, "import time")
	sleeping, err := c.Execute(ctx, "print('sleeping', flush=True)\ntime.sleep(3600)", client.ExecOptions{ContextID: busy.ID})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	go func() {
		defer close(started)
		for ev, err := range sleeping.Events() {
			if err != nil || ev.Stdout != nil {
				return
			}
		}
	}()
	<-started
	ids := contextIDs(t, ctx, c)
	server := jupyterServerPid(t, e.cmd.Process.Pid)
	if server == 0 {
		t.Fatalf("no Jupyter server among envd's children")
	}

	for _, up := range []struct{ bin, version string }{{newBin, newVersion}, {oldBin, oldVersion}} {
		upgradeTo(t, e, up.bin, up.version)
		waitJupyterAdopted(t, e)
		if pid := jupyterServerPid(t, e.cmd.Process.Pid); pid != server {
			t.Errorf("after the upgrade to %s the Jupyter server is pid %d, want %d (unchanged)", up.version, pid, server)
		}
		if got := contextIDs(t, ctx, c); strings.Join(got, ",") != strings.Join(ids, ",") {
			t.Errorf("contexts after the upgrade to %s: %v, want %v", up.version, got, ids)
		}
		if got := runCode(t, ctx, c, cc.ID, "x + 1"); got != "42" {
			t.Errorf("x + 1 after the upgrade to %s: %q, want 42", up.version, got)
		}
		// The sleep was interrupted: the context runs code at once.
		if got := runCode(t, ctx, c, busy.ID, "6 * 7"); got != "42" {
			t.Errorf("the busy context after the upgrade to %s: %q", up.version, got)
		}
		fresh, err := c.CreateContext(ctx, client.ContextOptions{Language: "python"})
		if err != nil {
			t.Fatalf("CreateContext after the upgrade to %s: %v\n%s", up.version, err, e.stderr)
		}
		if got := runCode(t, ctx, c, fresh.ID, "1 + 2"); got != "3" {
			t.Errorf("a new context after the upgrade to %s: %q, want 3", up.version, got)
		}
		ids = append(ids, fresh.ID)
	}
	// Its stream was cut by the exec; reattaching, the client learns that
	// the upgrade ended it.
	res, err := sleeping.Wait()
	if err == nil || !strings.Contains(err.Error(), "envd was upgraded while it ran") {
		t.Errorf("the execution in flight at the upgrade ended %+v, %v; want an error saying the upgrade ended it", res, err)
	}
}

// TestJupyterStopsWithEnvd: the Jupyter server outlives the exec of an
// upgrade, but not envd's death: killed, envd leaves no server running.
func TestJupyterStopsWithEnvd(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{jupyter: true, args: []string{"-warm-kernels", "python=0"}})
	c := client.New(client.Options{Addr: e.url})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), codeTimeout)
	defer cancel()
	if got := runCode(t, ctx, c, "", "1 + 1"); got != "2" {
		t.Fatalf("1 + 1: %q", got)
	}
	server := jupyterServerPid(t, e.cmd.Process.Pid)
	if server == 0 {
		t.Fatal("no Jupyter server among envd's children")
	}
	isServer := func() bool {
		cmd, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(server), "cmdline"))
		stat, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(server), "stat"))
		zombie := strings.Contains(string(stat), ") Z ")
		return strings.Contains(string(cmd), "jupyter_server") && !zombie
	}
	t.Cleanup(func() {
		if isServer() {
			syscall.Kill(server, syscall.SIGKILL)
		}
	})
	if err := e.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-e.exited
	if !testutil.PollFor(startTimeout, func() bool { return !isServer() }) {
		t.Errorf("the Jupyter server (pid %d) still runs after envd was killed", server)
	}
}
