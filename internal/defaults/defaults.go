// Package defaults holds the sandbox-wide settings the orchestrator may
// change at run time through POST /init: the environment every process gets,
// the user a request runs as when it names none, and the default working
// directory. Every getter returns a copy, so callers never share state.
package defaults

import (
	"maps"
	"sync"

	"github.com/envd-dev/envd/internal/identity"
)

// Defaults is safe for concurrent use.
type Defaults struct {
	mu      sync.RWMutex
	user    string            // guarded by mu
	workdir string            // guarded by mu
	env     map[string]string // guarded by mu; set by /init
	base    map[string]string // guarded by mu; under env (SetBaseEnv)
	host    map[string]string // guarded by mu; between base and env (SetHostVar)
	fixed   map[string]string // set once by New; /init cannot override these
}

// New returns settings with the given default user and the variables envd
// always sets (E2B_SANDBOX and the like), which /init cannot replace.
func New(user string, fixed map[string]string) *Defaults {
	return &Defaults{user: user, fixed: maps.Clone(fixed)}
}

// UserName is the name of the default user.
func (d *Defaults) UserName() string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.user
}

// User looks up the default user's account.
func (d *Defaults) User() (*identity.User, error) {
	return identity.Lookup(d.UserName())
}

// Workdir is the default working directory; empty means the user's home.
func (d *Defaults) Workdir() string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.workdir
}

// Env is every variable a process gets on top of its user's login
// environment: the base (SetBaseEnv), then what envd learned from the host
// (SetHostVar), then what /init set, then the fixed variables; a later
// value for a name wins.
func (d *Defaults) Env() map[string]string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make(map[string]string, len(d.base)+len(d.host)+len(d.env)+len(d.fixed))
	maps.Copy(out, d.base)
	maps.Copy(out, d.host)
	maps.Copy(out, d.env)
	maps.Copy(out, d.fixed)
	return out
}

// InitEnv is Env without the base: the host's variables, what /init set
// and the fixed variables. Kernels get these; they have an environment of
// their own for the rest.
func (d *Defaults) InitEnv() map[string]string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make(map[string]string, len(d.host)+len(d.env)+len(d.fixed))
	maps.Copy(out, d.host)
	maps.Copy(out, d.env)
	maps.Copy(out, d.fixed)
	return out
}

// SetHostVar sets a variable envd learned from the host rather than from
// /init's envVars (the sandbox's id from the MMDS, the events address from
// /init's hyperloopIP): a later /init's envVars do not remove it, but may
// override it. An empty value removes it.
func (d *Defaults) SetHostVar(name, value string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if value == "" {
		delete(d.host, name)
		return
	}
	if d.host == nil {
		d.host = map[string]string{}
	}
	d.host[name] = value
}

// SetBaseEnv replaces the variables under /init's: envd's own choices for
// every process (PATH with the packages' environment first, see
// Packages.Env), which /init may still override.
func (d *Defaults) SetBaseEnv(env map[string]string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.base = maps.Clone(env)
}

// SetEnv replaces the variables set by an earlier call.
func (d *Defaults) SetEnv(env map[string]string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.env = maps.Clone(env)
}

// SetUser changes the default user; empty names are ignored.
func (d *Defaults) SetUser(name string) {
	if name == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.user = name
}

// SetWorkdir changes the default working directory; empty is ignored.
func (d *Defaults) SetWorkdir(dir string) {
	if dir == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.workdir = dir
}
