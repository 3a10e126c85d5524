package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/internal/testutil"
)

// kernelFacts is what the cell of TestPortsPrivate prints about its
// kernel: its pid, its parent's (the Jupyter server), its ZeroMQ channels'
// ports (the connection file's), ipykernel's IOPub pipe (not in the
// connection file), and the user's subprocess server's pid.
type kernelFacts struct {
	PID      int   `json:"pid"`
	Server   int   `json:"server"`
	Channels []int `json:"channels"`
	Pipe     int   `json:"pipe"`
	Sub      int   `json:"sub"`
}

// privateCell starts, from a kernel cell, two servers of the user's on
// 127.0.0.1 (an http.server in a subprocess, and one in a thread of the
// kernel process itself, as a Flask app run in a notebook is), and prints
// the kernel's facts.
const privateCell = `
import functools, http.server, json, os, subprocess, sys, threading
from ipykernel import get_connection_info
info = json.loads(get_connection_info())
sub = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", %[1]q, "%[2]d"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
srv = http.server.ThreadingHTTPServer(("127.0.0.1", %[3]d), functools.partial(http.server.SimpleHTTPRequestHandler, directory=%[1]q))
threading.Thread(target=srv.serve_forever, daemon=True).start()
print(json.dumps({"pid": os.getpid(), "server": os.getppid(), "sub": sub.pid,
                  "pipe": get_ipython().kernel.iopub_thread._pipe_port,
                  "channels": [info[k] for k in ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")]}))
`

// ctlPort is a listener as `envctl ports --json` prints it.
type ctlPort struct {
	Port          int      `json:"port"`
	Address       string   `json:"address"`
	PID           int      `json:"pid"`
	Envd          bool     `json:"envd"`
	Private       string   `json:"private"`
	Forwarded     bool     `json:"forwarded"`
	ForwardedFrom []string `json:"forwarded_from"`
}

// TestPortsPrivate: envd forwarding ports, with Jupyter, in a network
// namespace of its own. Every listener of a kernel that carries its line
// to the Jupyter server (its five channels, from the connection file, and
// ipykernel's IOPub pipe, on a random port the file does not name), the
// Jupyter server's own port and envd's are private: never forwarded, left
// out by `envctl ports`, shown by `envctl ports --all` marked kernel,
// jupyter or envd. Servers the user starts from a cell, in a subprocess
// or in the kernel process itself, are the user's: forwarded (they answer
// at the external address) and listed. Two contexts: each kernel has a
// pipe of its own.
func TestPortsPrivate(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{netns: true, jupyter: true, args: []string{"-forward-ports=true"}})
	c := client.New(client.Options{Dialer: client.Unix(e.sock)})
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), codeTimeout)
	defer cancel()

	// Not t.TempDir: the kernels run as envd's default user, who must
	// reach the directory.
	dir, err := os.MkdirTemp("", "envd-ports-private-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const body = "the user's\n"
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}

	cc, err := c.CreateContext(ctx, client.ContextOptions{Language: "python"})
	if err != nil {
		t.Fatalf("CreateContext: %v\n%s", err, e.stderr)
	}
	// The namespace is the test's own: no other listener has these ports.
	userPorts := []int{8741, 8742, 8743, 8744}
	var kernels []kernelFacts
	for i, contextID := range []string{"", cc.ID} {
		sub, thread := userPorts[2*i], userPorts[2*i+1]
		ex, err := c.Execute(ctx, fmt.Sprintf(privateCell, dir, sub, thread), client.ExecOptions{ContextID: contextID})
		if err != nil {
			t.Fatalf("Execute: %v\n%s", err, e.stderr)
		}
		res, err := ex.Wait()
		if err != nil || res.Reason != client.EndOK {
			t.Fatalf("the cell: %v, %+v\n%s", err, res, e.stderr)
		}
		var k kernelFacts
		if err := json.Unmarshal([]byte(res.Stdout), &k); err != nil || len(k.Channels) != 5 || k.Pipe == 0 {
			t.Fatalf("the cell printed %q: %v", res.Stdout, err)
		}
		if p, ok := readProc(k.Sub); ok {
			t.Cleanup(p.killIfSame)
		}
		kernels = append(kernels, k)
	}
	if kernels[0].PID == kernels[1].PID || kernels[0].Pipe == kernels[1].Pipe {
		t.Fatalf("the two contexts share a kernel: %+v", kernels)
	}

	// The user's servers are forwarded: wait for every one.
	var last []client.Port
	if !testutil.PollFor(startTimeout, func() bool {
		last, err = c.ListPorts(ctx, client.PortFilter{Ports: userPorts})
		if err != nil || len(last) != len(userPorts) {
			return false
		}
		for _, p := range last {
			if !slices.Contains(p.ForwardedFrom, fmt.Sprintf("%s:%d", netnsAddr, p.Port)) {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the user's servers %v not all forwarded: %+v, %v\n%s", userPorts, last, err, e.stderr)
	}
	for _, p := range last {
		i := slices.Index(userPorts, p.Port)
		want := kernels[i/2].PID // in the kernel process
		if i%2 == 0 {
			want = kernels[i/2].Sub // in a subprocess
		}
		if p.PID != want || p.Envd {
			t.Errorf("the user's server on %d: %+v, want pid %d, not private", p.Port, p, want)
		}
	}
	curl := func(port int) (*client.RunResult, error) {
		return c.Run(ctx, client.Command{Name: "curl", Args: []string{"-sS", "--max-time", "10", fmt.Sprintf("http://%s:%d/hello.txt", netnsAddr, port)}})
	}
	for _, port := range userPorts {
		if res, err := curl(port); err != nil || !res.Exit.Success() || string(res.Stdout) != body {
			t.Errorf("curl the user's server through %s:%d: %v, %s", netnsAddr, port, err, describeRun(res))
		}
	}

	// The private ones: each kernel's channels and pipe, the server's
	// port, envd's own.
	all, err := c.ListPorts(ctx, client.PortFilter{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{} // port -> whose
	for _, k := range kernels {
		for _, port := range append(slices.Clone(k.Channels), k.Pipe) {
			want[port] = "kernel"
		}
	}
	for _, p := range all {
		switch {
		case p.PID == kernels[0].Server:
			want[p.Port] = "jupyter"
		case p.PID == e.cmd.Process.Pid:
			want[p.Port] = "envd"
		}
	}
	if !slices.ContainsFunc(all, func(p client.Port) bool { return want[p.Port] == "jupyter" }) ||
		!slices.ContainsFunc(all, func(p client.Port) bool { return want[p.Port] == "envd" }) {
		t.Errorf("the Jupyter server (pid %d) or envd (pid %d) listens on nothing: %+v", kernels[0].Server, e.cmd.Process.Pid, all)
	}
	for _, p := range all {
		if whose, ok := want[p.Port]; ok && (p.Forwarded || len(p.ForwardFailures) > 0 || !p.Envd) {
			t.Errorf("%s's listener %s:%d (pid %d) forwarded or not private: %+v", whose, p.Address, p.Port, p.PID, p)
		}
	}
	for port, whose := range want {
		if whose != "kernel" {
			continue
		}
		// Nothing answers at the external address (curl's 7: refused).
		if res, err := curl(port); err != nil || res.Exit.Code != 7 {
			t.Errorf("curl %s's port %d through %s: %v, %s; want exit 7 (refused)", whose, port, netnsAddr, err, describeRun(res))
		}
	}

	// envctl ports: the user's, not the private ones; --all: every one,
	// the private ones marked.
	ctlList := func(args ...string) []ctlPort {
		t.Helper()
		r := envctl(t, nil, nil, append([]string{"--unix", e.sock, "ports", "--json"}, args...)...)
		var ps []ctlPort
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &ps) != nil {
			t.Errorf("envctl ports --json %s: %+v", strings.Join(args, " "), r)
		}
		return ps
	}
	listed := ctlList()
	for _, port := range userPorts {
		if !slices.ContainsFunc(listed, func(p ctlPort) bool { return p.Port == port && p.Forwarded && p.Private == "" }) {
			t.Errorf("envctl ports: the user's server on %d not listed as forwarded: %+v", port, listed)
		}
	}
	// The namespace is the test's own: nothing else of the workload's
	// listens in it.
	for _, p := range listed {
		if whose, ok := want[p.Port]; ok {
			t.Errorf("envctl ports lists %s's listener %s:%d (pid %d)", whose, p.Address, p.Port, p.PID)
		} else if !slices.Contains(userPorts, p.Port) {
			t.Errorf("envctl ports lists %s:%d (pid %d), not the user's", p.Address, p.Port, p.PID)
		}
	}
	listed = ctlList("--all")
	for port, whose := range want {
		if !slices.ContainsFunc(listed, func(p ctlPort) bool { return p.Port == port && p.Private == whose && p.Envd && !p.Forwarded }) {
			t.Errorf("envctl ports --all: port %d not listed as private %q: %+v", port, whose, listed)
		}
	}
	for _, port := range userPorts {
		if !slices.ContainsFunc(listed, func(p ctlPort) bool { return p.Port == port && p.Forwarded && p.Private == "" }) {
			t.Errorf("envctl ports --all: the user's server on %d not listed as forwarded: %+v", port, listed)
		}
	}

	// The tables: a pipe's line only with --all, in the PRIVATE column.
	pipeLine := regexp.MustCompile(fmt.Sprintf(`(?m)^%d +127\.0\.0\.1 +%d +\S+ +kernel +- \(private\)$`, kernels[0].Pipe, kernels[0].PID))
	r := envctl(t, nil, nil, "--unix", e.sock, "ports")
	if r.code != 0 || strings.Contains(r.stdout, "PRIVATE") || strings.Contains(r.stdout, fmt.Sprintf("\n%d ", kernels[0].Pipe)) {
		t.Errorf("envctl ports: %+v; want no PRIVATE column, no pipe", r)
	}
	if r = envctl(t, nil, nil, "--unix", e.sock, "ports", "--all"); r.code != 0 || !strings.HasPrefix(r.stdout, "PORT ") || !strings.Contains(r.stdout, " PRIVATE ") || !pipeLine.MatchString(r.stdout) {
		t.Errorf("envctl ports --all: %+v; want the pipe's line matching %s", r, pipeLine)
	}
}

// describeRun says how a run ended and what it printed.
func describeRun(r *client.RunResult) string {
	if r == nil {
		return "no result"
	}
	return fmt.Sprintf("%s, stdout %q, stderr %q", r.Exit, r.Stdout, r.Stderr)
}
