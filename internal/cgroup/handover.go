package cgroup

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Adopt returns the cgroup rel (a Group's Path) of envd's tree, made by
// the envd this one replaced in a live upgrade.
func (m *Manager) Adopt(rel string) (*Group, error) {
	if rel == "" || filepath.IsAbs(rel) || strings.Contains(rel, "..") {
		return nil, fmt.Errorf("adopt cgroup %q: want a path under envd's tree", rel)
	}
	return &Group{m: m, rel: filepath.Clean(rel)}, nil
}

// Frozen tells whether Freeze has frozen the workload and Thaw has not
// thawed it yet.
func (m *Manager) Frozen() bool {
	m.placing.RLock()
	defer m.placing.RUnlock()
	return m.frozen
}
