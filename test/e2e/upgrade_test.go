package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/gen/process/processconnect"
	"github.com/envd-dev/envd/internal/testutil"
)

// Live upgrade (docs/upgrade.md): the tests build two envds, "e2e-old" and
// "e2e-new" (a test build: its handover test hooks read the
// ENVD_TEST_HANDOVER_* variables of the envd it replaces), and replace a
// running one by the other under a workload.

const (
	oldVersion   = "e2e-old"
	newVersion   = "e2e-new"
	upgradeToken = "upgrade-token"
)

var upgradeBins struct {
	once     sync.Once
	dir      string
	old, new string
	err      error
}

// upgradeBinaries builds the two envds once, root's and 0755 in a private
// directory, as an upgrade wants them.
func upgradeBinaries(t *testing.T) (dir, oldBin, newBin string) {
	t.Helper()
	b := &upgradeBins
	b.once.Do(func() {
		b.dir, b.err = os.MkdirTemp("", "envd-upgrade-")
		if b.err != nil {
			return
		}
		build := func(name, ldflags string) string {
			if b.err != nil {
				return ""
			}
			bin := filepath.Join(b.dir, name)
			args := []string{"build", "-o", bin, "-ldflags", ldflags}
			if testutil.RaceEnabled {
				args = append(args, "-race")
			}
			out, err := exec.Command("go", append(args, "github.com/envd-dev/envd/cmd/envd")...).CombinedOutput()
			if err != nil {
				b.err = fmt.Errorf("build %s: %v\n%s", name, err, out)
			}
			return bin
		}
		const ver = "-X github.com/envd-dev/envd/buildinfo.version="
		b.old = build("envd-old", ver+oldVersion)
		b.new = build("envd-new", ver+newVersion+" -X github.com/envd-dev/envd/internal/handover.testHooks=1")
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.dir, b.old, b.new
}

func removeUpgradeBinaries() {
	if upgradeBins.dir != "" {
		os.RemoveAll(upgradeBins.dir)
	}
}

// tokenTransport sends the access token with every request.
type tokenTransport struct {
	base  http.RoundTripper
	token string
}

func (tt tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Access-Token", tt.token)
	return tt.base.RoundTrip(r)
}

func tokenClient(t *testing.T, timeout time.Duration) *http.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tokenTransport{tr, upgradeToken}, Timeout: timeout}
}

// startOld starts the old envd with the token and extra environment.
func startOld(t *testing.T, bin string, env ...string) *envd {
	t.Helper()
	return startEnvd(t, startOptions{bin: bin, env: append([]string{"ENVD_ACCESS_TOKEN=" + upgradeToken}, env...)})
}

// postUpgrade posts body to /upgrade, with the token when withToken.
func postUpgrade(t *testing.T, e *envd, body string, withToken bool) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.url+"/upgrade", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if withToken {
		req.Header.Set("X-Access-Token", upgradeToken)
	}
	resp, err := httpClient(t).Do(req)
	if err != nil {
		t.Fatalf("POST /upgrade: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// healthVersion is /health's X-Envd-Version, "" when envd does not answer.
func healthVersion(e *envd) string {
	c := &http.Client{Timeout: requestTimeout}
	defer c.CloseIdleConnections()
	resp, err := c.Get(e.url + "/health")
	if err != nil {
		return ""
	}
	resp.Body.Close()
	return resp.Header.Get("X-Envd-Version")
}

type upgradeState struct {
	Version   string `json:"version"`
	Pid       int    `json:"pid"`
	Upgrading bool   `json:"upgrading"`
	Last      *struct {
		Result, From, To, Error, Via string
	} `json:"last"`
}

func getUpgrade(t *testing.T, e *envd) (upgradeState, bool) {
	t.Helper()
	var st upgradeState
	resp, err := tokenClient(t, requestTimeout).Get(e.url + "/upgrade")
	if err != nil {
		return st, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, false
	}
	return st, json.NewDecoder(resp.Body).Decode(&st) == nil
}

// waitUpgraded waits until GET /upgrade reports result, and returns it.
func waitUpgraded(t *testing.T, e *envd, result string) upgradeState {
	t.Helper()
	var st upgradeState
	if !testutil.PollFor(startTimeout, func() bool {
		if !e.alive() {
			return true
		}
		var ok bool
		st, ok = getUpgrade(t, e)
		return ok && st.Last != nil && st.Last.Result == result
	}) || !e.alive() {
		t.Fatalf("no upgrade result %q: last state %+v\nstderr:\n%s", result, st, e.stderr)
	}
	return st
}

// counterCmd prints 0, 1, 2... every 50 ms.
const counterCmd = `i=0; while :; do echo $i; i=$((i+1)); sleep 0.05; done`

// startCounter starts the counter, tagged "counter", and returns its pid
// once it printed at least n numbers.
func startCounter(t *testing.T, pc processconnect.ProcessClient, n int) uint32 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tag := "counter"
	stream, err := pc.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", counterCmd}}, Tag: &tag}))
	if err != nil {
		t.Fatal(err)
	}
	var pid uint32
	var out strings.Builder
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if s := ev.GetStart(); s != nil {
			pid = s.GetPid()
		}
		out.Write(ev.GetData().GetStdout())
		if strings.Count(out.String(), "\n") >= n {
			break
		}
	}
	if pid == 0 || strings.Count(out.String(), "\n") < n {
		t.Fatalf("counter: pid %d, output %q, err %v", pid, out.String(), stream.Err())
	}
	// The stream stays open across the upgrade, which cuts it.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for stream.Receive() {
		}
		stream.Close()
	}()
	t.Cleanup(func() { cancel(); <-done })
	return pid
}

// checkCounter reconnects to the counter by its tag and reads until it
// printed past beyond; the replay must have every number from 0 on.
func checkCounter(t *testing.T, pc processconnect.ProcessClient, beyond int) {
	t.Helper()
	ctx := testutil.Context(t, startTimeout)
	tag := "counter"
	stream, err := pc.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}}}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var out strings.Builder
	last := -1
	for last <= beyond && stream.Receive() {
		out.Write(stream.Msg().GetEvent().GetData().GetStdout())
		lines := strings.Split(out.String(), "\n")
		for _, l := range lines[:len(lines)-1] {
			n, err := strconv.Atoi(l)
			if err != nil || n != last+1 {
				t.Fatalf("counter replay: after %d comes %q: a gap or a repeat\noutput:\n%s", last, l, out.String())
			}
			last = n
		}
		out.Reset()
		out.WriteString(lines[len(lines)-1])
	}
	if last <= beyond {
		t.Fatalf("counter stopped at %d, want past %d: %v", last, beyond, stream.Err())
	}
}

// counterNow is the last number the counter printed, from a fresh replay.
func counterNow(t *testing.T, pc processconnect.ProcessClient) int {
	t.Helper()
	ctx, cancel := context.WithCancel(testutil.Context(t, requestTimeout))
	defer cancel()
	tag := "counter"
	stream, err := pc.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}}}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var out strings.Builder
	for stream.Receive() {
		out.Write(stream.Msg().GetEvent().GetData().GetStdout())
		if strings.HasSuffix(out.String(), "\n") {
			break
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	n, _ := strconv.Atoi(lines[len(lines)-1])
	return n
}

// startShell starts bash on a terminal, tagged "shell".
func startShell(t *testing.T, pc processconnect.ProcessClient) uint32 {
	t.Helper()
	tag := "shell"
	return startProcess(t, pc, &pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"--norc", "-i"}},
		Pty:     &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}},
		Tag:     &tag,
	})
}

// answer42 is 42 on a line of its own (after the echoed command line and,
// with bracketed paste, its escape sequence).
var answer42 = regexp.MustCompile(`[\r\n]42\r\n`)

// checkShell types echo $((40+2)) into the shell and waits for 42.
func checkShell(t *testing.T, pc processconnect.ProcessClient) {
	t.Helper()
	ctx := testutil.Context(t, startTimeout)
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "shell"}}
	stream, err := pc.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: sel}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("connect to the shell: %v", stream.Err())
	}
	if _, err := pc.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte("echo $((40+2))\n")}}})); err != nil {
		t.Fatalf("send input to the shell: %v", err)
	}
	var out bytes.Buffer
	for stream.Receive() {
		out.Write(stream.Msg().GetEvent().GetData().GetPty())
		if answer42.Match(out.Bytes()) {
			return
		}
	}
	t.Fatalf("the shell did not answer 42: %v\noutput: %q", stream.Err(), out.String())
}

// checkEnded reconnects to an ended process (still retained) by tag: its
// output and its end come across the upgrade.
func checkEnded(t *testing.T, pc processconnect.ProcessClient, tag string) {
	t.Helper()
	stream, err := pc.Connect(testutil.Context(t, requestTimeout), connect.NewRequest(&pb.ConnectRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}}}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var out strings.Builder
	var end *pb.ProcessEvent_EndEvent
	for stream.Receive() {
		out.Write(stream.Msg().GetEvent().GetData().GetStdout())
		if e := stream.Msg().GetEvent().GetEnd(); e != nil {
			end = e
		}
	}
	if out.String() != "ended-before\n" || end.GetExitCode() != 3 {
		t.Errorf("the ended process after the upgrade: output %q, end %v, err %v", out.String(), end, stream.Err())
	}
}

func listPids(t *testing.T, pc processconnect.ProcessClient) map[uint32]bool {
	t.Helper()
	resp, err := pc.List(testutil.Context(t, requestTimeout), connect.NewRequest(&pb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	pids := map[uint32]bool{}
	for _, p := range resp.Msg.GetProcesses() {
		pids[p.GetPid()] = true
	}
	return pids
}

// TestUpgrade replaces a running envd by POST /upgrade under a counter and
// a terminal: same pid, the new version, the counter's replay whole across
// the upgrade and going on, the shell answering.
func TestUpgrade(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("an upgrade wants a root-owned binary: run as root")
	}
	_, oldBin, newBin := upgradeBinaries(t)
	e := startOld(t, oldBin)
	pc := processClient(streamClientToken(t), e.url)
	counter := startCounter(t, pc, 5)
	shell := startShell(t, pc)
	ended := "ended"
	if out, end, err := run(testutil.Context(t, requestTimeout), pc, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo ended-before; exit 3"}}, Tag: &ended}); err != nil || end.GetExitCode() != 3 || out != "ended-before\n" {
		t.Fatalf("a process that ends before the upgrade: %q, %v, %v", out, end, err)
	}
	before := counterNow(t, pc)

	code, body := postUpgrade(t, e, fmt.Sprintf(`{"path": %q}`, newBin), true)
	if code != http.StatusAccepted {
		t.Fatalf("POST /upgrade: %d %s", code, body)
	}
	if !strings.Contains(body, `"to":"`+newVersion+`"`) {
		t.Errorf("POST /upgrade's answer %s does not name %s", body, newVersion)
	}
	if !testutil.PollFor(startTimeout, func() bool { return healthVersion(e) == newVersion || !e.alive() }) || !e.alive() {
		t.Fatalf("/health never said %s\nstderr:\n%s", newVersion, e.stderr)
	}
	st := waitUpgraded(t, e, "upgraded")
	if st.Pid != e.cmd.Process.Pid || st.Version != newVersion || st.Last.From != oldVersion {
		t.Errorf("GET /upgrade: %+v, want pid %d, version %s from %s", st, e.cmd.Process.Pid, newVersion, oldVersion)
	}
	if pids := listPids(t, pc); !pids[counter] || !pids[shell] {
		t.Errorf("processes after the upgrade: %v, want %d and %d", pids, counter, shell)
	}
	checkCounter(t, pc, before+10)
	checkShell(t, pc)
	checkEnded(t, pc, ended)
	out, err := exec.Command(newBin, "-version").Output()
	if err != nil || !strings.Contains(string(out), newVersion) {
		t.Errorf("%s -version: %q, %v", newBin, out, err)
	}
	// The new envd upgrades again (back to the old binary).
	code, body = postUpgrade(t, e, fmt.Sprintf(`{"path": %q}`, oldBin), true)
	if code != http.StatusAccepted {
		t.Fatalf("second POST /upgrade: %d %s", code, body)
	}
	if !testutil.PollFor(startTimeout, func() bool { return healthVersion(e) == oldVersion || !e.alive() }) || !e.alive() {
		t.Fatalf("/health never said %s again\nstderr:\n%s", oldVersion, e.stderr)
	}
	checkCounter(t, pc, counterNow(t, pc)+5)
	checkShell(t, pc)
}

// streamClientToken is streamClient with the token.
func streamClientToken(t *testing.T) *http.Client { return tokenClient(t, 0) }

// TestUpgradeSIGUSR2 replaces envd's binary on disk, then signals it.
func TestUpgradeSIGUSR2(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("an upgrade wants a root-owned binary: run as root")
	}
	dir, oldBin, newBin := upgradeBinaries(t)
	own := t.TempDir()
	if err := os.Chmod(own, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(own, "envd")
	copyFile(t, oldBin, path, 0o755)
	_ = dir
	e := startOld(t, path)
	pc := processClient(streamClientToken(t), e.url)
	startCounter(t, pc, 3)
	before := counterNow(t, pc)
	// As a package manager replaces a binary: a new file renamed over it.
	copyFile(t, newBin, path+".new", 0o755)
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	if err := e.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	if !testutil.PollFor(startTimeout, func() bool { return healthVersion(e) == newVersion || !e.alive() }) || !e.alive() {
		t.Fatalf("/health never said %s after SIGUSR2\nstderr:\n%s", newVersion, e.stderr)
	}
	checkCounter(t, pc, before+5)
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(to, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// TestUpgradeRefused: bad requests and bad binaries get precise errors, and
// the old envd serves on unchanged.
func TestUpgradeRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("an upgrade wants a root-owned binary: run as root")
	}
	_, oldBin, newBin := upgradeBinaries(t)
	dir := t.TempDir()
	bad := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	script := bad("script", "#!/bin/sh\necho garbage\n", 0o755)
	echo := filepath.Join(dir, "echo")
	copyFile(t, "/bin/echo", echo, 0o755)
	notExec := filepath.Join(dir, "noexec")
	copyFile(t, newBin, notExec, 0o644)
	writable := filepath.Join(dir, "writable")
	copyFile(t, newBin, writable, 0o757)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(newBin, link); err != nil {
		t.Fatal(err)
	}
	// The new build claims to read only schema 2 (its test hook).
	e := startOld(t, oldBin, "ENVD_TEST_HANDOVER_READS=2-2")
	pc := processClient(streamClientToken(t), e.url)
	counter := startCounter(t, pc, 3)

	for _, tc := range []struct {
		name, body string
		noToken    bool
		code       int
		want       string
	}{
		{name: "no token", body: fmt.Sprintf(`{"path": %q}`, oldBin), noToken: true, code: 401, want: "access token"},
		{name: "not json", body: `{"path": `, code: 400, want: "invalid /upgrade body"},
		{name: "unknown field", body: `{"binary": "/x"}`, code: 400, want: "unknown field"},
		{name: "no path", body: `{}`, code: 400, want: "path is missing"},
		{name: "relative path", body: `{"path": "bin/envd"}`, code: 400, want: "is relative"},
		{name: "bad sha256", body: fmt.Sprintf(`{"path": %q, "sha256": "xyz"}`, oldBin), code: 400, want: "want 64 hex digits"},
		{name: "missing file", body: fmt.Sprintf(`{"path": %q}`, filepath.Join(dir, "nope")), code: 422, want: "no such file"},
		{name: "not executable", body: fmt.Sprintf(`{"path": %q}`, notExec), code: 422, want: "is not executable"},
		{name: "world-writable", body: fmt.Sprintf(`{"path": %q}`, writable), code: 422, want: "writable by its group or by others"},
		{name: "symbolic link", body: fmt.Sprintf(`{"path": %q}`, link), code: 422, want: "is a symbolic link"},
		{name: "wrong sha256", body: fmt.Sprintf(`{"path": %q, "sha256": %q}`, oldBin, strings.Repeat("0", 64)), code: 422, want: "not the 0000"},
		{name: "script", body: fmt.Sprintf(`{"path": %q}`, script), code: 422, want: "not an ELF executable"},
		{name: "prints garbage", body: fmt.Sprintf(`{"path": %q}`, echo), code: 422, want: "not an envd's handover check line"},
		{name: "newer schema", body: fmt.Sprintf(`{"path": %q}`, newBin), code: 422, want: "reads handover schemas 2 to 2, and this envd writes schema 1"},
	} {
		code, body := postUpgrade(t, e, tc.body, !tc.noToken)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want %d with %q", tc.name, code, body, tc.code, tc.want)
		}
	}
	if v := healthVersion(e); v != oldVersion {
		t.Errorf("/health says %q after the refusals, want %s", v, oldVersion)
	}
	st, ok := getUpgrade(t, e)
	if !ok || st.Last == nil || st.Last.Result != "refused" || st.Upgrading {
		t.Errorf("GET /upgrade: %+v", st)
	}
	if pids := listPids(t, pc); !pids[counter] {
		t.Errorf("the counter (%d) is gone: %v", counter, pids)
	}
	checkCounter(t, pc, counterNow(t, pc)+3)
}

// TestUpgradeRollback: a new envd that fails to adopt the workload (its
// test hook panics) execs the old one back, which keeps everything.
func TestUpgradeRollback(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("an upgrade wants a root-owned binary: run as root")
	}
	_, oldBin, newBin := upgradeBinaries(t)
	e := startOld(t, oldBin, "ENVD_TEST_HANDOVER_FAIL=panic")
	pc := processClient(streamClientToken(t), e.url)
	counter := startCounter(t, pc, 3)
	shell := startShell(t, pc)
	before := counterNow(t, pc)
	code, body := postUpgrade(t, e, fmt.Sprintf(`{"path": %q}`, newBin), true)
	if code != http.StatusAccepted {
		t.Fatalf("POST /upgrade: %d %s", code, body)
	}
	st := waitUpgraded(t, e, "rolled_back")
	if st.Version != oldVersion || !strings.Contains(st.Last.Error, "panic") || !strings.Contains(st.Last.Error, newVersion) {
		t.Errorf("GET /upgrade after the rollback: %+v", st)
	}
	if v := healthVersion(e); v != oldVersion {
		t.Errorf("/health says %q, want %s", v, oldVersion)
	}
	if pids := listPids(t, pc); !pids[counter] || !pids[shell] {
		t.Errorf("processes after the rollback: %v, want %d and %d", pids, counter, shell)
	}
	checkCounter(t, pc, before+5)
	checkShell(t, pc)
}
