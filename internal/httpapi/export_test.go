package httpapi

// HoldLock takes the hooks' one lock, as a freeze in progress would, until
// the returned function is called.
func HoldLock(h *Hooks) (release func()) {
	h.mu.Lock()
	return h.mu.Unlock
}

// RunMount runs a mount command as NFSMounter does.
var RunMount = runMount
