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
	"syscall"
	"time"

	"github.com/mdlayher/vsock"

	"github.com/envd-dev/envd/internal/auth"
	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/httpapi"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/process"
	"github.com/envd-dev/envd/internal/reaper"
	"github.com/envd-dev/envd/internal/server"
)

// Version is envd's version, reported by -version and /init.
var Version = "0.1.0"

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
	// JupyterAsRoot runs Jupyter and its kernels as root; by default (envd
	// being root) they run as the default user.
	JupyterAsRoot bool
}

// Run runs envd until ctx ends, then shuts down in order: stop accepting,
// stop children (TERM, then KILL), end remaining streams. It returns nil on a
// clean shutdown.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 5 * time.Second
	}
	if err := reaper.Enable(log); err != nil {
		// Not fatal: without it orphans stay zombies, but everything works.
		log.Warn("cannot reap orphans", "err", err)
	}
	user, err := defaultUser(cfg.DefaultUser)
	if err != nil {
		return err
	}
	defs := defaults.New(user, map[string]string{"E2B_SANDBOX": "true"})
	token := &auth.Token{}
	token.Set(cfg.AccessToken)

	procs := process.NewManager(process.Options{Logger: log.With("component", "process"), Env: defs.Env})
	opts := server.HandlerOptions(log, defs)
	procPath, procHandler := process.NewService(procs, defs).Handler(opts...)
	files := filesystem.New(filesystem.Options{Logger: log.With("component", "filesystem")})
	defer files.Close()
	filesPath, filesHandler := filesystem.NewService(files, defs).Handler(opts...)
	api := httpapi.Options{Logger: log.With("component", "httpapi"), Files: files, Defaults: defs, Token: token, Version: Version}
	if cfg.SyncClock {
		api.SetClock = httpapi.SetSystemClock
	}
	routes := []server.Route{
		{Pattern: "GET /health", Handler: http.HandlerFunc(health), Public: true},
		{Pattern: procPath, Handler: procHandler},
		{Pattern: filesPath, Handler: filesHandler},
	}
	routes = append(routes, httpapi.New(api).Routes()...)
	code, err := newCodeExec(cfg, log, defs)
	if err != nil {
		return err
	}
	defer code.cleanup()
	routes = append(routes, code.routes()...)
	h, err := server.New(server.Options{Logger: log, Token: token, Routes: routes})
	if err != nil {
		return fmt.Errorf("build routes: %w", err)
	}

	codeLn, codeH, err := code.listenCodePort(cfg, log, token)
	if err != nil {
		return err
	}
	lns, err := listen(cfg)
	if err != nil {
		if codeLn != nil {
			codeLn.Close()
		}
		return err
	}
	base, cancelStreams := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelStreams()
	var srvs []*http.Server
	// Every listener is logged before any serves: once one answers, the log
	// already names them all.
	for _, ln := range lns {
		log.Info("listening", "addr", ln.Addr().String())
	}
	for _, ln := range lns {
		srvs = append(srvs, server.Serve(base, ln, h, log))
	}
	if codeLn != nil {
		srvs = append(srvs, server.Serve(base, codeLn, codeH, log))
		log.Info("listening for the code-interpreter API", "addr", codeLn.Addr().String())
	}
	code.start()
	log.Info("envd started", "version", Version, "default_user", user, "pid", os.Getpid(), "token", token.IsSet())
	if cfg.Ready != nil {
		cfg.Ready()
	}

	<-ctx.Done()
	log.Info("shutting down")
	// Stop accepting: Shutdown closes the listeners at once, then waits for
	// connections to go idle, which streams only do once they end.
	shutdownDone := make(chan struct{})
	go func() {
		defer close(shutdownDone)
		sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace+5*time.Second)
		defer cancel()
		for _, s := range srvs {
			s.Shutdown(sctx)
		}
	}()
	// One grace period for everything: the processes envd started, and the
	// orphans reparented to it, which get SIGTERM as soon as they appear.
	deadline := time.Now().Add(cfg.ShutdownGrace)
	gctx, cancel := context.WithDeadline(context.Background(), deadline)
	code.stop(gctx)
	childrenDone := make(chan struct{})
	go func() {
		defer close(childrenDone)
		stopChildren(log, deadline)
	}()
	procs.Shutdown(gctx)
	cancel()
	<-childrenDone
	// Whatever still streams (watchers, idle Connects) ends now.
	cancelStreams()
	<-shutdownDone
	for _, s := range srvs {
		s.Close()
	}
	if cfg.UnixSocket != "" {
		os.Remove(cfg.UnixSocket)
	}
	log.Info("envd stopped")
	return nil
}

// stopChildren ends every process parented to envd: its own children and the
// orphans reparented to it as their subreaper, including those that appear
// while it runs (their parent just died). Each gets TERM once, as soon as it
// is seen; whatever is left at deadline gets KILL. Group leaders (terminal
// sessions) are signalled as a group so their jobs go too.
func stopChildren(log *slog.Logger, deadline time.Time) {
	signal := func(pid int, sig syscall.Signal) {
		if pgid, err := syscall.Getpgid(pid); err == nil && pgid == pid {
			syscall.Kill(-pid, sig)
		}
		syscall.Kill(pid, sig)
	}
	signalAll := func(sig syscall.Signal) int {
		kids := reaper.Children()
		for _, pid := range kids {
			signal(pid, sig)
		}
		return len(kids)
	}
	termed := map[int]bool{}
	for time.Now().Before(deadline) {
		kids := reaper.Children()
		if len(kids) == 0 {
			return
		}
		for _, pid := range kids {
			if !termed[pid] {
				termed[pid] = true
				signal(pid, syscall.SIGTERM)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	for range 50 {
		n := signalAll(syscall.SIGKILL)
		if n == 0 {
			return
		}
		log.Warn("killed children that ignored SIGTERM", "count", n)
		time.Sleep(20 * time.Millisecond)
	}
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
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)))
	if err != nil {
		return fail(fmt.Errorf("listen on port %d: %w", cfg.Port, err))
	}
	lns = append(lns, ln)
	if cfg.VsockPort != 0 {
		ln, err := vsock.Listen(cfg.VsockPort, nil)
		if err != nil {
			return fail(fmt.Errorf("listen on vsock port %d: %w", cfg.VsockPort, err))
		}
		lns = append(lns, ln)
	}
	if cfg.UnixSocket != "" {
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
