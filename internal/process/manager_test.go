package process_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/process"
	"github.com/envd-dev/envd/internal/process/processtest"
)

// TestManagerStartErrors: the domain's errors, by sentinel.
func TestManagerStartErrors(t *testing.T) {
	t.Parallel()
	m := newManager(t, process.Options{})
	root := lookup(t, "root")
	for _, tc := range []struct {
		name string
		o    process.StartOptions
		want error
		sub  string
	}{
		{"no user", process.StartOptions{Config: process.Config{Cmd: "true"}, Dir: "/"}, process.ErrUnauthorized, "no user"},
		{"empty cmd", process.StartOptions{User: root, Dir: "/"}, process.ErrInvalid, "cmd is empty"},
		{"missing dir", process.StartOptions{Config: process.Config{Cmd: "true"}, User: root, Dir: "/no/such"}, process.ErrInvalid, "'/no/such' does not exist"},
		{"not found", process.StartOptions{Config: process.Config{Cmd: "no-such-cmd-xyz"}, User: root, Dir: "/"}, process.ErrInvalid, "executable not found"},
		{"pty 0x0", process.StartOptions{Config: process.Config{Cmd: "true"}, User: root, Dir: "/", PTY: &process.Size{}}, process.ErrInvalid, "0x0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := m.Start(tc.o)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.sub) {
				t.Errorf("Start = %v, %v; want %v containing %q", p, err, tc.want, tc.sub)
			}
		})
	}
}

// TestManagerLookups: Get finds live processes only, Find also ended ones;
// a tag picks the newest process that has it.
func TestManagerLookups(t *testing.T) {
	t.Parallel()
	m := newManager(t, process.Options{})
	root := lookup(t, "root")
	tag := processtest.UniqueTag("lookups")
	start := func(cmd ...string) *process.Process {
		t.Helper()
		p, err := m.Start(process.StartOptions{Config: process.Config{Cmd: cmd[0], Args: cmd[1:]}, Tag: &tag, User: root, Dir: "/"})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	older := start("sleep", "30")
	newer := start("sleep", "30")
	for name, get := range map[string]func(process.Selector) (*process.Process, error){"Get": m.Get, "Find": m.Find} {
		if p, err := get(process.Selector{Tag: &tag}); err != nil || p != newer {
			t.Errorf("%s by tag = %v, %v; want the newer process %d", name, p, err, newer.Pid())
		}
		if p, err := get(process.Selector{Pid: older.Pid()}); err != nil || p != older {
			t.Errorf("%s by pid = %v, %v", name, p, err)
		}
	}
	if err := newer.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitDone(t, newer, waitShort)
	if ex, ok := newer.Exit(); !ok || ex.Code != -1 || ex.Exited || ex.Status != "signal: killed" {
		t.Errorf("Exit = %+v, %v", ex, ok)
	}
	// Ended: Get says so, Find still finds it; the tag now picks the live one.
	processtest.Eventually(t, waitShort, func() bool { _, err := m.Get(process.Selector{Pid: newer.Pid()}); return err != nil }, "killed process %d still live", newer.Pid())
	if _, err := m.Get(process.Selector{Pid: newer.Pid()}); !errors.Is(err, process.ErrNotFound) || !strings.Contains(err.Error(), "already exited (signal: killed)") {
		t.Errorf("Get of an ended process: %v", err)
	}
	if p, err := m.Find(process.Selector{Pid: newer.Pid()}); err != nil || p != newer {
		t.Errorf("Find of an ended process = %v, %v", p, err)
	}
	if p, err := m.Get(process.Selector{Tag: &tag}); err != nil || p != older {
		t.Errorf("Get by tag after the newer ended = %v, %v; want %d", p, err, older.Pid())
	}
	if err := newer.Signal(syscall.SIGKILL); !errors.Is(err, process.ErrNotFound) {
		t.Errorf("Signal after the end = %v, want ErrNotFound", err)
	}
	if ps := m.List(); len(ps) != 1 || ps[0] != older {
		t.Errorf("List = %v, want only %d", ps, older.Pid())
	}
	if err := older.Resize(process.Size{Cols: 10, Rows: 10}); !errors.Is(err, process.ErrWrongState) {
		t.Errorf("Resize of a pipe process = %v, want ErrWrongState", err)
	}
}

// TestManagerShutdown: SIGTERM to every process, SIGKILL to those still
// running when the context ends; no new process after.
func TestManagerShutdown(t *testing.T) {
	t.Parallel()
	m := newManager(t, process.Options{})
	obedient := startDomain(t, m, "sleep", "30")
	stubborn := startDomain(t, m, "/bin/sh", "-c", "trap '' TERM; echo trapped; while :; do sleep 0.05; done")
	// Wait until the trap is set.
	cur := stubborn.Follow()
	defer cur.Close()
	processtest.Eventually(t, waitShort, func() bool {
		recs, _ := cur.Read()
		for _, r := range recs {
			if strings.Contains(string(r.Data), "trapped") {
				return true
			}
		}
		return false
	}, "the trap is not set")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	m.Shutdown(ctx)
	if d := time.Since(began); d > waitShort {
		t.Errorf("Shutdown took %v", d)
	}
	for p, want := range map[*process.Process]string{obedient: "signal: terminated", stubborn: "signal: killed"} {
		if ex, ok := p.Exit(); !ok || ex.Status != want {
			t.Errorf("process %d: Exit = %+v, %v; want %s", p.Pid(), ex, ok, want)
		}
	}
	if _, err := m.Start(process.StartOptions{Config: process.Config{Cmd: "true"}, User: lookup(t, "root"), Dir: "/"}); !errors.Is(err, process.ErrUnavailable) {
		t.Errorf("Start after Shutdown = %v, want ErrUnavailable (as elsewhere in envd)", err)
	}
}

// TestManagerOwners: a process is owned by the user it was started as; in
// strict mode another non-root requester finds nothing by its pid or tag,
// with the message a missing process gets, while root and envd itself
// (a nil As) find it. In default mode everyone finds it.
func TestManagerOwners(t *testing.T) {
	t.Parallel()
	root := lookup(t, "root")
	other := &identity.User{Name: "someone", UID: 54322, GID: 54322}
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprintf("strict=%v", strict), func(t *testing.T) {
			t.Parallel()
			m := newManager(t, process.Options{StrictUsers: strict})
			tag := processtest.UniqueTag("owners")
			p, err := m.Start(process.StartOptions{Config: process.Config{Cmd: "sleep", Args: []string{"30"}}, Tag: &tag, User: root, Dir: "/"})
			if err != nil {
				t.Fatal(err)
			}
			if p.Owner() != root.UID {
				t.Errorf("Owner = %d, want root's %d", p.Owner(), root.UID)
			}
			for _, as := range []*identity.User{nil, root, other} {
				hidden := strict && as == other
				for _, sel := range []process.Selector{{Pid: p.Pid(), As: as}, {Tag: &tag, As: as}} {
					for name, get := range map[string]func(process.Selector) (*process.Process, error){"Get": m.Get, "Find": m.Find} {
						got, err := get(sel)
						switch {
						case hidden && (!errors.Is(err, process.ErrNotFound) || err.Error() != fmt.Sprintf("process with %s not found", sel)):
							t.Errorf("%s(%s) as %v = %v, %v; want not found", name, sel, as, got, err)
						case !hidden && (err != nil || got != p):
							t.Errorf("%s(%s) as %v = %v, %v; want %d", name, sel, as, got, err, p.Pid())
						}
					}
				}
				if ps := m.ListAs(as); hidden != (len(ps) == 0) {
					t.Errorf("ListAs(%v) = %d processes, hidden %v", as, len(ps), hidden)
				}
			}
			if len(m.List()) != 1 {
				t.Errorf("List = %v, want the one process", m.List())
			}
		})
	}
}
