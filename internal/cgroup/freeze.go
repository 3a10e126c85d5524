package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// DefaultMaxCgroups bounds a freeze's walk when the caller sets no bound.
const DefaultMaxCgroups = 4096

// FreezeOptions says what Freeze freezes and how long it waits.
type FreezeOptions struct {
	// Hierarchy freezes every cgroup of the hierarchy (from
	// Options.SweepRoot) but envd's own and its ancestors, so cgroups the
	// workload made itself are covered. False (legacy): envd's workload
	// cgroups only (user, pty, jupyter and what is under them).
	Hierarchy bool
	// MaxCgroups bounds how many cgroups the walk visits (the guest is
	// untrusted: it may make millions). Zero: DefaultMaxCgroups.
	MaxCgroups int
	// Observe reads the frozen cgroups back, waiting up to Wait for each to
	// read frozen (zero Wait: one look, at once). False: only ask the
	// kernel, and return.
	Observe bool
	Wait    time.Duration
}

// FreezeResult is what a freeze observed. Counts are of cgroups.
type FreezeResult struct {
	Mode        string `json:"mode"`
	Visited     int    `json:"visited"`
	Allowlisted int    `json:"allowlisted"` // envd's own and its ancestors: left running
	Truncated   bool   `json:"truncated"`   // MaxCgroups stopped the walk
	// PreFrozen were frozen by the guest itself: Thaw leaves them frozen.
	PreFrozen int `json:"preFrozen"`
	// Requested were asked to freeze (the tops of frozen subtrees: their
	// descendants freeze with them).
	Requested int `json:"requested"`
	// Frozen read back frozen within Wait, NotFrozen did not (a task that
	// would not stop), Unobservable could not be read back.
	Frozen       int   `json:"frozen"`
	NotFrozen    int   `json:"notFrozen"`
	Failed       int   `json:"failed"` // the freeze request itself failed
	Unobservable int   `json:"unobservable"`
	SweepMs      int64 `json:"sweepMs"`
	WaitMs       int64 `json:"waitMs"`
}

// Freeze freezes the workload's cgroups. A task that does not stop is
// reported, not an error; an error (the walk's start unreadable, ctx ended)
// thaws what this call froze first.
func (m *Manager) Freeze(ctx context.Context, o FreezeOptions) (FreezeResult, error) {
	m.freezeMu.Lock()
	defer m.freezeMu.Unlock()
	if o.MaxCgroups <= 0 {
		o.MaxCgroups = DefaultMaxCgroups
	}
	res := FreezeResult{Mode: "legacy"}
	if o.Hierarchy {
		res.Mode = "hierarchy"
	}
	// From here a v1 start must not move a thread into the workload.
	m.placing.Lock()
	m.frozen = true
	m.placing.Unlock()

	h := m.freezerHier()
	var starts []string
	if o.Hierarchy {
		starts = []string{filepath.Join(h.mount, m.sweepRoot)}
	} else {
		for _, n := range []string{User, PTY, Jupyter} {
			starts = append(starts, filepath.Join(h.own, m.root, n))
		}
	}
	ancestors := map[string]bool{}
	for d := h.own; ; d = filepath.Dir(d) {
		ancestors[d] = true
		if d == h.mount || d == "/" || d == "." {
			break
		}
	}
	already := map[string]bool{}
	for _, d := range m.frozenByUs {
		already[d] = true
	}

	began := time.Now()
	var mine, requested []string // mine: newly frozen by this call
	fail := func(err error) (FreezeResult, error) {
		for _, d := range mine {
			m.thawOne(d)
		}
		m.setFrozen(len(m.frozenByUs) > 0)
		return res, err
	}
	type node struct {
		dir     string
		covered bool // an ancestor was asked to freeze
	}
	queue := make([]node, 0, len(starts))
	for _, s := range starts {
		if _, err := os.Stat(s); err != nil {
			return fail(fmt.Errorf("freeze: %w", err))
		}
		queue = append(queue, node{dir: s})
	}
	for len(queue) > 0 {
		if err := ctx.Err(); err != nil {
			return fail(fmt.Errorf("freeze: %w", err))
		}
		if res.Visited >= o.MaxCgroups {
			res.Truncated = true
			break
		}
		n := queue[0]
		queue = queue[1:]
		res.Visited++
		covered := n.covered
		switch {
		case ancestors[n.dir]:
			res.Allowlisted++
		case !already[n.dir] && m.selfFrozen(n.dir):
			res.PreFrozen++
			continue // frozen by the guest, with everything under it
		case !covered:
			if err := m.freezeOne(n.dir); err != nil {
				res.Failed++
				m.log.Warn("cannot freeze a cgroup", "cgroup", n.dir, "error", err)
				break
			}
			res.Requested++
			requested = append(requested, n.dir)
			if !already[n.dir] {
				mine = append(mine, n.dir)
				already[n.dir] = true
			}
			covered = true
		}
		ents, err := os.ReadDir(n.dir)
		if err != nil {
			if len(queue) == 0 && res.Visited == 1 {
				return fail(fmt.Errorf("freeze: read cgroup %s: %w", n.dir, err))
			}
			continue
		}
		for _, e := range ents {
			if e.IsDir() {
				queue = append(queue, node{dir: filepath.Join(n.dir, e.Name()), covered: covered})
			}
		}
	}
	m.frozenByUs = append(m.frozenByUs, mine...)
	res.SweepMs = time.Since(began).Milliseconds()
	if !o.Observe {
		return res, nil
	}
	waitBegan := time.Now()
	if err := m.awaitFrozen(ctx, requested, o.Wait, &res); err != nil {
		return fail(err)
	}
	res.WaitMs = time.Since(waitBegan).Milliseconds()
	return res, nil
}

// awaitFrozen polls dirs until each reads back frozen or the budget ends,
// and counts them in res.
func (m *Manager) awaitFrozen(parent context.Context, dirs []string, budget time.Duration, res *FreezeResult) error {
	ctx, cancel := context.WithTimeout(parent, budget)
	defer cancel()
	pending := dirs
	every := time.Millisecond
	for {
		var next []string
		for _, d := range pending {
			ok, err := m.isFrozen(d)
			switch {
			case err != nil:
				res.Unobservable++
			case ok:
				res.Frozen++
			default:
				next = append(next, d)
			}
		}
		pending = next
		if len(pending) == 0 {
			return nil
		}
		if budget <= 0 {
			res.NotFrozen += len(pending)
			return nil
		}
		t := time.NewTimer(every)
		select {
		case <-t.C:
			every = min(2*every, 20*time.Millisecond)
		case <-ctx.Done():
			t.Stop()
			if err := parent.Err(); err != nil {
				return fmt.Errorf("freeze: %w", err) // the caller is gone
			}
			// The budget ran out: report what still runs, do not fail.
			for _, d := range pending {
				if ok, err := m.isFrozen(d); err == nil && ok {
					res.Frozen++
				} else if err != nil {
					res.Unobservable++
				} else {
					res.NotFrozen++
				}
			}
			return nil
		}
	}
}

// Thaw thaws what Freeze froze, never what the guest froze itself. It
// returns how many cgroups it thawed.
func (m *Manager) Thaw() (int, error) {
	m.freezeMu.Lock()
	defer m.freezeMu.Unlock()
	var errs []error
	n := 0
	var left []string
	for _, d := range m.frozenByUs {
		if err := m.thawOne(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			left = append(left, d)
			continue
		}
		n++
	}
	m.frozenByUs = left
	m.setFrozen(len(left) > 0)
	return n, errors.Join(errs...)
}

func (m *Manager) setFrozen(v bool) {
	m.placing.Lock()
	m.frozen = v
	m.placing.Unlock()
}

// freezerHier is the hierarchy that freezes: v2's, or v1's freezer.
func (m *Manager) freezerHier() *hier {
	if m.v2 != nil {
		return m.v2
	}
	return m.freezer
}

func (m *Manager) freezeOne(dir string) error {
	if m.v2 != nil {
		return writeFile(filepath.Join(dir, "cgroup.freeze"), []byte("1"))
	}
	return writeFile(filepath.Join(dir, "freezer.state"), []byte("FROZEN"))
}

func (m *Manager) thawOne(dir string) error {
	if m.v2 != nil {
		return writeFile(filepath.Join(dir, "cgroup.freeze"), []byte("0"))
	}
	return writeFile(filepath.Join(dir, "freezer.state"), []byte("THAWED"))
}

// selfFrozen tells whether dir was frozen by itself (not through a parent):
// v2 cgroup.freeze, v1 freezer.self_freezing.
func (m *Manager) selfFrozen(dir string) bool {
	file := "freezer.self_freezing"
	if m.v2 != nil {
		file = "cgroup.freeze"
	}
	b, err := os.ReadFile(filepath.Join(dir, file))
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

// isFrozen tells whether every task of dir is frozen: v2 cgroup.events
// "frozen 1", v1 freezer.state FROZEN.
func (m *Manager) isFrozen(dir string) (bool, error) {
	if m.v2 != nil {
		n, err := readKey(filepath.Join(dir, "cgroup.events"), "frozen")
		return n == 1, err
	}
	b, err := os.ReadFile(filepath.Join(dir, "freezer.state"))
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(string(b)) == "FROZEN", nil
}

// Frozen reads g back: frozen (every task stopped) or not.
func (g *Group) Frozen() (bool, error) {
	return g.m.isFrozen(filepath.Join(g.m.freezerHier().own, g.m.root, g.rel))
}

// Freeze freezes g alone, as a guest freezing its own cgroup would (tests).
func (g *Group) Freeze() error {
	return g.m.freezeOne(filepath.Join(g.m.freezerHier().own, g.m.root, g.rel))
}

// Thaw thaws g alone.
func (g *Group) Thaw() error {
	return g.m.thawOne(filepath.Join(g.m.freezerHier().own, g.m.root, g.rel))
}

// Procs lists the pids in g (not in its descendants).
func (g *Group) Procs() ([]int, error) {
	return readPids(filepath.Join(g.m.freezerHier().own, g.m.root, g.rel, "cgroup.procs"))
}

// readPids reads a cgroup.procs file.
func readPids(p string) ([]int, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	return parsePids(b, p)
}

// parsePids reads b, the content of the cgroup.procs file p.
func parsePids(b []byte, p string) ([]int, error) {
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		pids = append(pids, n)
	}
	return pids, nil
}
