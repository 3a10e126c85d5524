package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"

	"github.com/envd-dev/envd/internal/auth"
	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/interpreter"
	"github.com/envd-dev/envd/internal/interpreter/codeconnect"
	"github.com/envd-dev/envd/internal/interpreter/codehttp"
	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/jupyter/startup"
	"github.com/envd-dev/envd/internal/server"
)

// codeExec is stateful code execution: the supervised Jupyter server, the
// engine on top of it and its two adapters, E2B's HTTP API and the native
// Connect service. With -no-jupyter only the adapters exist, answering 503
// and unavailable.
type codeExec struct {
	log     *slog.Logger
	sup     *jupyter.Supervisor // nil with -no-jupyter
	eng     *interpreter.Engine // nil with -no-jupyter
	api     *codehttp.API
	svc     server.Route   // the Connect service
	startup *startup.Temp  // kernel-side startup files, removed at stop
	runAs   *identity.User // the kernels' account; nil: envd's own
	// handedStartup are the startup files of the Jupyter server a live
	// upgrade handed over, removed at stop too; nil: none.
	handedStartup *startup.Temp
}

// sharedEnv is what commands and kernels both get on top of their own
// basics (a login's HOME, USER, SHELL...): one PATH (identity.SandboxPath
// with the shared virtual environment first), the virtual environment and
// R library (Packages.Env), the locale (envd's LANG, else C.UTF-8), and
// failFast, the package managers' settings for giving up soon when no
// index answers (defaults.FailFastEnv).
func sharedEnv(pkgs defaults.Packages, failFast map[string]string) map[string]string {
	env := pkgs.Env(identity.SandboxPath())
	if _, ok := env["PATH"]; !ok {
		env["PATH"] = identity.SandboxPath()
	}
	env["LANG"] = locale()
	maps.Copy(env, failFast)
	return env
}

// locale is the LANG commands and kernels get: envd's, else C.UTF-8.
func locale() string {
	if lang := os.Getenv("LANG"); lang != "" {
		return lang
	}
	return "C.UTF-8"
}

// kernelsUser decides who Jupyter and its kernels run as, and whether
// they get the shared package environment pkgs (see kernels_user.go):
// root when envd is root (nil: envd's own account) in the default mode
// when the default user is root or can become root without a password,
// as upstream's, else the default user; the default user in strict mode;
// root with -jupyter-as-root.
func kernelsUser(cfg Config, defs *defaults.Defaults, pkgs defaults.Packages) (kernelsAccount, error) {
	euid := os.Geteuid()
	if euid != 0 || (cfg.JupyterURL != "" && !cfg.StrictUsers) {
		return chooseKernels(cfg, euid, nil, nil, nil), nil
	}
	def, err := defs.User()
	if err != nil {
		return kernelsAccount{}, fmt.Errorf("jupyter user: %w", err)
	}
	var owners []*identity.User
	if !cfg.StrictUsers {
		owners = packageOwners(pkgs, def)
	}
	a := chooseKernels(cfg, euid, def, owners, func(u *identity.User) (bool, string) {
		return rootEquivalent(u, sudoPaths, rootCheckTimeout)
	})
	if uid, ok := handedServerUID(cfg); ok {
		a = keepHandedAccount(a, uid, lookupUID)
	}
	return a, nil
}

// kernelsUser names the kernels' account for the log ("" without Jupyter).
func (c *codeExec) kernelsUser() string {
	if c.sup == nil {
		return ""
	}
	return c.accountName()
}

// accountName names the kernels' account: runAs's, else envd's own.
func (c *codeExec) accountName() string {
	if c.runAs != nil {
		return c.runAs.Name
	}
	if u, err := identity.Current(); err == nil {
		return u.Name
	}
	return strconv.Itoa(os.Geteuid())
}

func newCodeExec(cfg Config, log *slog.Logger, defs *defaults.Defaults, place func(*exec.Cmd, func() error) error, oomKills func() uint64, paused func() bool) (*codeExec, error) {
	c := &codeExec{log: log}
	// Kernels and commands share one environment (sharedEnv): where
	// packages are installed from code, PATH and the locale; the python3
	// kernel runs the virtual environment's python.
	pkgs, err := defaults.FindPackages()
	if err != nil {
		return nil, fmt.Errorf("package locations: %w", err)
	}
	failFast, kept := defaults.FailFastEnv(defaults.FindFailFastFiles(pkgs.PythonVenv))
	shared := sharedEnv(pkgs, failFast)
	defs.SetBaseEnv(shared)
	log.Info("package locations", "python_venv", pkgs.PythonVenv, "r_library", pkgs.RLibrary)
	log.Info("package managers' retries for code and commands", "set", slices.Sorted(maps.Keys(failFast)), "left_to_config", kept)
	if cfg.NoJupyter {
		c.adapters(log, defs)
		return c, nil
	}
	acct, err := kernelsUser(cfg, defs, pkgs)
	if err != nil {
		return nil, err
	}
	runAs := acct.user
	c.runAs = runAs
	logKernels := log.Info
	if acct.kept {
		logKernels = log.Warn
	}
	logKernels("kernels' account chosen", "kernels_user", c.accountName(), "shared_packages", acct.shared, "reason", acct.why)
	if !acct.shared {
		// Root kernels that must not load what a user can write: no
		// virtual environment (Debian's python3, nothing on PATH nor
		// VIRTUAL_ENV), no R_LIBS, and R's site libraries without the
		// one install-deps.sh gives the sandbox user.
		pkgs = defaults.Packages{}
		shared = sharedEnv(pkgs, failFast)
		rootREnv(shared)
	}
	// The startup files stay envd's; only the IPython profile is the
	// kernels' user's (IPython ignores a profile it cannot write to, and
	// with it our startup files). See startup.Options.Owner.
	stOpts := startup.Options{PythonVenv: pkgs.PythonVenv, Logger: log}
	if runAs != nil {
		stOpts.Owner = &startup.Owner{UID: runAs.UID, GID: runAs.GID}
	}
	st, err := startup.InstallTemp(stOpts)
	if err != nil {
		return nil, fmt.Errorf("kernel startup files: %w", err)
	}
	c.startup = st
	layout := st.Layout
	// JUPYTER_PATH from envd's environment is kept, after our directory:
	// more kernelspecs (a template's, a test's) without writing system dirs.
	env := layout.Environ([]string{"JUPYTER_PATH=" + os.Getenv("JUPYTER_PATH")})
	for _, k := range slices.Sorted(maps.Keys(shared)) {
		env = append(env, k+"="+shared[k])
	}
	sopts := jupyter.Options{Env: env, Logger: log, URL: cfg.JupyterURL, Token: cfg.JupyterToken, Place: place, Paused: paused}
	if runAs != nil {
		sopts.RunAs = &jupyter.User{UID: runAs.UID, GID: runAs.GID, Groups: runAs.Groups, Home: runAs.Home, Name: runAs.Name}
	}
	// The default Python context's kernel starts beside the server (the
	// engine exists by the time the server is spawned).
	sopts.EarlyKernel = func() (string, string) { return c.eng.EarlyKernel() }
	if cfg.Zygote {
		sopts.Zygote = jupyter.DefaultZygote()
	}
	c.sup = jupyter.New(sopts)
	warm := cfg.WarmKernels
	if warm == nil {
		warm = interpreter.DefaultWarmKernels()
	}
	if err := warm.Validate(); err != nil {
		return nil, fmt.Errorf("warm kernels: %w", err)
	}
	c.eng = interpreter.New(interpreter.Options{
		Supervisor: c.sup,
		RunAs:      runAs,
		DefaultCwd: func() string {
			if w := defs.Workdir(); w != "" {
				return w
			}
			if u, err := defs.User(); err == nil {
				return u.Home
			}
			return ""
		},
		GlobalEnv:   defs.InitEnv, // not the base: kernels have their own PATH
		Logger:      log,
		WarmKernels: warm,
		OOMKills:    oomKills,
	})
	c.adapters(log, defs)
	return c, nil
}

// adapters builds the HTTP API and the Connect service over c.eng.
func (c *codeExec) adapters(log *slog.Logger, defs *defaults.Defaults) {
	c.api = codehttp.New(c.eng, codehttp.Options{Logger: log})
	path, h := codeconnect.New(c.eng, codeconnect.Options{Logger: log}).Handler(server.HandlerOptions(log, defs)...)
	c.svc = server.Route{Pattern: path, Handler: h}
}

// routes are the code API's routes for envd's main port: the HTTP API and
// the Connect service.
func (c *codeExec) routes() []server.Route { return append(c.api.Routes(), c.svc) }

// start starts Jupyter and the engine in the background: the main port is
// already listening, and /execute waits for them.
func (c *codeExec) start() {
	if c.sup == nil {
		return
	}
	go func() {
		if err := c.sup.Start(context.Background()); err != nil {
			c.log.Warn("jupyter server did not start; retrying in the background", "error", err)
		}
	}()
	c.eng.Start()
}

// listenCodePort serves the code API, with its own /health, on the code
// port (0: none).
func (c *codeExec) listenCodePort(cfg Config, log *slog.Logger, token *auth.Token) (net.Listener, http.Handler, error) {
	if cfg.CodePort == 0 {
		return nil, nil, nil
	}
	routes := append(c.routes(), c.api.HealthRoute())
	if !cfg.StrictUsers {
		// The SDKs call the context routes without the token (a secured
		// sandbox's createCodeContext would get 401): on this port they
		// need none, as upstream's. /execute, which runs code, does; so
		// does everything in strict mode. See docs/security.md, "The code
		// port's token".
		for i := range routes {
			if codehttp.SDKSendsNoToken(routes[i].Pattern) {
				routes[i].Public = true
			}
		}
	}
	h, err := server.New(server.Options{Logger: log, Token: token, Routes: routes})
	if err != nil {
		return nil, nil, fmt.Errorf("build code routes: %w", err)
	}
	if ln := cfg.inherited.take("code/tcp"); ln != nil {
		return ln, h, nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.CodePort)))
	if err != nil {
		return nil, nil, fmt.Errorf("listen on code port %d: %w", cfg.CodePort, err)
	}
	return ln, h, nil
}

// stop ends every execution, lets the streams following them deliver the
// end (until ctx ends at most), closes the kernels' connections, then
// stops Jupyter (its kernels with it). It must run before envd signals its
// children, or the supervisor would restart the server it sees die.
func (c *codeExec) stop(ctx context.Context) {
	if c.sup == nil {
		return
	}
	c.eng.Shutdown(ctx)
	if err := c.sup.Stop(ctx); err != nil {
		c.log.Warn("stop jupyter server", "error", err)
	}
}

// cleanup removes the kernels' startup files (startup.Temp.Remove never
// follows a link the kernels' user planted in its profile).
func (c *codeExec) cleanup() {
	for _, t := range []*startup.Temp{c.startup, c.handedStartup} {
		if t == nil {
			continue
		}
		if err := t.Remove(); err != nil {
			c.log.Warn("remove kernel startup files", "error", err)
		}
	}
}

// debianRLibsSite is R's site libraries on Debian without
// /usr/local/lib/R/site-library, which install-deps.sh gives the sandbox
// user for install.packages.
const debianRLibsSite = "/usr/lib/R/site-library:/usr/lib/R/library"

// rootREnv keeps R run as root out of the site library the sandbox user
// may write: R_LIBS_SITE without it (R's own default would put it first),
// and R_ENVIRON=/dev/null, for Debian's /etc/R/Renviron.site puts it first
// again whatever R_LIBS_SITE says (it sets nothing else R needs: that
// file's only other line is a flag for R CMD check). A value env already
// has (from /init) wins.
func rootREnv(env map[string]string) {
	for k, v := range map[string]string{"R_LIBS_SITE": debianRLibsSite, "R_ENVIRON": "/dev/null"} {
		if _, set := env[k]; !set {
			env[k] = v
		}
	}
}

// strictRootEnv is what a process run as root gets in strict mode: /init's
// variables and the locale, without the shared package environment (the
// Python virtual environment and R library the sandbox user may write),
// so that nothing the user planted there runs as root (rootREnv).
func strictRootEnv(defs *defaults.Defaults) map[string]string {
	env := defs.InitEnv()
	if _, set := env["LANG"]; !set {
		env["LANG"] = locale()
	}
	rootREnv(env)
	return env
}
