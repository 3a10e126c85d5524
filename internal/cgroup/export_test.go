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

// Dir is cgroup rel's directory in m's first hierarchy (v2's, or v1's
// freezer).
func Dir(m *Manager, rel string) string { return m.dirs(rel)[0] }

// RemoveTree removes m's tree's empty cgroups as something outside envd
// would, whoever owns the tree.
func RemoveTree(m *Manager) error { return m.removeTree() }
