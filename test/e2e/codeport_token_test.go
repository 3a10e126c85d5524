package e2e_test

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestCodePortToken: with an access token, the code port's context routes
// answer without it, as the code-interpreter SDKs call them (they send
// X-Access-Token on /execute only); /execute, which runs code, needs it;
// in strict mode every route does.
func TestCodePortToken(t *testing.T) {
	t.Parallel()
	call := func(t *testing.T, base, method, path, token, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("X-Access-Token", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, strict := range []bool{false, true} {
		t.Run("strict="+strconv.FormatBool(strict), func(t *testing.T) {
			t.Parallel()
			port := freePort(t)
			args := []string{"-code-port", strconv.Itoa(port)}
			if strict {
				args = append(args, "-strict-users")
			}
			e := startEnvd(t, startOptions{jupyter: true, args: args, env: []string{"ENVD_ACCESS_TOKEN=s3cret"}})
			base := "http://127.0.0.1:" + strconv.Itoa(port)
			status, body := call(t, base, http.MethodGet, "/contexts", "", "")
			if want := map[bool]int{false: 200, true: 401}[strict]; status != want {
				t.Errorf("GET /contexts without the token: %d %s, want %d\n%s", status, body, want, e.stderr)
			}
			if !strict {
				if status, body := call(t, base, http.MethodPost, "/contexts", "", `{"language": "python"}`); status != 200 {
					t.Errorf("POST /contexts without the token: %d %s", status, body)
				}
			}
			status, body = call(t, base, http.MethodPost, "/execute", "", `{"code": "1"}`)
			if status != 401 || !strings.Contains(body, "requires an access token") {
				t.Errorf("/execute without the token: %d %s", status, body)
			}
			if status, body := call(t, base, http.MethodPost, "/execute", "wrong", `{"code": "1"}`); status != 401 {
				t.Errorf("/execute with a wrong token: %d %s", status, body)
			}
			if status, body := call(t, base, http.MethodPost, "/execute", "s3cret", `{"code": "print(6*7)"}`); status != 200 || !strings.Contains(body, `"text": "42\n"`) {
				t.Errorf("/execute with the token: %d %s", status, body)
			}
		})
	}
}
