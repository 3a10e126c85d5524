package httpapi_test

import (
	"errors"
	"testing"

	"github.com/envd-dev/envd/internal/cgroup"
	"github.com/envd-dev/envd/internal/httpapi"
)

// TestHoldForUpgrade: a live upgrade's hold of the hooks' lock makes every
// hook answer 503 until it is released; the hold is refused, holding
// nothing, while the workload is frozen.
func TestHoldForUpgrade(t *testing.T) {
	cg := testCgroups(t, cgroup.V1)
	e, hooks := hooksEnv(t, httpapi.HooksOptions{Cgroups: cg, FSPath: t.TempDir()})

	release, err := hooks.HoldForUpgrade()
	if err != nil {
		t.Fatalf("hold with nothing frozen: %v", err)
	}
	for _, path := range []string{"/freeze", "/unfreeze", "/fsfreeze", "/fsthaw", "/collapse"} {
		if r := e.do(t, "POST", path, nil, tok, nil); r.status != 503 || r.header.Get("Retry-After") == "" {
			t.Errorf("%s during an upgrade: %d %s, want 503 with Retry-After", path, r.status, r.body)
		}
	}
	if _, err := hooks.HoldForUpgrade(); !errors.Is(err, httpapi.ErrHookBusy) {
		t.Errorf("second hold: %v, want ErrHookBusy", err)
	}
	release()

	if r := e.do(t, "POST", "/freeze", nil, tok, nil); r.status != 204 {
		t.Fatalf("freeze after the release: %d %s", r.status, r.body)
	}
	if _, err := hooks.HoldForUpgrade(); !errors.Is(err, httpapi.ErrFrozen) {
		t.Errorf("hold while frozen: %v, want ErrFrozen", err)
	}
	// Refused, it holds nothing: the thaw goes through.
	if r := e.do(t, "POST", "/unfreeze", nil, tok, nil); r.status != 204 {
		t.Fatalf("unfreeze after a refused hold: %d %s", r.status, r.body)
	}
	release, err = hooks.HoldForUpgrade()
	if err != nil {
		t.Fatalf("hold once thawed: %v", err)
	}
	release()
}
