package main

import (
	"bytes"
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
		if code != exitFailed || out.Len() != 0 || !strings.Contains(errb.String(), want) {
			t.Errorf("envctl %s: exit %d, stdout %q, stderr %q; want %d and %q", args, code, out.String(), errb.String(), exitFailed, want)
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
		{client.Port{Address: "127.0.0.1", Port: 49983, PID: 1, Process: "envd", Loopback: true, Envd: true},
			"127.0.0.1 port 49983 pid 1 (envd) (envd's own)"},
		{client.Port{Address: "0.0.0.0", Port: 80}, "0.0.0.0 port 80"},
	} {
		if got := describePort(c.p); got != c.want {
			t.Errorf("describePort(%+v) = %q, want %q", c.p, got, c.want)
		}
	}
}
