package httpapi

import "errors"

// ErrFrozen is HoldForUpgrade's refusal while something is frozen.
var ErrFrozen = errors.New("the workload or the filesystem is frozen (/freeze, /fsfreeze): upgrade once it is thawed")

// ErrHookBusy is HoldForUpgrade's refusal while a hook runs.
var ErrHookBusy = errors.New("a freeze, thaw or collapse is in progress: upgrade once it ends")

// Frozen tells whether the snapshot hooks hold anything frozen: the root
// filesystem (/fsfreeze) or the workload's cgroups (/freeze).
func (h *Hooks) Frozen() bool {
	h.fsMu.Lock()
	fs := h.fsFrozen != nil
	h.fsMu.Unlock()
	return fs || (h.o.Cgroups != nil && h.o.Cgroups.Frozen())
}

// HoldForUpgrade takes the hooks' one lock for a live upgrade, so that no
// freeze, thaw or collapse starts (they answer 503) between its check that
// nothing is frozen and its exec, which a frozen filesystem would make
// fail. It refuses, holding nothing, while a hook runs (ErrHookBusy) or
// something is frozen (ErrFrozen). An upgrade that goes on keeps the lock
// until its exec ends this envd; one refused later calls release.
func (h *Hooks) HoldForUpgrade() (release func(), err error) {
	if !h.mu.TryLock() {
		return nil, ErrHookBusy
	}
	if h.Frozen() {
		h.mu.Unlock()
		return nil, ErrFrozen
	}
	return h.mu.Unlock, nil
}
