package httpapi_test

import (
	"strings"
	"testing"

	"github.com/envd-dev/envd/internal/testutil"
)

// TestInitBadEnvVars: a variable no process could be started with (a name
// that is empty or holds "=" or NUL, a value with NUL) is refused with a
// message naming it, and the /init changes nothing: not the variables, not
// the other fields it carries.
func TestInitBadEnvVars(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	dir := testutil.WorkDir(t)
	if r := e.do(t, "POST", "/init", nil, nil, strings.NewReader(`{"envVars":{"KEEP":"1"}}`)); r.status != 204 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	for _, tc := range []struct {
		name, vars, msg string
	}{
		{"name with =", `{"A=B":"1"}`, `envVars: the name "A=B" holds "="`},
		{"name starting with =", `{"=A":"1"}`, `envVars: the name "=A" holds "="`},
		{"NUL in a value", `{"A":"x\u0000y"}`, `envVars: the value of "A" holds a NUL byte`},
		{"NUL in a name", `{"A\u0000B":"1"}`, `envVars: the name "A\x00B" holds a NUL byte`},
		{"empty name", `{"":"1"}`, `envVars: a variable has an empty name`},
		{"one bad among good ones", `{"GOOD":"1","BAD=":"2","ALSO":"3"}`, `envVars: the name "BAD=" holds "="`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"envVars":` + tc.vars + `,"defaultWorkdir":"` + dir + `","accessToken":"never"}`
			wantError(t, e.do(t, "POST", "/init", nil, nil, strings.NewReader(body)), 400, tc.msg, "no process could be started with it")
		})
	}
	if env := e.defs.Env(); env["KEEP"] != "1" || len(env) != 2 || e.defs.Workdir() == dir || e.token.IsSet() {
		t.Errorf("a refused /init changed something: env %q, workdir %q, token set %v", env, e.defs.Workdir(), e.token.IsSet())
	}
	// A value may hold "=", and anything else but NUL.
	if r := e.do(t, "POST", "/init", nil, nil, strings.NewReader(`{"envVars":{"A":"b=c\nd\u00e9"}}`)); r.status != 204 || e.defs.Env()["A"] != "b=c\ndé" {
		t.Errorf("%d %s: %q", r.status, r.body, e.defs.Env())
	}
}
