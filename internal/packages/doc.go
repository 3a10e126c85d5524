// Package packages manages the packages installed in the sandbox, for a
// client outside it: list what a package manager sees, install (a version
// pin, an upgrade, a local file) and remove, with the installer's output
// streamed as it comes and, at the end, what changed and which running
// kernels had already loaded a changed package.
//
// Four managers:
//   - PIP: `python -m pip` of the virtual environment kernels and commands
//     share (defaults.PythonVenv), as the request's user. The environment
//     sees Debian's packages (--system-site-packages): installing a name
//     Debian ships puts a copy in the environment that shadows Debian's;
//     removing it there makes Debian's visible again; Debian's own copy is
//     never touched (pip refuses, and so does Remove, precisely).
//   - NPM: npm in a project directory (default: the default user's home),
//     whose node_modules Deno kernels resolve npm: imports from, as the
//     request's user.
//   - R: install.packages and remove.packages with Rscript, into the R
//     library kernels and commands install into (defaults.RLibrary), as
//     the request's user.
//   - APT: apt-get and dpkg-query, as root; with strict users only the user
//     root may install or remove.
//
// Everything a request says is checked before anything runs (Validate*):
// names and versions by each manager's rules, no argument that starts with
// "-", absolute paths that exist; commands are exec'd, never given to a
// shell.
//
// An operation (Op) runs on a goroutine of the Installer, one per manager
// at a time (a second waits its turn, as long as its caller waits), and
// its output goes to a bounded outbuf.Log that any number of readers
// follow. Its lifetime is the request's deadline (Options.MaxDuration
// without one), not the request: a caller that goes away stops following
// it, and it runs to its end, so that no package manager is left half-way.
// At its deadline the installer's process group is killed.
//
// Before and after the installer runs, the operation lists what the
// manager sees; the difference is the operation's changes. For pip and R
// (and for apt, whose packages may be Python or R packages) it also maps
// the changed packages to what kernels load (Python top-level modules, R
// namespaces) and asks the code engine (Kernels) which running contexts
// loaded them: those are stale, and are told so.
//
// An install that fetches from a package index first checks that one of
// the indexes the manager would use answers (see reach.go): offline, it
// fails at once with "no package index reachable at INDEX: WHY" rather
// than after the manager's retries. A failed installer's error carries
// the one line of its output that says why (lastError); the stream has
// the rest.
//
// Errors match one of the Err* kinds (or context.DeadlineExceeded) with
// errors.Is; the Connect adapter (pkgconnect) maps them in one place.
package packages
