package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/internal/testutil"
)

// TestUpgradeShellSessions: shell sessions survive a live upgrade, twice
// (to the new envd and back): the shell's state (cwd, variables,
// functions, aliases), a command running across the upgrade (its whole
// output and its exit code, replayed by Connect), a command waiting behind
// it (it runs after), a command reading its stdin (input sent before and
// after), and a session with a terminal; new commands and Interrupt work
// after.
func TestUpgradeShellSessions(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("an upgrade wants a root-owned binary: run as root")
	}
	_, oldBin, newBin := upgradeBinaries(t)
	e := startOld(t, oldBin)
	c := client.New(client.Options{Addr: e.url, Token: upgradeToken})
	defer c.Close()
	ctx := testutil.Context(t, codeTimeout)

	s, err := c.CreateShell(ctx, client.ShellOptions{Dir: "/tmp", Env: map[string]string{"FROM": "create"}, Tag: "upgraded"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	wantShell(t, "state", shellRun(t, s, `cd /var && export X=kept && Y=unexported && f() { echo "fn $1"; } && alias al='echo alias' && shopt -s extglob`, client.ShellRunOptions{}), 0, "", "")
	// Runs across the upgrade: a line a tenth of a second, on both streams.
	long, err := s.Start(ctx, `for i in $(seq 1 40); do echo "out $i"; echo "err $i" >&2; sleep 0.1; done; (exit 7)`, client.ShellRunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	queued, err := s.Start(ctx, `echo "queued $X"`, client.ShellRunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	in, err := c.CreateShell(ctx, client.ShellOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close(context.Background())
	reader, err := in.Start(ctx, `while read -r line; do echo "got $line"; done; echo eof`, client.ShellRunOptions{Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	waitRunning(t, in, reader)
	if err := reader.SendInput(ctx, []byte("before\n")); err != nil {
		t.Fatal(err)
	}
	term, err := c.CreateShell(ctx, client.ShellOptions{PTY: &client.Size{Cols: 80, Rows: 24}})
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close(context.Background())
	wantShell(t, "terminal", shellRun(t, term, `export T=tty; stty size`, client.ShellRunOptions{}), 0, "24 80\r\n", "")
	waitRunning(t, s, long)

	upgrade := func(bin, version string) {
		t.Helper()
		code, body := postUpgrade(t, e, fmt.Sprintf(`{"path": %q}`, bin), true)
		if code != http.StatusAccepted {
			t.Fatalf("POST /upgrade: %d %s", code, body)
		}
		if !testutil.PollFor(startTimeout, func() bool { return healthVersion(e) == version || !e.alive() }) || !e.alive() {
			t.Fatalf("/health never said %s\nstderr:\n%s", version, e.stderr)
		}
		waitUpgraded(t, e, "upgraded")
	}
	upgrade(newBin, newVersion)

	// The long command, from its start: every line, in order, and its end.
	replay, err := s.Connect(ctx, long.ID(), client.ShellRunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := replay.Wait()
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&out, "out %d\n", i)
		fmt.Fprintf(&errOut, "err %d\n", i)
	}
	wantShell(t, "the command across the upgrade", res, 7, out.String(), errOut.String())
	if res.LostBytes != 0 {
		t.Errorf("lost %d bytes", res.LostBytes)
	}
	replay, err = s.Connect(ctx, queued.ID(), client.ShellRunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := replay.Wait(); err != nil {
		t.Fatal(err)
	} else {
		wantShell(t, "the command queued across the upgrade", res, 0, "queued kept\n", "")
	}
	check := func(when string) {
		t.Helper()
		wantShell(t, "state "+when, shellRun(t, s, `echo "$PWD $X $Y $FROM"; f arg; al; shopt -q extglob && echo extglob; echo "$?"`, client.ShellRunOptions{}),
			0, "/var kept unexported create\nfn arg\nalias\nextglob\n0\n", "")
		wantShell(t, "terminal "+when, shellRun(t, term, `echo "$T"; tty >/dev/null && echo tty`, client.ShellRunOptions{}), 0, "tty\r\ntty\r\n", "")
		st, err := s.State(ctx)
		if err != nil || st.Dir != "/var" || st.Env["X"] != "kept" || st.Tag != "upgraded" || st.LastExitCode != 0 {
			t.Errorf("State %s: %+v %v", when, st, err)
		}
		// Interrupt still ends a command, and the session goes on.
		cmd, err := s.Start(ctx, `sleep 300; echo not-reached`, client.ShellRunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitRunning(t, s, cmd)
		if ok, err := cmd.Interrupt(ctx); !ok || err != nil {
			t.Fatalf("interrupt %s: %v %v", when, ok, err)
		}
		if res, err := cmd.Wait(); err != nil || res.Reason != client.ShellInterrupted || len(res.Stdout) != 0 {
			t.Errorf("interrupted %s: %v %v %q", when, res, err, res.Stdout)
		}
	}
	check("after the upgrade")

	// The reader got what was sent before; what is sent now reaches it.
	if err := reader.SendInput(ctx, []byte("after\n")); err != nil {
		t.Fatal(err)
	}
	if err := reader.CloseInput(ctx); err != nil {
		t.Fatal(err)
	}
	replay, err = in.Connect(ctx, reader.ID(), client.ShellRunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := replay.Wait(); err != nil {
		t.Fatal(err)
	} else {
		wantShell(t, "the reader across the upgrade", res, 0, "got before\ngot after\neof\n", "")
	}

	upgrade(oldBin, oldVersion)
	check("after the second upgrade")
	infos, err := c.ListShells(ctx)
	if err != nil || len(infos) != 3 {
		t.Errorf("ListShells after two upgrades: %+v %v", infos, err)
	}
}

// waitRunning waits until cmd is the command running in s.
func waitRunning(t *testing.T, s *client.ShellSession, cmd *client.ShellCommand) {
	t.Helper()
	testutil.Poll(t, "command "+cmd.ID()+" to start", func() bool {
		st, err := s.State(callCtx(t))
		return err == nil && st.Running != nil && st.Running.ID == cmd.ID()
	})
}
