package defaults_test

import (
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/envd-dev/envd/internal/defaults"
)

func TestUser(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		initial string
		set     []string
		want    string
	}{
		{name: "initial", initial: "root", want: "root"},
		{name: "set", initial: "root", set: []string{"user"}, want: "user"},
		{name: "empty ignored", initial: "root", set: []string{"user", ""}, want: "user"},
		{name: "last wins", initial: "root", set: []string{"a", "b"}, want: "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := defaults.New(tt.initial, nil)
			for _, s := range tt.set {
				d.SetUser(s)
			}
			if got := d.UserName(); got != tt.want {
				t.Errorf("UserName() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestUserLookup(t *testing.T) {
	t.Parallel()
	u, err := defaults.New("root", nil).User()
	if err != nil || u.UID != 0 {
		t.Fatalf("User() = %+v, %v; want root", u, err)
	}
	if _, err := defaults.New("no-such-user-envd-test", nil).User(); err == nil {
		t.Fatal("User() of an unknown default user: no error")
	}
}

func TestWorkdir(t *testing.T) {
	t.Parallel()
	d := defaults.New("root", nil)
	if got := d.Workdir(); got != "" {
		t.Fatalf("Workdir() = %q, want empty (the home)", got)
	}
	d.SetWorkdir("/srv")
	d.SetWorkdir("")
	if got := d.Workdir(); got != "/srv" {
		t.Fatalf("Workdir() = %q, want /srv (empty is ignored)", got)
	}
}

func TestEnv(t *testing.T) {
	t.Parallel()
	fixed := map[string]string{"E2B_SANDBOX": "true"}
	d := defaults.New("root", fixed)
	// New copies its map: changing the caller's map changes nothing.
	fixed["E2B_SANDBOX"] = "changed"
	fixed["LATE"] = "x"
	if got, want := d.Env(), map[string]string{"E2B_SANDBOX": "true"}; !maps.Equal(got, want) {
		t.Fatalf("Env() = %v, want %v", got, want)
	}

	set := map[string]string{"A": "1", "E2B_SANDBOX": "false"}
	d.SetEnv(set)
	set["A"] = "changed" // SetEnv copies too
	want := map[string]string{"A": "1", "E2B_SANDBOX": "true"}
	if got := d.Env(); !maps.Equal(got, want) {
		t.Fatalf("Env() = %v, want %v (fixed variables win over /init)", got, want)
	}

	// Env returns a copy.
	got := d.Env()
	got["A"] = "mutated"
	delete(got, "E2B_SANDBOX")
	if got := d.Env(); !maps.Equal(got, want) {
		t.Fatalf("Env() = %v after mutating a copy, want %v", got, want)
	}

	// SetEnv replaces, it does not merge.
	d.SetEnv(map[string]string{"B": "2"})
	if got, want := d.Env(), map[string]string{"B": "2", "E2B_SANDBOX": "true"}; !maps.Equal(got, want) {
		t.Fatalf("Env() = %v, want %v", got, want)
	}
	d.SetEnv(nil)
	if got, want := d.Env(), map[string]string{"E2B_SANDBOX": "true"}; !maps.Equal(got, want) {
		t.Fatalf("Env() = %v, want %v", got, want)
	}
}

// TestHostVars: the host's variables sit between the base and /init's:
// /init's envVars replace each other but not them, and may override them.
func TestHostVars(t *testing.T) {
	t.Parallel()
	d := defaults.New("root", map[string]string{"E2B_SANDBOX": "true"})
	d.SetBaseEnv(map[string]string{"PATH": "/bin", "E2B_SANDBOX_ID": "base"})
	d.SetHostVar("E2B_SANDBOX_ID", "sbx")
	d.SetHostVar("E2B_EVENTS_ADDRESS", "http://10.0.0.1")
	d.SetHostVar("E2B_SANDBOX", "false") // fixed wins
	want := map[string]string{"PATH": "/bin", "E2B_SANDBOX_ID": "sbx", "E2B_EVENTS_ADDRESS": "http://10.0.0.1", "E2B_SANDBOX": "true"}
	if got := d.Env(); !maps.Equal(got, want) {
		t.Fatalf("Env() = %v, want %v", got, want)
	}
	d.SetEnv(map[string]string{"E2B_EVENTS_ADDRESS": "http://override"})
	d.SetEnv(map[string]string{"A": "1"}) // replaces /init's, keeps the host's
	wantInit := map[string]string{"E2B_SANDBOX_ID": "sbx", "E2B_EVENTS_ADDRESS": "http://10.0.0.1", "A": "1", "E2B_SANDBOX": "true"}
	if got := d.InitEnv(); !maps.Equal(got, wantInit) {
		t.Fatalf("InitEnv() = %v, want %v", got, wantInit)
	}
	d.SetEnv(map[string]string{"E2B_SANDBOX_ID": "init"})
	if got := d.Env()["E2B_SANDBOX_ID"]; got != "init" {
		t.Errorf("/init does not override the host's variable: %q", got)
	}
	d.SetEnv(nil)
	d.SetHostVar("E2B_SANDBOX_ID", "")
	if got := d.Env()["E2B_SANDBOX_ID"]; got != "base" {
		t.Errorf("an empty value does not remove the host's variable: %q", got)
	}
}

// TestConcurrent exercises every getter and setter at once, for the race
// detector.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	d := defaults.New("root", map[string]string{"F": "1"})
	var wg sync.WaitGroup
	var lost atomic.Int32
	for i := range 6 {
		wg.Go(func() {
			for j := range 200 {
				s := strconv.Itoa(i*1000 + j)
				switch i % 3 {
				case 0:
					d.SetEnv(map[string]string{"K": s})
					d.SetUser("u" + s)
					d.SetWorkdir("/w" + s)
					d.SetBaseEnv(map[string]string{"F": "base", "B": s})
					d.SetHostVar("H", s)
				case 1:
					if d.Env()["F"] != "1" || d.InitEnv()["F"] != "1" {
						lost.Add(1)
					}
				case 2:
					d.UserName()
					d.Workdir()
				}
			}
		})
	}
	wg.Wait()
	if n := lost.Load(); n > 0 {
		t.Fatalf("Env() lost the fixed variable %d times", n)
	}
}
