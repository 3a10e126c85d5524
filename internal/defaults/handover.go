package defaults

import "maps"

// State is what /init and the host changed, as a live upgrade hands it to
// the next envd.
type State struct {
	User, Workdir string
	Env, HostEnv  map[string]string
}

// State returns a copy of what /init and the host set.
func (d *Defaults) State() State {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return State{User: d.user, Workdir: d.workdir, Env: maps.Clone(d.env), HostEnv: maps.Clone(d.host)}
}

// Restore sets what State returned (in the envd before a live upgrade).
func (d *Defaults) Restore(s State) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.User != "" {
		d.user = s.User
	}
	d.workdir = s.Workdir
	d.env = maps.Clone(s.Env)
	d.host = maps.Clone(s.HostEnv)
}
