package client_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"

	"connectrpc.com/connect"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/internal/testutil"
)

// TestErrorText: an Error is one line that says each thing once.
func TestErrorText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		e    client.Error
		want string
	}{
		// The subject of Op, repeated at the head of the message, goes.
		{client.Error{Op: "stat /no/such", Code: connect.CodeNotFound, Message: "/no/such: no such file or directory"},
			"stat /no/such: not found: no such file or directory"},
		// Another path is kept: it says which one.
		{client.Error{Op: "move /a to /b", Code: connect.CodeNotFound, Message: "/a: no such file or directory"},
			"move /a to /b: not found: /a: no such file or directory"},
		// A message that says the kind already is not labelled with it.
		{client.Error{Op: "send SIGTERM to process 9", Code: connect.CodeNotFound, Message: "process with pid 9 not found"},
			"send SIGTERM to process 9: process with pid 9 not found"},
		{client.Error{Op: "start foo", Code: connect.CodeInvalidArgument, Message: "foo: executable not found in PATH /usr/bin:/bin"},
			"start foo: invalid argument: executable not found in PATH /usr/bin:/bin"},
		{client.Error{Op: "download /x", Code: connect.CodeNotFound, Status: 404, Message: "path '/x' does not exist"},
			"download /x: not found (HTTP 404): path '/x' does not exist"},
		{client.Error{Op: "envs", Code: connect.CodeUnauthenticated, Status: 401, Message: "the access token in X-Access-Token is not this envd's"},
			"envs: unauthenticated (HTTP 401): the access token in X-Access-Token is not this envd's"},
		{client.Error{Op: "stat /x", Code: connect.CodePermissionDenied, Message: "permission denied: user 'u' may not access /x: permission denied"},
			"stat /x: user 'u' may not access /x: permission denied"},
		{client.Error{Op: "remove /x", Code: connect.CodeNotFound, Status: 404, Message: "no such thing, not found"},
			"remove /x: no such thing, not found (HTTP 404)"},
		// The code alone, and Op repeated.
		{client.Error{Op: "interrupt", Code: connect.CodeCanceled, Message: "canceled"}, "interrupt: canceled"},
		{client.Error{Op: "list processes", Code: connect.CodeInternal, Message: "list processes: boom"}, "list processes: internal: boom"},
		// A call that got no answer says why, unlabelled.
		{client.Error{Op: "health", Code: connect.CodeUnavailable, Message: "cannot reach envd at tcp 127.0.0.1:1: connection refused"},
			"health: cannot reach envd at tcp 127.0.0.1:1: connection refused"},
	}
	for _, tt := range tests {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("Error() = %q\n            want %q", got, tt.want)
		}
	}
}

// TestRefusedTokenReason: with a token envd does not take, every kind of
// call (Connect unary and streams, the HTTP API, the tunnel) fails as
// unauthenticated with envd's own reason, not a bare status.
func TestRefusedTokenReason(t *testing.T) {
	t.Parallel()
	d, err := startDaemon("", false, "-access-token", "right")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.stop(); err != nil {
			t.Error(err)
		}
	})
	c := newClient(t, client.Options{Addr: d.addr, Token: "wrong"})
	const reason = "the access token in X-Access-Token is not this envd's"
	calls := map[string]func(ctx context.Context) error{
		"Stat":     func(ctx context.Context) error { _, err := c.Stat(ctx, "/"); return err },
		"ListDir":  func(ctx context.Context) error { _, err := c.ListDir(ctx, "/", 1); return err },
		"MakeDir":  func(ctx context.Context) error { _, err := c.MakeDir(ctx, "/tmp/x"); return err },
		"Move":     func(ctx context.Context) error { _, err := c.Move(ctx, "/tmp/x", "/tmp/y"); return err },
		"Remove":   func(ctx context.Context) error { return c.Remove(ctx, "/tmp/x") },
		"Watch":    func(ctx context.Context) error { _, err := c.Watch(ctx, "/tmp", client.WatchOptions{}); return err },
		"Upload":   func(ctx context.Context) error { _, err := c.Upload(ctx, "/tmp/x", strings.NewReader("x")); return err },
		"Download": func(ctx context.Context) error { _, err := c.Download(ctx, "/etc/hostname"); return err },
		"UploadDir": func(ctx context.Context) error {
			return c.UploadDir(ctx, "/tmp/x", bytes.NewReader(make([]byte, 1024)))
		},
		"DownloadDir":   func(ctx context.Context) error { _, err := c.DownloadDir(ctx, "/etc"); return err },
		"Start":         func(ctx context.Context) error { _, err := c.Start(ctx, client.Command{Name: "true"}); return err },
		"ListProcesses": func(ctx context.Context) error { _, err := c.ListProcesses(ctx); return err },
		"Signal": func(ctx context.Context) error {
			return c.Signal(ctx, client.Selector{PID: 1}, syscall.SIGTERM)
		},
		"ListContexts": func(ctx context.Context) error { _, err := c.ListContexts(ctx); return err },
		"Languages":    func(ctx context.Context) error { _, err := c.Languages(ctx); return err },
		"Execute":      func(ctx context.Context) error { _, err := c.Execute(ctx, "1", client.ExecOptions{}); return err },
		"ListPackages": func(ctx context.Context) error {
			_, err := c.ListPackages(ctx, client.ManagerPip, client.PackageOptions{})
			return err
		},
		"InstallPackages": func(ctx context.Context) error {
			op, err := c.InstallPackages(ctx, client.ManagerPip, []client.PackageSpec{{Name: "x"}}, client.InstallOptions{})
			if err == nil {
				_, err = op.Wait()
			}
			return err
		},
		"ListPorts": func(ctx context.Context) error { _, err := c.ListPorts(ctx, client.PortFilter{}); return err },
		"DialPort":  func(ctx context.Context) error { _, err := c.DialPort(ctx, 8080); return err },
		"Envs":      func(ctx context.Context) error { _, err := c.Envs(ctx); return err },
		"Metrics":   func(ctx context.Context) error { _, err := c.Metrics(ctx); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := call(testContext(t, testutil.Wait))
			if !errors.Is(err, client.ErrUnauthenticated) || !strings.HasSuffix(err.Error(), ": "+reason) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%s with a wrong token: %v; want unauthenticated, ending with envd's reason %q", name, err, reason)
			}
		})
	}
}
