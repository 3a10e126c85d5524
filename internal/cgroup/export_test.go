package cgroup

// SpareNames lists the spare cgroups ready under parent, next first.
func SpareNames(m *Manager, parent string) []string {
	m.spares.mu.Lock()
	defer m.spares.mu.Unlock()
	var names []string
	for _, g := range m.spares.ready[parent] {
		names = append(names, g.rel)
	}
	return names
}
