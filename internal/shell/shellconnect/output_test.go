package shellconnect_test

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/envd/shell/v1"
	ppb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/internal/shell/shelltest"
)

// TestOutputExact: stdout and stderr come back apart and byte-exact: no
// final newline, every byte value, a megabyte without a newline.
func TestOutputExact(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shelltest.Options{}, &pb.CreateRequest{})
	r := e.runOK(`printf out1; printf err1 >&2; printf out2; printf 'err2\n' >&2`)
	if string(r.Stdout) != "out1out2" || string(r.Stderr) != "err1err2\n" {
		t.Errorf("stdout %q, stderr %q", r.Stdout, r.Stderr)
	}
	var all bytes.Buffer
	for i := range 256 {
		all.WriteByte(byte(i))
	}
	var esc strings.Builder
	for i := range 256 {
		fmt.Fprintf(&esc, `\x%02x`, i)
	}
	r = e.runOK(fmt.Sprintf(`printf '%s'; printf '%s' >&2`, esc.String(), esc.String()))
	if !bytes.Equal(r.Stdout, all.Bytes()) || !bytes.Equal(r.Stderr, all.Bytes()) {
		t.Errorf("every byte value: stdout %q, stderr %q", r.Stdout, r.Stderr)
	}
	r = e.runOK(`head -c 1048576 /dev/zero | tr '\0' x; printf tail`)
	if len(r.Stdout) != 1<<20+4 || strings.Trim(string(r.Stdout[:1<<20]), "x") != "" || string(r.Stdout[1<<20:]) != "tail" || r.End.GetLostBytes() != 0 {
		t.Errorf("1 MiB without a newline: %d bytes, ends %q, lost %d", len(r.Stdout), r.Stdout[max(len(r.Stdout)-8, 0):], r.End.GetLostBytes())
	}
	r = e.runOK(`true`)
	if len(r.Stdout)+len(r.Stderr) != 0 || r.Order != "se" {
		t.Errorf("a command that prints nothing: %s", r)
	}
}

// TestFramingAttacks: output that looks like envd's markers, or is one,
// is the command's output, whole.
func TestFramingAttacks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shelltest.Options{}, &pb.CreateRequest{})
	// The previous command's marker (read from the shell's raw output,
	// through the process service), printed by the next command, is that
	// command's output.
	e.runOK(`true`)
	prev := rawMarkers(t, e, 2)[1]
	nonce := prev[len("\x1b]6973;") : len(prev)-1]
	r := e.runOK(fmt.Sprintf(`printf '\e]6973;%s\a'; printf '\e]6973;%s\a' >&2`, nonce, nonce))
	if string(r.Stdout) != prev || string(r.Stderr) != prev {
		t.Errorf("the previous command's marker %q: stdout %q, stderr %q", prev, r.Stdout, r.Stderr)
	}
	cases := []struct{ cmd, out string }{
		{`printf '\e]6973;00000000000000000000000000000000\a'`, "\x1b]6973;00000000000000000000000000000000\a"},
		{`printf '\e]6973;'`, "\x1b]6973;"},
		{`printf '\e]69'; sleep 0.05; printf '73;abc\e'; sleep 0.05; printf '\e]6973'`, "\x1b]6973;abc\x1b\x1b]6973"},
		{`printf '\e'`, "\x1b"},
		{`echo MARK_x_stdout_0; echo __envd_fb 1 x; echo '{ \__envd_post 1 x; }'`, "MARK_x_stdout_0\n__envd_fb 1 x\n{ \\__envd_post 1 x; }\n"},
	}
	for _, c := range cases {
		r := e.runOK(c.cmd)
		if string(r.Stdout) != c.out {
			t.Errorf("%s: stdout %q, want %q", c.cmd, r.Stdout, c.out)
		}
	}
	// A command with a syntax error, an unbalanced quote, a heredoc left
	// open: each is bash's error, and the session goes on.
	for _, cmd := range []string{`echo 'unbalanced`, `if then fi`, "cat <<EOF\nnever closed", `echo "$(`, `}`} {
		r := e.run(cmd)
		if r.Err != nil || r.End == nil {
			t.Errorf("%q: %s", cmd, r)
		}
	}
	if r := e.runOK(`echo still here`); string(r.Stdout) != "still here\n" {
		t.Errorf("after the broken commands: %s", r)
	}
}

var markerRE = regexp.MustCompile("\x1b]6973;[0-9a-f]{32}\x07")

// rawMarkers reads the shell's own stdout through the process service (its
// tag is envd-shell:ID) until it has seen n end markers, and returns them.
func rawMarkers(t *testing.T, e *env, n int) []string {
	t.Helper()
	pc := e.srv.ProcessClient(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), waitShort)
	defer cancel()
	st, err := pc.Connect(ctx, connect.NewRequest(&ppb.ConnectRequest{Process: &ppb.ProcessSelector{Selector: &ppb.ProcessSelector_Tag{Tag: "envd-shell:" + e.id}}}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var out []byte
	for st.Receive() {
		out = append(out, st.Msg().GetEvent().GetData().GetStdout()...)
		if ms := markerRE.FindAllString(string(out), -1); len(ms) >= n {
			return ms
		}
	}
	t.Fatalf("the shell's output %q has fewer than %d markers: %v", out, n, st.Err())
	return nil
}

// TestExitCodes: a command's status is its end's, and $? for the next.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shelltest.Options{}, &pb.CreateRequest{})
	for _, c := range []struct {
		cmd    string
		reason pb.EndReason
		code   int32
	}{
		{"true", pb.EndReason_END_REASON_EXITED, 0},
		{"false", pb.EndReason_END_REASON_EXITED, 1},
		{"(exit 42)", pb.EndReason_END_REASON_EXITED, 42},
		{"return 7", pb.EndReason_END_REASON_EXITED, 7},
		{"nosuchcommand-xyz", pb.EndReason_END_REASON_EXITED, 127},
		{"sh -c 'kill -TERM $$'", pb.EndReason_END_REASON_SIGNALED, 143},
	} {
		r := e.run(c.cmd)
		wantEnd(t, r, c.reason, c.code)
		if c.reason == pb.EndReason_END_REASON_SIGNALED && r.End.GetSignal() != 15 {
			t.Errorf("%s: signal %d, want 15", c.cmd, r.End.GetSignal())
		}
		if r := e.runOK(`echo $?`); string(r.Stdout) != fmt.Sprintf("%d\n", c.code) {
			t.Errorf("$? after %s: %q, want %d", c.cmd, r.Stdout, c.code)
		}
	}
	// set -e (errexit) and set -u are the command's: a later failure in
	// the same session ends it as bash would (see TestSessionEnds).
	r := e.run(`set -u; echo $undefined_var_xyz; echo not-reached`)
	if r.End.GetExitCode() == 0 || strings.Contains(string(r.Stdout), "not-reached") {
		t.Errorf("set -u: %s", r)
	}
	e.runOK(`set +u`)
	// xtrace traces the command (and a few of envd's own words), never a
	// marker.
	r = e.runOK(`set -x; echo traced`)
	if string(r.Stdout) != "traced\n" || !strings.Contains(string(r.Stderr), "+ echo traced") || bytes.Contains(r.Stderr, []byte("\x1b")) {
		t.Errorf("set -x: %s", r)
	}
	r = e.runOK(`set +x; echo untraced`)
	if string(r.Stdout) != "untraced\n" {
		t.Errorf("set +x: %s", r)
	}
}
