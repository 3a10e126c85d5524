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

// WarmForTest lists the ids of the prestarted kernels of lang waiting in
// the pool, and returns a channel closed when that list changes.
func (e *Engine) WarmForTest(lang string) (ids []string, changed <-chan struct{}) {
	p := e.pool
	if p == nil {
		return nil, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.idle[lang] {
		ids = append(ids, w.id)
	}
	return ids, p.changed
}

// PrestartedForTest reports whether the kernel of context id came from the
// pool of prestarted kernels.
func (e *Engine) PrestartedForTest(id string) bool {
	c, err := e.Context(id)
	if err != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ks != nil && c.ks.warm
}
