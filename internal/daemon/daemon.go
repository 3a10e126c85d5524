// Package daemon is envd's composition root: it builds every part from a
// Config, owns the listeners, and shuts everything down in order. Nothing
// else imports every package.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/coder/quartz"
	"golang.org/x/sync/errgroup"

	"github.com/envd-dev/envd/buildinfo"
	hpb "github.com/envd-dev/envd/gen/envd/handover/v1"
	"github.com/envd-dev/envd/internal/auth"
	"github.com/envd-dev/envd/internal/cgroup"
	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/filesystem/fsconnect"
	"github.com/envd-dev/envd/internal/handover"
	"github.com/envd-dev/envd/internal/httpapi"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/interpreter"
	"github.com/envd-dev/envd/internal/logship"
	"github.com/envd-dev/envd/internal/packages"
	"github.com/envd-dev/envd/internal/process"
	"github.com/envd-dev/envd/internal/process/procconnect"
	"github.com/envd-dev/envd/internal/reaper"
	"github.com/envd-dev/envd/internal/server"
	"github.com/envd-dev/envd/internal/shell"
	"github.com/envd-dev/envd/internal/shell/shellconnect"
	"github.com/envd-dev/envd/internal/slogtag"
	"github.com/envd-dev/envd/internal/tunnel"
)

// Version is envd's version (buildinfo.Version), reported by -version and
// in X-Envd-Version.
var Version = buildinfo.Version()

// Config is everything envd is started with.
type Config struct {
	Host        string // address to listen on; "" means all interfaces
	Port        int    // main port: every route (49983)
	CodePort    int    // code-interpreter API port (49999); 0: off
	DefaultUser string // "" picks `user` when it exists, else envd's own account
	AccessToken string // "" means no token until /init sets one
	VsockPort   uint32 // 0: off; else the main handler also listens on AF_VSOCK
	UnixSocket  string // "": off; else the main handler also listens here
	NoJupyter   bool   // run without code execution
	SyncClock   bool   // let POST /init set the machine's clock from its timestamp
	Logger      *slog.Logger
	// ShutdownGrace is how long children get between SIGTERM and SIGKILL at
	// shutdown. Zero: 5 s.
	ShutdownGrace time.Duration
	// Ready, if set, is called once every listener is open.
	Ready func()
	// JupyterURL and JupyterToken use an existing Jupyter server instead of
	// starting one. "": start our own.
	JupyterURL, JupyterToken string
	// StreamGrace is how long, at shutdown, requests still running once the
	// children have stopped get to end by themselves (a process stream
	// delivering the output and the end of its process) before their
	// contexts are cancelled. Zero: 2 s.
	StreamGrace time.Duration
	// Clock times the grace periods. Nil: the real clock.
	Clock quartz.Clock
	// JupyterAsRoot runs Jupyter and its kernels as root even with
	// StrictUsers.
	JupyterAsRoot bool
	// WarmKernels is how many prestarted kernels the code engine keeps
	// ready per language (interpreter.Options.WarmKernels). Nil: one
	// Python kernel (interpreter.DefaultWarmKernels); empty, or every
	// count 0: none.
	WarmKernels interpreter.WarmKernels
	// Zygote forks Python kernels from a zygote that preloaded ipykernel
	// and the data stack (jupyter.DefaultZygote) instead of starting each.
	Zygote bool
	// StrictUsers gives every request exactly the rights its user has in a
	// shell: file operations switch real ids and drop capabilities, cwd
	// checks run as the user, a non-root user sees and signals only its own
	// processes, and Jupyter and its kernels run as the default user.
	// False (the default) behaves as upstream envd: files are read as root,
	// writes create missing parents owned by the asked user, and Jupyter
	// and its kernels run as root.
	StrictUsers bool
	// ForwardPorts forwards the sandbox's external addresses to listeners
	// bound only to loopback (internal/ports). PortScanInterval is the
	// time between two scans of the listeners; zero: 1 s.
	ForwardPorts     bool
	PortScanInterval time.Duration
	// MMDSURL is where the host's boot metadata is read (Firecracker's
	// MMDS, mmds.DefaultURL in a guest): polled at boot for the sandbox's
	// ids and /init's token hash. "" or "off": not read.
	MMDSURL string
	// ShipLogs sends each log record to the logs collector the MMDS names
	// (its address), as upstream does in a Firecracker guest. Without an
	// MMDS (MMDSURL off) nothing is shipped either way.
	ShipLogs bool
	// RunDir is where envd writes, as upstream does in /run/e2b, files for
	// code in the sandbox to read: .E2B_SANDBOX (E2B_SANDBOX's value) and,
	// once the MMDS names them, .E2B_SANDBOX_ID and .E2B_TEMPLATE_ID. "":
	// none written.
	RunDir string
	// NotFirecracker is upstream's -isnotfc: processes and kernels get
	// E2B_SANDBOX=false instead of true.
	NotFirecracker bool
	// Cgroups picks the workload's cgroups: auto (v2 where CgroupFSRoot
	// is cgroup2, else v1), v1, v2 or off. CgroupFSRoot is where the cgroup
	// filesystems are mounted (zero: /sys/fs/cgroup); CgroupTree names
	// envd's tree under its own cgroup (zero: envd). FSFreezeWatchdog bounds
	// how long /fsfreeze leaves the root filesystem frozen (zero: 30 s).
	Cgroups, CgroupFSRoot, CgroupTree string
	FSFreezeWatchdog                  time.Duration
	// Handover, when set, is the live upgrade this envd was exec'd with
	// (handover.Take): it adopts the listeners and processes instead of
	// starting afresh, or rolls back to the old binary if it cannot.
	Handover *handover.Pending
	// DebugAddr, when set, serves net/http/pprof there (debug.go): a
	// loopback IP:PORT only, refused otherwise. "": off.
	DebugAddr string

	inherited *inherited       // the handover's listeners, until listen takes them
	tags      *slogtag.Handler // tags Logger's records with the sandbox's ids
	shipper   *logship.Shipper // ships Logger's records; nil unless ShipLogs and an MMDS
}

// Defaults of the shutdown's grace periods.
const (
	defaultShutdownGrace = 5 * time.Second
	defaultStreamGrace   = 2 * time.Second
	// hardGrace is how long requests get to return once their contexts are
	// cancelled, before their connections are closed under them.
	hardGrace = 2 * time.Second
)

// Run runs envd until ctx ends (or a listener fails), then shuts down in
// order: stop accepting, stop children (TERM, then KILL), let streams deliver
// their end, then cancel what still runs. It returns nil on a clean shutdown.
func Run(ctx context.Context, cfg Config) error {
	cfg, user, err := checkConfig(cfg)
	if err != nil {
		return err
	}
	ho := cfg.Handover
	if ho == nil {
		if err := reaper.Enable(cfg.Logger); err != nil {
			// Not fatal: without it orphans stay zombies, but everything works.
			cfg.Logger.Warn("cannot reap orphans", "err", err)
		}
	}
	handover.SetVersion(Version)
	p, err := newParts(cfg, user)
	if err != nil {
		if ho != nil {
			return ho.Rollback(err) // returns only if it cannot
		}
		return err
	}
	if ho != nil {
		// Until it commits, a failure leaves everything to the old envd,
		// which the rollback execs back: nothing here is cleaned up.
		if err := p.adopt(ho); err != nil {
			return ho.Rollback(fmt.Errorf("envd %s cannot adopt the handover: %w", Version, err))
		}
	}
	defer p.cleanup()
	lns, err := p.listen()
	p.cfg.inherited.closeRest()
	if err != nil {
		return err
	}
	dbg, err := listenDebug(cfg.DebugAddr, cfg.Logger)
	if err != nil {
		for _, l := range lns {
			l.ln.Close()
		}
		return err
	}
	defer dbg.close()
	s := serve(ctx, lns, cfg.Logger)
	stopSignals := p.upg.notifyUpgrades()
	defer stopSignals()
	p.code.start()
	p.ports.start()
	p.boot.start()
	cfg.Logger.Info("envd started", "version", Version, "default_user", user, "pid", os.Getpid(), "token", p.token.IsSet(),
		"strict_users", cfg.StrictUsers, "kernels_user", p.code.kernelsUser())
	if cfg.Ready != nil {
		cfg.Ready()
	}
	select {
	case <-ctx.Done():
	case err := <-s.failed:
		cfg.Logger.Error("a listener failed; shutting down", "err", err)
	case req := <-p.upg.reqs:
		return p.handOver(s, req) // returns only if it failed
	}
	return p.shutdown(s)
}

// checkConfig fills in cfg's defaults and resolves its default user.
func checkConfig(cfg Config) (Config, string, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// Tagged with the sandbox's ids once the MMDS names them.
	cfg.tags = slogtag.Wrap(cfg.Logger.Handler())
	cfg.Logger = slog.New(cfg.tags)
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = defaultShutdownGrace
	}
	if cfg.StreamGrace <= 0 {
		cfg.StreamGrace = defaultStreamGrace
	}
	if cfg.Clock == nil {
		cfg.Clock = quartz.NewReal()
	}
	if err := checkCgroupMode(cfg.Cgroups); err != nil {
		return cfg, "", err
	}
	if err := CheckDebugAddr(cfg.DebugAddr); err != nil {
		return cfg, "", fmt.Errorf("debug address %q: %w", cfg.DebugAddr, err)
	}
	user, err := defaultUser(cfg.DefaultUser)
	if err != nil {
		return cfg, "", err
	}
	// With ShipLogs, also shipped to the MMDS's logs address (logship.go).
	cfg = shipLogs(cfg)
	return cfg, user, nil
}

// parts are envd's services and the handlers that serve them.
type parts struct {
	cfg   Config
	log   *slog.Logger
	token *auth.Token
	procs *process.Manager
	shell *shell.Manager // the shell sessions, over procs
	files *filesystem.Files
	code  *codeExec
	pkgs  *packages.Installer
	ports *portsPart
	tunls *tunnel.Server
	boot  *bootMetadata   // nil without an MMDS
	cg    *cgroup.Manager // nil without cgroups
	hooks *httpapi.Hooks
	defs  *defaults.Defaults
	upg   *upgrader
	main  http.Handler // every route, for the main port, vsock and the unix socket
}

func newParts(cfg Config, user string) (*parts, error) {
	log := cfg.Logger
	defs := defaults.New(user, map[string]string{"E2B_SANDBOX": strconv.FormatBool(!cfg.NotFirecracker)})
	p := &parts{cfg: cfg, log: log, token: &auth.Token{}, defs: defs}
	if err := newRunDir(cfg.RunDir).write(runFileSandbox, strconv.FormatBool(!cfg.NotFirecracker)); err != nil {
		log.Warn("cannot write the run directory's sandbox file", "error", err)
	}
	p.upg = newUpgrader(p)
	var err error
	p.token.Set(cfg.AccessToken)

	popts := process.Options{Logger: log.With("component", "process"), Env: defs.Env, StrictUsers: cfg.StrictUsers}
	if cfg.StrictUsers {
		popts.RootEnv = func() map[string]string { return strictRootEnv(defs) }
	}
	p.cg = newCgroups(cfg, log.With("component", "cgroup"))
	popts.Cgroups, popts.OOMScoreAdj = p.cg, cgroup.OOMScoreWorkload
	p.procs = process.NewManager(popts)
	opts := server.HandlerOptions(log, defs)
	procPath, procHandler := procconnect.NewService(p.procs, defs).Handler(opts...)
	shellLog := log.With("component", "shell")
	p.shell = shell.New(shell.Options{Processes: p.procs, Logger: shellLog})
	shellPath, shellHandler := shellconnect.New(p.shell, defs, shellLog).Handler(opts...)
	fopts := filesystem.Options{Logger: log.With("component", "filesystem"), StrictUsers: cfg.StrictUsers}
	p.files = filesystem.New(fopts)
	filesPath, filesHandler := fsconnect.NewService(p.files, defs).Handler(opts...)
	api := httpapi.Options{Logger: log.With("component", "httpapi"), Files: p.files, Defaults: defs, Token: p.token, Version: Version}
	if cfg.SyncClock {
		api.SetClock = httpapi.SetSystemClock
	}
	if p.boot, err = newBootMetadata(cfg, defs); err != nil {
		p.files.Close()
		p.cg.Close()
		return nil, err
	} else if p.boot != nil {
		api.Boot = p.boot
	}
	routes := []server.Route{
		{Pattern: "GET /health", Handler: http.HandlerFunc(health), Public: true},
		{Pattern: procPath, Handler: procHandler},
		{Pattern: shellPath, Handler: shellHandler},
		{Pattern: filesPath, Handler: filesHandler},
	}
	p.hooks = newHooks(cfg, log, p.cg)
	api.Resume = p.hooks.Resume
	routes = append(routes, httpapi.New(api).Routes()...)
	routes = append(routes, p.hooks.Routes()...)
	routes = append(routes, p.upg.routes()...)
	code, err := newCodeExec(cfg, log, defs, jupyterPlace(p.cg, log), kernelOOMKills(p.cg), p.hooks.Frozen)
	if err != nil {
		p.boot.stop()
		p.hooks.Close()
		p.files.Close()
		p.cg.Close()
		return nil, err
	}
	p.code = code
	routes = append(routes, code.routes()...)
	pkgs, pkgRoute, err := newPackages(cfg, log, defs, code)
	if err != nil {
		p.cleanup()
		return nil, err
	}
	p.pkgs = pkgs
	routes = append(routes, pkgRoute)
	var portsRoute server.Route
	p.ports, portsRoute = newPorts(cfg, log, defs, code)
	p.tunls = tunnel.New(tunnel.Options{Logger: log.With("component", "tunnel"), Defaults: defs, StrictUsers: cfg.StrictUsers})
	routes = append(routes, portsRoute, p.tunls.Route())
	if p.main, err = server.New(server.Options{Logger: log, Token: p.token, Routes: routes}); err != nil {
		p.cleanup()
		return nil, fmt.Errorf("build routes: %w", err)
	}
	return p, nil
}

// cleanup releases what the parts hold once nothing serves them.
func (p *parts) cleanup() {
	p.boot.stop()
	p.hooks.Close() // never leave a filesystem frozen
	p.files.Close()
	p.cg.Close() // best effort: what orphans still hold stays
	p.code.cleanup()
	p.shell.Cleanup()
	if p.cfg.UnixSocket != "" {
		os.Remove(p.cfg.UnixSocket)
	}
	p.closeShipper() // last: after every record to ship
}

// listener is an open listener and the handler it serves.
type listener struct {
	ln   net.Listener
	h    http.Handler
	role hpb.Listener_Role
}

// listen opens every configured listener, or none if one fails. Every one is
// logged before any serves: once one answers, the log already names them all.
func (p *parts) listen() ([]listener, error) {
	codeLn, codeH, err := p.code.listenCodePort(p.cfg, p.log, p.token)
	if err != nil {
		return nil, err
	}
	lns, err := listen(p.cfg)
	if err != nil {
		if codeLn != nil {
			codeLn.Close()
		}
		return nil, err
	}
	var out []listener
	for _, ln := range lns {
		p.log.Info("listening", "addr", ln.Addr().String())
		out = append(out, listener{ln, p.main, hpb.Listener_ROLE_MAIN})
	}
	if codeLn != nil {
		p.log.Info("listening for the code-interpreter API", "addr", codeLn.Addr().String())
		out = append(out, listener{codeLn, codeH, hpb.Listener_ROLE_CODE})
	}
	return out, nil
}

// serving is envd's HTTP servers, one per listener, each served by a
// goroutine of one errgroup.
type serving struct {
	srvs []*http.Server
	g    *errgroup.Group
	// failed receives the error of each listener that fails.
	failed chan error
	// cancelRequests cancels every request's context: the hard stop.
	cancelRequests context.CancelFunc
	// accepting counts the servers that have not closed their listener yet.
	accepting sync.WaitGroup
	// lns are the listeners, which a handover stops and passes on.
	lns []*handoverListener
}

func serve(ctx context.Context, lns []listener, log *slog.Logger) *serving {
	// Requests outlive ctx: shutdown ends them in order, then cancels base.
	base, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &serving{g: &errgroup.Group{}, failed: make(chan error, len(lns)), cancelRequests: cancel}
	for _, l := range lns {
		hl := &handoverListener{Listener: l.ln, role: l.role}
		s.lns = append(s.lns, hl)
		l.ln = hl
		srv := server.HTTPServer(base, l.h, log)
		s.accepting.Add(1)
		// Shutdown calls it once it has closed the listeners.
		srv.RegisterOnShutdown(s.accepting.Done)
		s.srvs = append(s.srvs, srv)
		s.g.Go(func() error {
			err := srv.Serve(l.ln)
			if errors.Is(err, http.ErrServerClosed) || errors.Is(err, errHandedOver) {
				return nil
			}
			err = fmt.Errorf("serve %s: %w", hl.Addr(), err)
			s.failed <- err
			return err
		})
	}
	return s
}

// shutdown stops envd in order, graceful then hard:
//  1. stop accepting: close every listener; requests in flight go on;
//  2. stop package operations (their installers are killed), port
//     forwards and tunnels, code
//     execution and every child, TERM then KILL after ShutdownGrace;
//     process streams then deliver their output and end;
//  3. stop the watchers;
//  4. wait up to StreamGrace for every request to end by itself;
//  5. cancel the requests still running, wait up to hardGrace for them to
//     return, then close their connections.
//
// It returns the error of a listener that failed, if one did.
func (p *parts) shutdown(s *serving) error {
	log, clock := p.log, p.cfg.Clock
	log.Info("shutting down")

	waitCtx, stopWaiting := context.WithCancel(context.Background())
	defer stopWaiting()
	drained := make(chan struct{})
	var shutdowns sync.WaitGroup
	for _, srv := range s.srvs {
		shutdowns.Go(func() { srv.Shutdown(waitCtx) })
	}
	go func() {
		shutdowns.Wait()
		close(drained)
	}()
	s.accepting.Wait()

	closePackages(p.pkgs, log)
	p.ports.stop()
	p.tunls.Close()
	p.stopChildren()
	p.files.Close()

	streams := clock.NewTimer(p.cfg.StreamGrace, "shutdown", "streams")
	select {
	case <-drained:
		streams.Stop()
	case <-streams.C:
		log.Warn("requests still running after the grace period; cancelling them", "grace", p.cfg.StreamGrace)
	}
	s.cancelRequests()
	hard := clock.NewTimer(hardGrace, "shutdown", "hard")
	select {
	case <-drained:
		hard.Stop()
	case <-hard.C:
		log.Warn("requests still running after their cancellation; closing their connections", "grace", hardGrace)
	}
	stopWaiting()
	for _, srv := range s.srvs {
		srv.Close()
	}
	<-drained
	err := s.g.Wait()
	log.Info("envd stopped")
	return err
}

// stopChildren stops code execution (Jupyter first: its supervisor would
// restart a server it sees die), the processes envd started, and the
// orphans reparented to it, within one grace period: TERM at once, KILL to
// whatever is left when it ends.
func (p *parts) stopChildren() {
	grace, cancel := context.WithCancel(context.Background())
	defer cancel()
	timer := p.cfg.Clock.AfterFunc(p.cfg.ShutdownGrace, cancel, "shutdown", "children")
	defer timer.Stop()
	p.code.stop(grace)
	// The two race to kill at the end of the grace (a process's group
	// holds orphans-to-be, an orphan may lead a group): count both, and
	// say it once.
	var orphans sync.WaitGroup
	var orphansKilled int
	orphans.Go(func() { orphansKilled = stopOrphans(grace) })
	p.shell.Shutdown() // SIGHUP: an interactive shell ignores the SIGTERM below
	killed := p.procs.Shutdown(grace)
	orphans.Wait()
	if killed+orphansKilled > 0 {
		p.log.Warn("killed children that ignored SIGTERM", "processes", killed, "orphans", orphansKilled)
	}
}

// stopOrphans ends every process parented to envd: its own children and the
// orphans reparented to it as their subreaper, including those that appear
// while it runs (their parent just died). Each gets TERM once, as soon as it
// is seen; whatever is left when grace ends gets KILL. Group leaders
// (terminal sessions) are signalled as a group so their jobs go too. It
// returns how many it killed.
func stopOrphans(grace context.Context) (killed int) {
	signal := func(pid int, sig syscall.Signal) {
		reaper.SignalChild(pid, sig, true) // and a leader's group
	}
	// The kernel tells nobody when a child appears: look again every poll.
	const poll = 20 * time.Millisecond
	tick := time.NewTicker(poll)
	defer tick.Stop()
	termed := map[int]bool{}
	for grace.Err() == nil {
		kids := reaper.Children()
		if len(kids) == 0 {
			return 0
		}
		for _, pid := range kids {
			if !termed[pid] {
				termed[pid] = true
				signal(pid, syscall.SIGTERM)
			}
		}
		select {
		case <-tick.C:
		case <-grace.Done():
		}
	}
	seen := map[int]bool{}
	for range 50 {
		kids := reaper.Children()
		if len(kids) == 0 {
			return killed
		}
		for _, pid := range kids {
			signal(pid, syscall.SIGKILL)
			if !seen[pid] {
				seen[pid] = true
				killed++
			}
		}
		<-tick.C
	}
	return killed
}

// defaultUser picks the run-as user for requests that name none.
func defaultUser(name string) (string, error) {
	if name != "" {
		if _, err := identity.Lookup(name); err != nil {
			return "", fmt.Errorf("default user: %w", err)
		}
		return name, nil
	}
	if _, err := identity.Lookup("user"); err == nil {
		return "user", nil
	}
	u, err := identity.Current()
	if err != nil {
		return "", err
	}
	return u.Name, nil
}

func health(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	// Which envd answers: a live upgrade's caller waits for the new one.
	w.Header().Set("X-Envd-Version", Version)
	w.WriteHeader(http.StatusNoContent)
}

// listen opens every configured listener, or none if one fails.
func listen(cfg Config) ([]net.Listener, error) {
	var lns []net.Listener
	fail := func(err error) ([]net.Listener, error) {
		for _, ln := range lns {
			ln.Close()
		}
		return nil, err
	}
	ln := cfg.inherited.take("main/tcp")
	if ln == nil {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)))
		if err != nil {
			return fail(fmt.Errorf("listen on port %d: %w", cfg.Port, err))
		}
	}
	lns = append(lns, ln)
	if cfg.VsockPort != 0 {
		ln := cfg.inherited.take("main/vsock")
		if ln == nil {
			vl, err := listenVsock(cfg.VsockPort)
			if err != nil {
				return fail(err)
			}
			ln = vl
		}
		lns = append(lns, ln)
	}
	if ln := cfg.inherited.take("main/unix"); ln != nil && cfg.UnixSocket != "" {
		lns = append(lns, ln)
	} else if cfg.UnixSocket != "" {
		if err := os.Remove(cfg.UnixSocket); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fail(fmt.Errorf("remove stale unix socket: %w", err))
		}
		ln, err := net.Listen("unix", cfg.UnixSocket)
		if err != nil {
			return fail(fmt.Errorf("listen on unix socket %s: %w", cfg.UnixSocket, err))
		}
		lns = append(lns, ln)
	}
	return lns, nil
}
