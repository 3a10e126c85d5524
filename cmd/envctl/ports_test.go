package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/envd-dev/envd/client"
)

// TestPortsUsage: mistakes in the command line are reported before envd
// is asked anything (the address reaches nothing).
func TestPortsUsage(t *testing.T) {
	t.Parallel()
	for args, want := range map[string]string{
		"ports extra":            `ports: unexpected argument "extra"`,
		"ports --family ipx":     `ports: --family "ipx": give ipv4 or ipv6`,
		"ports --port 80,0":      `ports: --port "80,0": "0" is not a port (1-65535)`,
		"ports --port 70000":     `"70000" is not a port (1-65535)`,
		"ports --port http":      `"http" is not a port`,
		"ports --pid -4 --watch": "ports: --pid -4: give a process id",
	} {
		var out, errb bytes.Buffer
		code := Main(append([]string{"--addr", "http://127.0.0.1:1"}, strings.Fields(args)...), nil, &out, &errb)
		if code != exitUsage || out.Len() != 0 || !strings.Contains(errb.String(), want) {
			t.Errorf("envctl %s: exit %d, stdout %q, stderr %q; want %d and %q", args, code, out.String(), errb.String(), exitUsage, want)
		}
	}
}

func TestDescribePort(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p    client.Port
		want string
	}{
		{client.Port{Address: "127.0.0.1", Port: 8080, PID: 12, Process: "python3", Loopback: true, Forwarded: true, ForwardedFrom: []string{"10.0.0.2:8080"}},
			"127.0.0.1 port 8080 pid 12 (python3) forwarded from 10.0.0.2:8080"},
		{client.Port{Address: "::1", Port: 3000, Loopback: true, ForwardFailures: []client.PortFailure{{From: "10.0.0.2:3000", Message: "in use"}}},
			"::1 port 3000 forwarded from 10.0.0.2:3000 (failed: in use)"},
		{client.Port{Address: "127.0.0.1", Port: 49983, PID: 1, Process: "envd", Loopback: true, Envd: true, Private: "envd"},
			"127.0.0.1 port 49983 pid 1 (envd) (private: envd)"},
		{client.Port{Address: "127.0.0.1", Port: 41234, PID: 7, Process: "python", Loopback: true, Envd: true, Private: "kernel"},
			"127.0.0.1 port 41234 pid 7 (python) (private: kernel)"},
		// An envd that predates Private says only that a listener is its.
		{client.Port{Address: "127.0.0.1", Port: 8888, PID: 5, Process: "python3", Loopback: true, Envd: true},
			"127.0.0.1 port 8888 pid 5 (python3) (private: envd)"},
		{client.Port{Address: "0.0.0.0", Port: 80}, "0.0.0.0 port 80"},
	} {
		if got := describePort(c.p); got != c.want {
			t.Errorf("describePort(%+v) = %q, want %q", c.p, got, c.want)
		}
	}
}

// TestPrintPortsPrivate: the table has a PRIVATE column only with --all,
// and the JSON says whose each listener is.
func TestPrintPortsPrivate(t *testing.T) {
	t.Parallel()
	ps := []client.Port{
		{Address: "127.0.0.1", Port: 8000, PID: 9, Process: "python3", Loopback: true, Forwarded: true, ForwardedFrom: []string{"10.0.0.2:8000"}},
		{Address: "127.0.0.1", Port: 41234, PID: 7, Process: "python", Loopback: true, Envd: true, Private: "kernel"},
	}
	var b bytes.Buffer
	if err := printPorts(&b, ps[:1], false); err != nil {
		t.Fatal(err)
	}
	if want := "PORT  ADDRESS    PID  PROCESS  FORWARDED FROM\n8000  127.0.0.1  9    python3  10.0.0.2:8000\n"; b.String() != want {
		t.Errorf("without --all:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	if err := printPorts(&b, ps, true); err != nil {
		t.Fatal(err)
	}
	want := "PORT   ADDRESS    PID  PROCESS  PRIVATE  FORWARDED FROM\n" +
		"8000   127.0.0.1  9    python3  -        10.0.0.2:8000\n" +
		"41234  127.0.0.1  7    python   kernel   - (private)\n"
	if b.String() != want {
		t.Errorf("with --all:\n%s\nwant:\n%s", b.String(), want)
	}
	for _, p := range ps {
		j, err := json.Marshal(toPortJSON(p))
		if err != nil {
			t.Fatal(err)
		}
		if want := `"private":"` + p.Private + `"`; !strings.Contains(string(j), want) || strings.Contains(string(j), `"envd":true`) != (p.Private != "") {
			t.Errorf("JSON of %+v: %s, want %s and envd %v", p, j, want, p.Private != "")
		}
	}
}

// TestWatchShown: a watch without --all leaves the private listeners
// out; one shown that becomes private is shown once more, one that stops
// being private shows as opened.
func TestWatchShown(t *testing.T) {
	t.Parallel()
	user := client.Port{Address: "127.0.0.1", Port: 8000, PID: 9}
	kernel := client.Port{Address: "127.0.0.1", Port: 41234, PID: 7, Envd: true, Private: "kernel"}
	s := watchShown{}
	s.snapshot([]client.Port{user})
	for i, step := range []struct {
		ch       client.PortChange
		shown    bool
		wantKind string
	}{
		{client.PortChange{Kind: "opened", Port: kernel}, false, ""},
		{client.PortChange{Kind: "updated", Port: kernel}, false, ""},
		{client.PortChange{Kind: "closed", Port: kernel}, false, ""},
		{client.PortChange{Kind: "updated", Port: user}, true, "updated"},
		{client.PortChange{Kind: "updated", Port: client.Port{Address: "127.0.0.1", Port: 8000, PID: 9, Envd: true, Private: "kernel"}}, true, "updated"},
		{client.PortChange{Kind: "updated", Port: client.Port{Address: "127.0.0.1", Port: 8000, PID: 9, Envd: true, Private: "kernel"}}, false, ""},
		{client.PortChange{Kind: "updated", Port: user}, true, "opened"},
		{client.PortChange{Kind: "closed", Port: user}, true, "closed"},
		{client.PortChange{Kind: "opened", Port: user}, true, "opened"},
	} {
		ch := step.ch
		if got := s.pass(&ch); got != step.shown || (got && ch.Kind != step.wantKind) {
			t.Errorf("step %d, %s %+v: shown %v as %q, want %v as %q", i, step.ch.Kind, step.ch.Port, got, ch.Kind, step.shown, step.wantKind)
		}
	}
}
