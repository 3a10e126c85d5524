package httpapi

// Frozen tells whether the snapshot hooks hold anything frozen: the root
// filesystem (/fsfreeze) or the workload's cgroups (/freeze). A live
// upgrade waits for the thaw.
func (h *Hooks) Frozen() bool {
	h.fsMu.Lock()
	fs := h.fsFrozen != nil
	h.fsMu.Unlock()
	return fs || (h.o.Cgroups != nil && h.o.Cgroups.Frozen())
}
