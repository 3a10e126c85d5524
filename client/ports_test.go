package client_test

import (
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/internal/testutil"
)

// The shared envd does not forward (tests never forward the machine's
// addresses: internal/ports tests forwarding in a namespace of its own);
// it lists and watches the listeners all the same.
func TestPorts(t *testing.T) {
	c := client.New(client.Options{Addr: envdAddr})
	defer c.Close()
	ctx := testutil.Context(t, testutil.Wait)
	u, err := url.Parse(envdAddr)
	if err != nil {
		t.Fatal(err)
	}
	envdPort, _ := strconv.Atoi(u.Port())

	ps, err := c.ListPorts(ctx, client.PortFilter{Ports: []int{envdPort}, Family: "ipv4"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || !ps[0].Envd || ps[0].Address != "127.0.0.1" || ps[0].Forwarded || ps[0].Process != "envd" {
		t.Fatalf("envd's port: %+v, want envd's own listener on 127.0.0.1, not forwarded", ps)
	}

	w, err := c.WatchPorts(ctx, client.PortFilter{Family: "ipv4"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	for ch, err := range w.Changes() {
		if err != nil {
			t.Fatal(err)
		}
		if ch.Port.Port == port {
			if ch.Kind != "opened" || ch.Port.Envd || ch.Port.Forwarded || !ch.Port.Loopback {
				t.Errorf("the test's listener: %+v", ch)
			}
			break
		}
	}

	for f, want := range map[*client.PortFilter]string{
		{Ports: []int{0}}:   "ports[0] is 0: a port is 1-65535",
		{Family: "ipx"}:     `family "ipx": give ipv4, ipv6 or nothing`,
		{PID: -3}:           "pid -3 is not a process id",
		{Ports: []int{1e6}}: "ports[0] is 1000000",
	} {
		if _, err := c.ListPorts(ctx, *f); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), want) {
			t.Errorf("ListPorts(%+v): %v, want %q", *f, err, want)
		}
		if _, err := c.WatchPorts(ctx, *f); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), want) {
			t.Errorf("WatchPorts(%+v): %v, want %q", *f, err, want)
		}
	}
}
