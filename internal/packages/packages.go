package packages

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/internal/errkind"
	"github.com/envd-dev/envd/internal/identity"
)

// Manager is a package manager.
type Manager string

// The managers.
const (
	PIP Manager = "pip"
	NPM Manager = "npm"
	R   Manager = "r"
	APT Manager = "apt"
)

// Managers lists every manager.
var Managers = []Manager{PIP, NPM, R, APT}

// The kinds of error, matched with errors.Is. An installer that outlives
// its deadline fails with context.DeadlineExceeded.
var (
	// ErrInvalid: the request is wrong (a name, a version, a path).
	ErrInvalid = errors.New("invalid argument")
	// ErrNotFound: a package to remove is not installed.
	ErrNotFound = errors.New("not found")
	// ErrPermission: the request's user may not do this.
	ErrPermission = errors.New("permission denied")
	// ErrFailed: the installer failed, or the state of the sandbox does not
	// allow the operation (a name pip sees only in the system site).
	ErrFailed = errors.New("failed precondition")
	// ErrUnavailable: the manager is not set up here, or envd is shutting
	// down.
	ErrUnavailable = errors.New("unavailable")
	// ErrInternal: something that should not fail did.
	ErrInternal = errors.New("internal")
)

func errorf(kind error, format string, args ...any) error {
	return errkind.Errorf(kind, format, args...)
}

// Kernels is what the service asks of the code engine.
type Kernels interface {
	// Loaded returns, for every running context of language lang ("python" or "r") whose kernel
	// has loaded one of modules (Python top-level import names / R namespaces), its id and the
	// ones it loaded.
	Loaded(ctx context.Context, lang string, modules []string) (map[string][]string, error)
	// Notice queues text to be shown at the start of context id's next execution.
	Notice(id, text string) error
}

// Options configures New. Zero values are the defaults.
type Options struct {
	Logger *slog.Logger
	// PythonVenv is the virtual environment pip installs into; "": pip is
	// off (Debian's python3 is externally managed).
	PythonVenv string
	// RLibrary is the library R installs into; "": R installs are off.
	RLibrary string
	// DefaultUser is envd's default user: npm's default project directory
	// is its home, and the Python and R listings an apt operation takes
	// run as it. Required.
	DefaultUser func() (*identity.User, error)
	// Env is the variables every installer gets on top of its user's login
	// environment (the sandbox-wide ones, with the package environment's
	// PATH). RootEnv, when set, replaces it for installers run as root (in
	// strict mode, without what the sandbox user can write). Nil: none.
	Env, RootEnv func() map[string]string
	// StrictUsers: only root may use apt to change packages, and root may
	// not run pip, npm or R (their environment is the sandbox user's to
	// write, and would run its code as root).
	StrictUsers bool
	// Kernels is the code engine; nil without one (no stale contexts).
	Kernels Kernels
	// MaxDuration bounds an operation whose request has no deadline. Zero:
	// DefaultMaxDuration.
	MaxDuration time.Duration
	// OutputBytes is how much of an operation's output is kept for its
	// readers. Zero: DefaultOutputBytes.
	OutputBytes int
	// Clock times operations' deadlines (tagged "packages", "deadline").
	// Zero: the real clock.
	Clock quartz.Clock
}

// Defaults of Options.
const (
	DefaultMaxDuration = time.Hour
	DefaultOutputBytes = 1 << 20
)

// Installer runs package operations. It is safe for concurrent use.
type Installer struct {
	opts  Options
	log   *slog.Logger
	turns map[Manager]chan struct{} // one operation per manager at a time

	base   context.Context // ends at Close: running installers are killed
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool // guarded by mu
	ops    sync.WaitGroup
}

// New returns an Installer.
func New(opts Options) *Installer {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxDuration <= 0 {
		opts.MaxDuration = DefaultMaxDuration
	}
	if opts.OutputBytes <= 0 {
		opts.OutputBytes = DefaultOutputBytes
	}
	if opts.Clock == nil {
		opts.Clock = quartz.NewReal()
	}
	if opts.Env == nil {
		opts.Env = func() map[string]string { return nil }
	}
	in := &Installer{opts: opts, log: opts.Logger, turns: map[Manager]chan struct{}{}}
	for _, m := range Managers {
		in.turns[m] = make(chan struct{}, 1)
	}
	in.base, in.cancel = context.WithCancel(context.Background())
	return in
}

// Close refuses new operations, kills the installers still running, and
// waits until their operations have ended, or ctx ends.
func (in *Installer) Close(ctx context.Context) error {
	in.mu.Lock()
	in.closed = true
	in.mu.Unlock()
	in.cancel()
	done := make(chan struct{})
	go func() {
		in.ops.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("package operations still running: %w", ctx.Err())
	}
}

// Spec names a package to install, and optionally its version.
type Spec struct {
	Name, Version string
}

// ListRequest asks what a manager sees.
type ListRequest struct {
	Manager Manager
	Dir     string         // npm's project directory; "": the default user's home
	User    *identity.User // who asks
}

// InstallRequest asks to install packages.
type InstallRequest struct {
	Manager  Manager
	Packages []Spec
	Upgrade  bool
	// Source is an absolute path: a file to install, or for pip a
	// directory to install Packages from (--no-index --find-links).
	Source string
	Dir    string         // npm's project directory; "": the default user's home
	User   *identity.User // who asks
}

// RemoveRequest asks to remove packages.
type RemoveRequest struct {
	Manager Manager
	Names   []string
	Dir     string // npm's project directory; "": the default user's home
	Purge   bool   // apt: purge
	User    *identity.User
}

// Package is an installed package.
type Package struct {
	Name, Version string
	// Location is the directory it is installed in ("" for apt).
	Location string
	// System: the manager sees it but does not manage it there (pip: the
	// system site packages; R: another library than the target).
	System bool
	// Shadowed: another copy of the same name comes first on the path.
	Shadowed bool
	// modules are what kernels load of it: Python top-level modules, the
	// R namespace. Only in the listings operations take.
	modules []string
}

// Listing is what List returns.
type Listing struct {
	Packages []Package
	// Target is where the manager installs ("" for apt).
	Target string
}

// Change is one package's change. Old is "" for a new package, New "" for
// a removed one.
type Change struct {
	Name, Old, New string
}

// StaleContext is a context that loaded a package before it changed.
type StaleContext struct {
	ID      string
	Modules []string // what it loaded of the changed packages
	Message string
}

// Result is what a successful operation did.
type Result struct {
	Changes []Change
	Stale   []StaleContext
}

// List lists what a manager sees, bounded by ctx and listTimeout.
func (in *Installer) List(ctx context.Context, req ListRequest) (*Listing, error) {
	if err := validateManager(req.Manager); err != nil {
		return nil, err
	}
	t, err := in.target(req.Manager, req.User, req.Dir, false)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	pkgs, err := t.list(ctx, false)
	if err != nil {
		return nil, err
	}
	sortPackages(pkgs)
	return &Listing{Packages: pkgs, Target: t.where}, nil
}

// listTimeout bounds a listing: they take a second or so.
const listTimeout = 2 * time.Minute

// Install validates req, then starts installing in the background; follow
// the returned Op. ctx's deadline is the operation's (MaxDuration without
// one); ctx's end before the operation's turn comes drops it.
func (in *Installer) Install(ctx context.Context, req InstallRequest) (*Op, error) {
	p, err := in.planInstall(ctx, req)
	if err != nil {
		return nil, err
	}
	return in.start(ctx, p)
}

// Remove validates req, then starts removing in the background, as
// Install does.
func (in *Installer) Remove(ctx context.Context, req RemoveRequest) (*Op, error) {
	p, err := in.planRemove(req)
	if err != nil {
		return nil, err
	}
	return in.start(ctx, p)
}

// checkUser refuses what the request's user may not do, by mode.
func (in *Installer) checkUser(m Manager, u *identity.User, change bool) error {
	if u == nil {
		return errorf(ErrPermission, "no user: the request must name one")
	}
	if !in.opts.StrictUsers {
		return nil
	}
	switch {
	case m == APT && change && u.UID != 0:
		return errorf(ErrPermission, "apt: only root may install or remove Debian packages with -strict-users (the request runs as %s)", u.Name)
	case m != APT && u.UID == 0:
		return errorf(ErrPermission, "%s: root does not run %s with -strict-users: its packages are the sandbox user's to write, and would run that user's code as root; ask as the user", m, m)
	}
	return nil
}

// envdIsRoot tells whether envd may run installers as root.
var envdIsRoot = func() bool { return os.Geteuid() == 0 }
