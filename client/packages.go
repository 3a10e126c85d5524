package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"

	"connectrpc.com/connect"

	ppb "github.com/envd-dev/envd/gen/envd/packages/v1"
)

// PackageManager is one of the sandbox's package managers.
type PackageManager string

// The package managers envd drives.
const (
	// ManagerPip is pip in the Python environment kernels and commands
	// share (it sees Debian's Python packages too, and installs over them).
	ManagerPip PackageManager = "pip"
	// ManagerNpm is npm in a project directory (PackageOptions.Dir; the
	// default user's home by default), whose node_modules Deno kernels
	// started there import npm: packages from.
	ManagerNpm PackageManager = "npm"
	// ManagerR is R's install.packages into the library kernels use.
	ManagerR PackageManager = "r"
	// ManagerApt is Debian's apt-get, run as root.
	ManagerApt PackageManager = "apt"
)

// PackageManagers lists every manager.
var PackageManagers = []PackageManager{ManagerPip, ManagerNpm, ManagerR, ManagerApt}

func (m PackageManager) proto() (ppb.Manager, error) {
	switch m {
	case ManagerPip:
		return ppb.Manager_MANAGER_PIP, nil
	case ManagerNpm:
		return ppb.Manager_MANAGER_NPM, nil
	case ManagerR:
		return ppb.Manager_MANAGER_R, nil
	case ManagerApt:
		return ppb.Manager_MANAGER_APT, nil
	}
	return 0, &Error{Op: "package manager", Code: connect.CodeInvalidArgument, Message: fmt.Sprintf("unknown package manager %q: give pip, npm, r or apt", string(m))}
}

// Package is an installed package.
type Package struct {
	Name, Version string
	// Location is the directory it is installed in: pip's site-packages
	// (the environment's, or the system's), R's library, the npm project's
	// node_modules; "" for apt.
	Location string
	// System: the manager sees it but does not manage it there (Debian's
	// Python packages for pip; another library than Target for R).
	System bool
	// Shadowed: another copy of the same name comes first and is used.
	Shadowed bool
}

// PackageList is what ListPackages returns.
type PackageList struct {
	Packages []Package // sorted by name
	// Target is where the manager installs: the Python environment, the R
	// library, the npm project; "" for apt.
	Target string
}

// PackageOptions configures ListPackages.
type PackageOptions struct {
	// Dir is npm's project directory (absolute). Zero: the default user's
	// home.
	Dir string
	// User acts as this user. Zero: the client's User.
	User string
}

// ListPackages lists the packages a manager sees, with their versions.
func (c *Client) ListPackages(ctx context.Context, m PackageManager, o PackageOptions) (*PackageList, error) {
	c.init()
	pm, err := m.proto()
	if err != nil {
		return nil, err
	}
	resp, err := c.pkgs.List(ctx, request(c, &ppb.ListRequest{Manager: pm, Dir: o.Dir}, o.User))
	if err != nil {
		return nil, rpcError("list "+string(m)+" packages", err)
	}
	out := &PackageList{Target: resp.Msg.GetTarget(), Packages: make([]Package, len(resp.Msg.GetPackages()))}
	for i, p := range resp.Msg.GetPackages() {
		out.Packages[i] = Package{Name: p.GetName(), Version: p.GetVersion(), Location: p.GetLocation(), System: p.GetSystem(), Shadowed: p.GetShadowed()}
	}
	return out, nil
}

// PackageSpec names a package to install; Version, if set, pins it (an
// exact version for pip and apt, a version, range or tag for npm; for R
// only with a Source).
type PackageSpec struct {
	Name, Version string
}

// InstallOptions configures InstallPackages.
type InstallOptions struct {
	// Upgrade upgrades what is installed already. Zero: an installed
	// package is left as it is, unless a version pins another.
	Upgrade bool
	// Source is a local path in the sandbox, absolute, to install from: a
	// file (a wheel or sdist, an R source package, an npm tarball, a .deb),
	// or for pip a directory of them (pip --no-index --find-links).
	Source string
	// Dir is npm's project directory; User acts as this user.
	Dir, User string
	// Stdout and Stderr receive the installer's output while Wait runs.
	// Zero: discarded.
	Stdout, Stderr io.Writer
}

// RemoveOptions configures RemovePackages.
type RemoveOptions struct {
	// Purge also removes a Debian package's configuration files (apt only).
	Purge bool
	// Dir is npm's project directory; User acts as this user.
	Dir, User string
	// Stdout and Stderr receive the installer's output while Wait runs.
	Stdout, Stderr io.Writer
}

// InstallPackages installs, upgrades or pins packages with a manager and
// returns at once; follow the installer with Events or Wait on the
// returned handle, where envd's answer comes, its refusal of a bad name or
// version included.
//
// ctx's deadline is the installer's: envd kills it when it passes.
// Cancelling ctx only stops following it: the installer runs to its end
// in the sandbox (a half-done install is worse), and a later operation of
// the same manager waits for it.
func (c *Client) InstallPackages(ctx context.Context, m PackageManager, pkgs []PackageSpec, o InstallOptions) (*PackageOp, error) {
	c.init()
	pm, err := m.proto()
	if err != nil {
		return nil, err
	}
	req := &ppb.InstallRequest{Manager: pm, Upgrade: o.Upgrade, Source: o.Source, Dir: o.Dir}
	for _, p := range pkgs {
		req.Packages = append(req.Packages, &ppb.PackageSpec{Name: p.Name, Version: p.Version})
	}
	op := "install " + string(m) + " packages"
	s, err := c.pkgs.Install(ctx, request(c, req, o.User))
	if err != nil {
		return nil, rpcError(op, err)
	}
	return newPackageOp(op, s, o.Stdout, o.Stderr), nil
}

// RemovePackages removes packages with a manager; follow it as
// InstallPackages'.
func (c *Client) RemovePackages(ctx context.Context, m PackageManager, names []string, o RemoveOptions) (*PackageOp, error) {
	c.init()
	pm, err := m.proto()
	if err != nil {
		return nil, err
	}
	op := "remove " + string(m) + " packages"
	s, err := c.pkgs.Remove(ctx, request(c, &ppb.RemoveRequest{Manager: pm, Names: names, Dir: o.Dir, Purge: o.Purge}, o.User))
	if err != nil {
		return nil, rpcError(op, err)
	}
	return newPackageOp(op, s, o.Stdout, o.Stderr), nil
}

// PackageEvent is one thing an install or removal produced: a command
// starting, a chunk of its output, or output this client missed.
type PackageEvent struct {
	// Command is set when envd starts a command of the operation.
	Command *PackageCommand
	// Stdout and Stderr are chunks of the installer's output.
	Stdout, Stderr []byte
	// Lost is how many bytes of output this client read too slowly to get.
	Lost int64
}

// PackageCommand is a command envd runs for an operation.
type PackageCommand struct {
	Args []string // program first; there is no shell
	User string   // who it runs as
}

// PackageChange is a package whose version an operation changed. Old is
// "" for a new package, New "" for a removed one.
type PackageChange struct {
	Name, Old, New string
}

func (c PackageChange) String() string {
	switch {
	case c.Old == "":
		return fmt.Sprintf("%s %s (new)", c.Name, c.New)
	case c.New == "":
		return fmt.Sprintf("%s %s (removed)", c.Name, c.Old)
	}
	return fmt.Sprintf("%s %s -> %s", c.Name, c.Old, c.New)
}

// StaleContext is a code context whose kernel loaded a package before it
// changed: it runs the old code until RestartContext. envd also tells it
// at the start of its next execution.
type StaleContext struct {
	ContextID string
	Modules   []string // what it loaded of the changed packages
	Message   string
}

// PackageResult is what a successful operation did.
type PackageResult struct {
	Changes []PackageChange
	Stale   []StaleContext
}

// PackageOp follows an install or removal. Events and Wait follow it;
// call one of them from one goroutine.
type PackageOp struct {
	op             string
	recv           func() (*ppb.PackageEvent, bool)
	streamErr      func() error
	close          func() error
	stdout, stderr io.Writer

	res   *PackageResult
	err   error
	ended bool
}

func newPackageOp[T any, PT interface {
	*T
	GetEvent() *ppb.PackageEvent
}](op string, s *connect.ServerStreamForClient[T], stdout, stderr io.Writer) *PackageOp {
	return &PackageOp{
		op: op,
		recv: func() (*ppb.PackageEvent, bool) {
			if !s.Receive() {
				return nil, false
			}
			return PT(s.Msg()).GetEvent(), true
		},
		streamErr: s.Err,
		close:     s.Close,
		stdout:    stdout, stderr: stderr,
	}
}

// next returns the next event; false at the end (p.res set) or on failure
// (p.err set).
func (p *PackageOp) next() (PackageEvent, bool) {
	for !p.ended {
		ev, ok := p.recv()
		if !ok {
			p.ended = true
			p.err = rpcError(p.op, p.streamErr())
			if p.err == nil {
				p.err = &Error{Op: p.op, Code: connect.CodeInternal, Message: "the stream ended before the operation did"}
			}
			p.close()
			break
		}
		switch e := ev.GetEvent().(type) {
		case *ppb.PackageEvent_Started:
			return PackageEvent{Command: &PackageCommand{Args: e.Started.GetCommand(), User: e.Started.GetUser()}}, true
		case *ppb.PackageEvent_Stdout:
			return PackageEvent{Stdout: e.Stdout}, true
		case *ppb.PackageEvent_Stderr:
			return PackageEvent{Stderr: e.Stderr}, true
		case *ppb.PackageEvent_OutputLost:
			return PackageEvent{Lost: e.OutputLost.GetBytes()}, true
		case *ppb.PackageEvent_Done:
			p.ended = true
			p.res = packageResult(e.Done)
			p.close()
		}
	}
	return PackageEvent{}, false
}

func packageResult(d *ppb.Done) *PackageResult {
	res := &PackageResult{}
	for _, c := range d.GetChanges() {
		res.Changes = append(res.Changes, PackageChange{Name: c.GetName(), Old: c.GetOldVersion(), New: c.GetNewVersion()})
	}
	for _, s := range d.GetStaleContexts() {
		res.Stale = append(res.Stale, StaleContext{ContextID: s.GetContextId(), Modules: s.GetModules(), Message: s.GetMessage()})
	}
	return res
}

// Events iterates over what the operation produces until it ends; then
// Wait returns its outcome at once. A failure is yielded last.
func (p *PackageOp) Events() iter.Seq2[PackageEvent, error] {
	return func(yield func(PackageEvent, error) bool) {
		for {
			ev, ok := p.next()
			if !ok {
				if p.err != nil {
					yield(PackageEvent{}, p.err)
				}
				return
			}
			if !yield(ev, nil) {
				return
			}
		}
	}
}

// Wait follows the operation to its end, writing the installer's output
// to InstallOptions.Stdout and Stderr, and returns what it changed. A
// failed installer is an *Error with ErrFailedPrecondition's code, whose
// message holds its exit status and the last lines of its stderr.
func (p *PackageOp) Wait() (*PackageResult, error) {
	for {
		ev, ok := p.next()
		if !ok {
			break
		}
		switch {
		case ev.Stdout != nil && p.stdout != nil:
			p.stdout.Write(ev.Stdout)
		case ev.Stderr != nil && p.stderr != nil:
			p.stderr.Write(ev.Stderr)
		}
	}
	if p.err != nil {
		return nil, p.err
	}
	if p.res == nil {
		return nil, &Error{Op: p.op, Code: connect.CodeInternal, Message: "no outcome"}
	}
	return p.res, nil
}

// Close stops following the operation; it runs on in the sandbox.
func (p *PackageOp) Close() error {
	if !p.ended {
		p.ended = true
		p.err = &Error{Op: p.op, Code: connect.CodeCanceled, Message: "closed", Err: errors.New("closed")}
		return p.close()
	}
	return nil
}
