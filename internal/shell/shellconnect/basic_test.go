package shellconnect_test

import (
	"testing"

	pb "github.com/envd-dev/envd/gen/envd/shell/v1"
	"github.com/envd-dev/envd/internal/shell/shelltest"
)

// TestStatePersists: cwd, exported and unexported variables, functions,
// aliases, shell options and $? carry from one command to the next.
func TestStatePersists(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shelltest.Options{}, &pb.CreateRequest{Cwd: "/"})
	e.runOK("cd /tmp && export FOO=bar && x=1 && f() { echo \"f:$1\"; } && alias hi='echo hello' && set -o noclobber")
	r := e.runOK(`echo "$PWD $FOO $x"; f arg; hi there; [[ -o noclobber ]] && echo noclobber`)
	if got, want := string(r.Stdout), "/tmp bar 1\nf:arg\nhello there\nnoclobber\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	wantEnd(t, e.run("false"), pb.EndReason_END_REASON_EXITED, 1)
	if r := e.runOK(`echo $?`); string(r.Stdout) != "1\n" {
		t.Errorf("$? after false: %q, want 1", r.Stdout)
	}
	st := e.state()
	if st.GetCwd() != "/tmp" || st.GetEnv()["FOO"] != "bar" || st.GetEnv()["x"] != "" || st.GetLastExitCode() != 0 {
		t.Errorf("state: cwd %q, FOO %q, x %q, last %d", st.GetCwd(), st.GetEnv()["FOO"], st.GetEnv()["x"], st.GetLastExitCode())
	}
}
