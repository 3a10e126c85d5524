package interpreter_test

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/envd/interpreter/v1"
	"github.com/envd-dev/envd/internal/interpreter"
	"github.com/envd-dev/envd/internal/testutil"
)

// A bash context's cell whose last command fails is an error (BashError,
// "exit code N", no traceback), and the next cell starts with that status
// in $?, whatever envd ran in the kernel between the two (per-execution env
// vars, variables listing, completion).
func TestBashExitStatus(t *testing.T) {
	t.Parallel()
	c := newContext(t, "bash", "")

	r := run(t, c.ID, "echo before; (exit 3)")
	if len(r.errors) != 1 || r.errors[0] != (errLine{Name: "BashError", Value: "exit code 3"}) {
		t.Fatalf("failing cell: errors %+v, want one BashError \"exit code 3\" without traceback", r.errors)
	}
	if r.out() != "before\n" || r.err() != "" {
		t.Errorf("failing cell: stdout %q stderr %q", r.out(), r.err())
	}
	if got := run(t, c.ID, "echo $?").mustOK(t).out(); got != "3\n" {
		t.Errorf("$? after a cell that ended with 3: %q", got)
	}
	if got := run(t, c.ID, "echo $?").mustOK(t).out(); got != "0\n" {
		t.Errorf("$? after a cell that ended with 0: %q", got)
	}
	// Only the last command counts.
	run(t, c.ID, "false; true").mustOK(t)

	if r := run(t, c.ID, "false"); r.lastError() == nil || r.lastError().Value != "exit code 1" {
		t.Fatalf("false: errors %+v", r.errors)
	}
	if _, err := shared.eng.Variables(queryCtx(t), c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := shared.eng.Complete(queryCtx(t), c.ID, "ech", interpreter.CursorEnd); err != nil {
		t.Fatal(err)
	}
	r = execute(t, map[string]any{"code": `echo "$? $ENVD_T_BASH"`, "context_id": c.ID, "env_vars": map[string]string{"ENVD_T_BASH": "set"}}).mustOK(t)
	if r.out() != "1 set\n" {
		t.Errorf("$? after false, a listing, a completion, with env vars: %q, want \"1 set\"", r.out())
	}
	// The env var is gone after its execution; the status that restoring
	// it left does not count either.
	if got := run(t, c.ID, `echo "$? ${ENVD_T_BASH-unset}"`).mustOK(t).out(); got != "0 unset\n" {
		t.Errorf("after the env var execution: %q, want \"0 unset\"", got)
	}
}

// A bash context's stderr comes as stderr, stdout as stdout, each in its
// order, over /execute and over Connect.
func TestBashStderr(t *testing.T) {
	t.Parallel()
	c := newContext(t, "bash", "")

	r := run(t, c.ID, "echo out; echo err >&2; ls /nonexistent-envd-path; echo out2")
	r.mustOK(t)
	if r.out() != "out\nout2\n" {
		t.Errorf("stdout %q, want out and out2", r.out())
	}
	if e := r.err(); !strings.HasPrefix(e, "err\n") || !strings.Contains(e, "/nonexistent-envd-path") || strings.Contains(e, "out") {
		t.Errorf("stderr %q, want err then ls's complaint", e)
	}
	// An error in bash's own parsing and the error record of a failing
	// last command.
	r = run(t, c.ID, "echo ok\nif then fi")
	if !strings.Contains(r.err(), "syntax error") || r.out() != "ok\n" || r.lastError() == nil || r.lastError().Name != "BashError" {
		t.Errorf("syntax error: stdout %q stderr %q errors %+v", r.out(), r.err(), r.errors)
	}
	// A program that checks stays on a terminal, stderr included.
	if got := run(t, c.ID, "[ -t 1 ] && [ -t 2 ] && echo ttys").mustOK(t).out(); got != "ttys\n" {
		t.Errorf("stdout and stderr terminals: %q", got)
	}

	// Over Connect: stderr events, and the error record that makes the
	// SDKs' execution.error set.
	cl := svc(t)
	resp, err := cl.CreateContext(testutil.Context(t, kernelTimeout), connect.NewRequest(&pb.CreateContextRequest{Language: "bash"}))
	if err != nil {
		t.Fatalf("CreateContext: %v", err)
	}
	id := resp.Msg.GetContext().GetId()
	t.Cleanup(func() { removeSvcContext(id) })
	e := rpcExecute(t, cl, &pb.ExecuteRequest{ContextId: id, Code: "echo out; echo err >&2; exit_with() { return $1; }; exit_with 7"})
	wantReason(t, e, pb.EndReason_END_REASON_ERROR)
	var stderr strings.Builder
	for _, ev := range e.evs {
		stderr.WriteString(ev.GetStderr().GetText())
	}
	if e.stdout() != "out\n" || stderr.String() != "err\n" {
		t.Errorf("Connect: stdout %q stderr %q", e.stdout(), stderr.String())
	}
	errs := e.errors()
	if len(errs) != 1 || errs[0].GetName() != "BashError" || errs[0].GetValue() != "exit code 7" || errs[0].GetTraceback() != "" {
		t.Errorf("Connect: errors %v", errs)
	}
	e = rpcExecute(t, cl, &pb.ExecuteRequest{ContextId: id, Code: "echo $?"})
	wantReason(t, e, pb.EndReason_END_REASON_OK)
	if e.stdout() != "7\n" {
		t.Errorf("Connect: $? %q", e.stdout())
	}
	for _, ev := range e.evs {
		if ev.GetStderr() != nil {
			t.Errorf("Connect: echo $? wrote on stderr: %v", ev)
		}
	}
}
