package interpreter

// KernelStatusForTest is the restart count of the kernel of context id
// and a channel closed when it changes; ok is false without a kernel.
func (e *Engine) KernelStatusForTest(id string) (restarts int, changed <-chan struct{}, ok bool) {
	c, err := e.Context(id)
	if err != nil {
		return 0, nil, false
	}
	c.mu.Lock()
	ks := c.ks
	c.mu.Unlock()
	if ks == nil {
		return 0, nil, false
	}
	st := ks.kernel.Status()
	return st.Restarts, st.Changed, true
}
