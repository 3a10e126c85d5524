package interpreter_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/envd/interpreter/v1"
	"github.com/envd-dev/envd/internal/interpreter"
	"github.com/envd-dev/envd/internal/interpreter/codeconnect"
	"github.com/envd-dev/envd/internal/interpreter/codehttp"
	"github.com/envd-dev/envd/internal/testutil"
)

// The HTTP routes: JSON answers, and each failure its status.
func TestIntrospectHTTP(t *testing.T) {
	t.Parallel()
	// Answers wait as long as a loaded machine needs; the busy case has a
	// server of its own with a short wait.
	base := serveHTTP(t, shared.eng, codehttp.Options{QueryWait: execTimeout})
	impatient := serveHTTP(t, shared.eng, codehttp.Options{QueryWait: 300 * time.Millisecond})
	c := newContext(t, "python", "")
	run(t, c.ID, "héllo = [1, 2, 3]").mustOK(t)

	status, body := callAt(t, base, http.MethodPost, "/contexts/"+c.ID+"/complete", map[string]any{"code": "é = 1; hél"})
	var comp interpreter.Completion
	if status != http.StatusOK || json.Unmarshal([]byte(body), &comp) != nil || !slices.Contains(comp.Matches, "héllo") ||
		comp.CursorStart != 7 || comp.CursorEnd != 10 {
		t.Errorf("complete: %d %s", status, body)
	}
	status, body = callAt(t, base, http.MethodPost, "/contexts/"+c.ID+"/inspect", map[string]any{"code": "héllo.append(", "cursor_pos": 5})
	var in interpreter.Inspection
	if status != http.StatusOK || json.Unmarshal([]byte(body), &in) != nil || !in.Found || !strings.Contains(in.Text, "[1, 2, 3]") {
		t.Errorf("inspect: %d %s", status, body)
	}
	status, body = callAt(t, base, http.MethodGet, "/contexts/"+c.ID+"/variables", nil)
	var vars interpreter.Variables
	if status != http.StatusOK || json.Unmarshal([]byte(body), &vars) != nil || len(vars.Variables) != 1 ||
		vars.Variables[0].Name != "héllo" || *vars.Variables[0].Len != 3 {
		t.Errorf("variables: %d %s", status, body)
	}

	for _, tc := range []struct {
		name, method, path string
		body               any
		status             int
		phrase             string
	}{
		{"empty code", http.MethodPost, "/contexts/" + c.ID + "/complete", map[string]any{"code": ""}, 400, "code is empty"},
		{"no code", http.MethodPost, "/contexts/" + c.ID + "/inspect", map[string]any{}, 400, "code is missing"},
		{"cursor out of range", http.MethodPost, "/contexts/" + c.ID + "/complete", map[string]any{"code": "é", "cursor_pos": 2}, 400, "out of range"},
		{"negative cursor", http.MethodPost, "/contexts/" + c.ID + "/complete", map[string]any{"code": "x", "cursor_pos": -1}, 400, "negative"},
		{"bad JSON", http.MethodPost, "/contexts/" + c.ID + "/complete", `{"code": 3}`, 400, "invalid request body"},
		{"unknown context", http.MethodGet, "/contexts/nope/variables", nil, 404, "nope"},
	} {
		status, body := callAt(t, base, tc.method, tc.path, tc.body)
		if status != tc.status || !strings.Contains(body, tc.phrase) {
			t.Errorf("%s: %d %q, want %d with %q", tc.name, status, body, tc.status, tc.phrase)
		}
	}

	// Busy for the whole wait: 409, and the code runs on.
	release := filepath.Join(t.TempDir(), "release")
	_, rd, err := shared.eng.Execute(queryCtx(t), interpreter.ExecuteRequest{Code: waitFileCode(release), ContextID: c.ID})
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, rd, isKind(interpreter.EventStdout))
	status, body = callAt(t, impatient, http.MethodGet, "/contexts/"+c.ID+"/variables", nil)
	if status != http.StatusConflict || !strings.Contains(body, "is running code") {
		t.Errorf("busy: %d %s", status, body)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if end := endOf(collect(t, rd)); end.Reason != interpreter.EndOK {
		t.Errorf("the code ended %+v", end)
	}
}

// The Connect RPCs, and their codes.
func TestIntrospectConnect(t *testing.T) {
	t.Parallel()
	client := serveService(t, shared.eng, codeconnect.Options{})
	c := newContext(t, "python", "")
	run(t, c.ID, "import numpy as np\narr = np.ones((2, 5))").mustOK(t)
	ctx := testutil.Context(t, execTimeout)

	comp, err := client.Complete(ctx, connect.NewRequest(&pb.CompleteRequest{ContextId: c.ID, Code: "ar"}))
	if err != nil || !slices.Contains(comp.Msg.GetMatches(), "arr") || comp.Msg.GetCursorStart() != 0 || comp.Msg.GetCursorEnd() != 2 {
		t.Errorf("complete: %v %v", comp, err)
	}
	pos := uint32(3)
	in, err := client.Inspect(ctx, connect.NewRequest(&pb.InspectRequest{ContextId: c.ID, Code: "arr + 1", CursorPos: &pos}))
	if err != nil || !in.Msg.GetFound() || !strings.Contains(in.Msg.GetText(), "ndarray") || len(in.Msg.GetData()["text/plain"]) == 0 {
		t.Errorf("inspect: %v %v", in, err)
	}
	vars, err := client.ListVariables(ctx, connect.NewRequest(&pb.ListVariablesRequest{ContextId: c.ID}))
	if err != nil || len(vars.Msg.GetVariables()) != 1 {
		t.Fatalf("variables: %v %v", vars, err)
	}
	if v := vars.Msg.GetVariables()[0]; v.GetName() != "arr" || v.GetType() != "ndarray" ||
		!slices.Equal(v.GetShape(), []uint64{2, 5}) || v.GetDtype() != "float64" || vars.Msg.GetTotal() != 1 {
		t.Errorf("variable %v", v)
	}
	// The default context answers an empty id.
	if _, err := client.ListVariables(ctx, connect.NewRequest(&pb.ListVariablesRequest{})); err != nil {
		t.Errorf("default context: %v", err)
	}

	big := uint32(99)
	for _, tc := range []struct {
		name string
		err  error
		code connect.Code
	}{
		{"empty code", unaryErr(client.Complete(ctx, connect.NewRequest(&pb.CompleteRequest{ContextId: c.ID}))), connect.CodeInvalidArgument},
		{"cursor out of range", unaryErr(client.Inspect(ctx, connect.NewRequest(&pb.InspectRequest{ContextId: c.ID, Code: "x", CursorPos: &big}))), connect.CodeInvalidArgument},
		{"detail level", unaryErr(client.Inspect(ctx, connect.NewRequest(&pb.InspectRequest{ContextId: c.ID, Code: "x", DetailLevel: 2}))), connect.CodeInvalidArgument},
		{"unknown context", unaryErr(client.ListVariables(ctx, connect.NewRequest(&pb.ListVariablesRequest{ContextId: "nope"}))), connect.CodeNotFound},
	} {
		if connect.CodeOf(tc.err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.code)
		}
	}

	// Busy until the call's deadline: unavailable, saying so, before the
	// client gives up.
	release := filepath.Join(t.TempDir(), "release")
	_, rd, err := shared.eng.Execute(queryCtx(t), interpreter.ExecuteRequest{Code: waitFileCode(release), ContextID: c.ID})
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, rd, isKind(interpreter.EventStdout))
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = client.ListVariables(dctx, connect.NewRequest(&pb.ListVariablesRequest{ContextId: c.ID}))
	cancel()
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "is running code") {
		t.Errorf("busy: %v", err)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	collect(t, rd)
}

// unaryErr is a unary call's error.
func unaryErr[T any](_ *connect.Response[T], err error) error { return err }
