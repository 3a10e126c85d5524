package jupyter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/backoff"
)

// DefaultCommand runs Debian's Jupyter Server. It names /usr/bin/python3
// explicitly: the python3 first on PATH may be another build without Jupyter.
var DefaultCommand = []string{"/usr/bin/python3", "-m", "jupyter_server"}

// stableRun is how long a server must have run for a later crash to restart
// it after MinBackoff again, rather than after the grown backoff.
const stableRun = 30 * time.Second

// User is the identity the server and its kernels run as.
type User struct {
	UID, GID uint32
	Groups   []uint32 // supplementary groups; nil: none
	Home     string   // HOME, and the server's working directory
	Name     string   // USER and LOGNAME; empty: not set
}

// Options configures a Supervisor. Every zero value is a usable default.
type Options struct {
	// Command is the server's argv prefix; our flags are appended.
	// Zero: DefaultCommand.
	Command []string
	// Args are appended after our flags; later flags win, so they can
	// override ours. Zero: none.
	Args []string
	// Env is added to the clean environment the server (and so every
	// kernel) gets, e.g. "PLOTLY_RENDERER=plotly_mimetype". Later entries
	// win. Zero: nothing added.
	Env []string
	// RunAs runs the server and kernels as this user (envd must be root).
	// The server's token is readable by RunAs's primary group: that group
	// should be the user's own. Zero (nil): envd's own user.
	RunAs *User
	// RuntimeDir holds the server's config, token and connection files. It
	// is created if missing; it must be a directory (not a link) of envd's
	// account that no one else can write, else Start fails. Start makes it
	// 0755 when RunAs is set and replaces its config and runtime
	// subdirectories; Stop removes the token and the runtime subdirectory.
	// Zero: a fresh temporary directory, removed by Stop (and, if envd was
	// killed before, by a later Start). See rundir.go for the layout.
	RuntimeDir string

	// URL and Token select an existing server: no process is started, it
	// is only health-checked, and it is never restarted. Zero: start our own.
	URL, Token string

	// Logger receives the supervisor's logs. Zero: slog.Default().
	Logger *slog.Logger
	// StartTimeout bounds each start, from spawn to healthy. Zero: 60 s.
	StartTimeout time.Duration
	// StopGrace is how long Stop waits after SIGTERM before SIGKILL. Jupyter
	// needs about a second to shut its kernels down. Zero: 5 s.
	StopGrace time.Duration
	// MinBackoff and MaxBackoff bound the delay before restarting a server
	// that died; it doubles on each consecutive failure. Zero: 100 ms, 10 s.
	MinBackoff, MaxBackoff time.Duration
	// Clock times the delay before a restart and how long a run lasted
	// (see stableRun), and is the clock of the server's clients
	// (ClientOptions.Clock). Zero: the real clock.
	Clock quartz.Clock
	// HangAfter: a ready server that has answered no health probe for
	// this long is taken for stuck (hang.go): its threads' Python stacks
	// and last output are logged, and it is killed with its kernels and
	// started anew, as after a crash. Not while Paused says the workload
	// is frozen. Zero: 60 s; negative: never.
	HangAfter time.Duration
	// ProbeInterval is the pause between health probes of a ready server.
	// Zero: 5 s.
	ProbeInterval time.Duration
	// Paused, when set, tells whether the server is frozen on purpose
	// (the snapshot hooks' /freeze or /fsfreeze): not answering then is
	// no hang. Zero: never.
	Paused func() bool
	// LogTailBytes is how much of the server's output is kept for the crash
	// log. Zero: 64 KiB.
	LogTailBytes int
	// DisableLatencyFixes leaves out the server's TCP_NODELAY patch and the
	// client's TCP_QUICKACK, to measure what they are worth. Zero: fixes on.
	DisableLatencyFixes bool
	// EarlyKernel, when set, names the kernelspec and working directory
	// of the kernel envd will start first on each server run (the default
	// Python context's): the server launches it before its own imports,
	// so that the two start side by side, and hands it over when that
	// start comes (see early_kernel.py: only a start that would launch
	// the very same process takes it; any other leaves it to be
	// discarded, as it is when not asked for within a minute). "": none.
	// Only for the default Command.
	EarlyKernel func() (name, dir string)
	// Zygote, when set, has the server fork the kernels of its
	// kernelspecs from a zygote that preloaded them (see zygote.py and
	// zygote_launch.py), instead of starting each one.
	Zygote *Zygote
	// Place, when set, starts the server process: it must call start
	// (which forks and execs cmd) on its own goroutine, so that the server
	// and its kernels are born where Place puts them (envd's jupyter
	// cgroup, with their oom_score_adj). Zero: start is called as is.
	Place func(cmd *exec.Cmd, start func() error) error
}

// ServerState is where a Supervisor's server is in its life.
type ServerState int

// Server states. A server moves Starting -> Ready -> Restarting -> Starting
// ... until Stopped, which is final.
const (
	ServerStarting ServerState = iota
	ServerReady
	ServerRestarting // exited; waiting out the backoff before the next start
	ServerStopped
)

func (s ServerState) String() string {
	switch s {
	case ServerStarting:
		return "starting"
	case ServerReady:
		return "ready"
	case ServerRestarting:
		return "restarting"
	case ServerStopped:
		return "stopped"
	}
	return "ServerState(" + strconv.Itoa(int(s)) + ")"
}

// ServerStatus is a snapshot of the supervised server.
type ServerStatus struct {
	State ServerState
	// Generation counts the server runs that became ready. When it changes,
	// every kernel of the previous generation is gone.
	Generation uint64
	URL        string // of the ready server; empty otherwise
	PID        int    // of the server process once spawned (or adopted), ready or not; 0 for an external server
	// Err says why the last run ended or failed to start; nil if none did.
	Err error
	// StartFailing: the last attempt to start the server (or to reach the
	// one given by URL) failed, and none has succeeded since; Err says
	// why. A server restarting after a crash is not failing until a start
	// fails.
	StartFailing bool
	// Changed is closed when any field above changes.
	Changed <-chan struct{}
}

// Supervisor runs a Jupyter server and keeps it running.
//
// Use: New, then Start (it returns once the server is healthy); get a
// Client for REST calls and kernel connections; watch Status to learn that
// the server was restarted (Generation changed: all kernels are gone; old
// clients now fail with ErrServerRestarted); Stop at shutdown.
type Supervisor struct {
	opts       Options
	log        *slog.Logger
	runtimeDir string      // set by Start
	ownsDir    bool        // runtimeDir is a temp dir of ours
	dirs       runtimeDirs // runtimeDir's descriptors, set by Start

	ctx     context.Context // cancelled by Stop
	cancel  context.CancelFunc
	killNow chan struct{} // closed when Stop's context ends: skip the grace
	done    chan struct{} // closed when the supervision loop has exited
	first   chan error    // outcome of the first start, for Start

	mu        sync.Mutex
	started   bool          // guarded by mu
	stopping  bool          // guarded by mu
	firstSent bool          // guarded by mu
	status    ServerStatus  // guarded by mu; Changed unset
	changed   chan struct{} // guarded by mu
	client    *Client       // of the ready generation; guarded by mu
	token     string        // guarded by mu
	connDir   string        // where kernels' connection files go; guarded by mu

	// A live upgrade (handover.go).
	adopt    *Adoption  // the server to adopt at Start; guarded by mu
	adopted  adoptState // what became of it; guarded by mu
	live     *serverRun // the published run; guarded by mu
	handing  bool       // Handover stops supervising without stopping the server; guarded by mu
	handedTo *serverRun // the run Handover left running; guarded by mu
}

// New returns a Supervisor; nothing runs until Start.
func New(opts Options) *Supervisor {
	if len(opts.Command) == 0 {
		opts.Command = DefaultCommand
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 60 * time.Second
	}
	if opts.StopGrace <= 0 {
		opts.StopGrace = 5 * time.Second
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 10 * time.Second
	}
	opts.MaxBackoff = max(opts.MaxBackoff, opts.MinBackoff)
	if opts.Clock == nil {
		opts.Clock = quartz.NewReal()
	}
	if opts.HangAfter == 0 {
		opts.HangAfter = 60 * time.Second
	}
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = 5 * time.Second
	}
	if opts.LogTailBytes <= 0 {
		opts.LogTailBytes = 64 << 10
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Supervisor{
		opts:    opts,
		log:     opts.Logger.With("component", "jupyter"),
		ctx:     ctx,
		cancel:  cancel,
		killNow: make(chan struct{}),
		done:    make(chan struct{}),
		first:   make(chan error, 1),
		changed: make(chan struct{}),
	}
}

// Start starts the server and waits until it is healthy, ctx is done, or
// the first attempt failed. Whatever it returns, the supervisor keeps
// (re)starting the server in the background until Stop, which must be
// called in every case.
func (s *Supervisor) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.started || s.stopping {
		s.mu.Unlock()
		return errors.New("jupyter: supervisor already started")
	}
	s.started = true
	s.mu.Unlock()

	if s.opts.URL != "" {
		close(s.done) // no supervision loop
		return s.attach(ctx)
	}
	if err := s.prepareOrAdoptDir(); err != nil {
		close(s.done)
		s.setStatus(func(st *ServerStatus) { st.Err, st.StartFailing = err, true })
		return err
	}
	s.mu.Lock()
	s.connDir = filepath.Join(s.runtimeDir, "runtime")
	s.mu.Unlock()
	go s.loop()
	select {
	case err := <-s.first:
		return err
	case <-ctx.Done():
		return fmt.Errorf("jupyter: wait for server: %w", ctx.Err())
	}
}

// clientOptions are the options of a client of the server: the connection
// files are known only for a server envd runs (not one it attached to).
func (s *Supervisor) clientOptions() ClientOptions {
	o := ClientOptions{Logger: s.log, DisableQuickAck: s.opts.DisableLatencyFixes, Clock: s.opts.Clock}
	if !s.opts.DisableLatencyFixes {
		s.mu.Lock()
		o.ConnectionDir = s.connDir
		s.mu.Unlock()
	}
	return o
}

// attach health-checks an existing server and publishes it as generation 1.
func (s *Supervisor) attach(ctx context.Context) error {
	c, err := NewClient(s.opts.URL, s.opts.Token, s.clientOptions())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.StartTimeout)
	defer cancel()
	for first := true; ; first = false {
		err = c.health(ctx)
		if err == nil {
			break
		}
		if first {
			// Say so at once, and let requests say why while it lasts.
			s.log.Warn("the Jupyter server given does not answer; retrying", "url", s.opts.URL, "error", err, "for", s.opts.StartTimeout)
			cause := fmt.Errorf("jupyter: server at %s does not answer: %w", s.opts.URL, err)
			s.setStatus(func(st *ServerStatus) { st.Err, st.StartFailing = cause, true })
		}
		select {
		case <-ctx.Done():
			c.Close()
			err = fmt.Errorf("jupyter: server at %s is not healthy: %w", s.opts.URL, err)
			s.setStatus(func(st *ServerStatus) { st.Err, st.StartFailing = err, true })
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
	c.stale = s.staleFunc(1)
	s.mu.Lock()
	s.client, s.token = c, s.opts.Token
	s.mu.Unlock()
	s.setStatus(func(st *ServerStatus) {
		*st = ServerStatus{State: ServerReady, Generation: 1, URL: c.URL()}
	})
	s.log.Info("using the Jupyter server given", "url", s.opts.URL)
	return nil
}

// Stop stops the server: SIGTERM (Jupyter then shuts its kernels down),
// SIGKILL after StopGrace or as soon as ctx is done, then SIGKILL for any
// process of the run still alive (orphaned kernels, their children). It
// returns once all are signalled and the server is reaped. An external
// server is left running.
func (s *Supervisor) Stop(ctx context.Context) error {
	s.mu.Lock()
	already, started := s.stopping, s.started
	s.stopping = true
	s.mu.Unlock()
	if already {
		select {
		case <-s.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.cancel()
	if started {
		select {
		case <-s.done:
		case <-ctx.Done():
			close(s.killNow)
			<-s.done // killing takes milliseconds
		}
	} else {
		close(s.done)
	}
	s.dropClient()
	return s.removeDir()
}

// dropClient closes and forgets the client of the server and its token,
// and says the server is stopped: no one reaches it through s any more
// (Stop, and Handover, which leaves it running for the next envd).
func (s *Supervisor) dropClient() {
	s.mu.Lock()
	c := s.client
	s.client, s.token = nil, ""
	s.mu.Unlock()
	if c != nil {
		c.Close()
	}
	s.setStatus(func(st *ServerStatus) { st.State, st.URL, st.PID = ServerStopped, "", 0 })
}

// Ready blocks until the server is healthy, ctx is done, or the supervisor
// is stopped (ErrStopped).
func (s *Supervisor) Ready(ctx context.Context) error {
	for {
		st := s.Status()
		switch st.State {
		case ServerReady:
			return nil
		case ServerStopped:
			return ErrStopped
		}
		select {
		case <-st.Changed:
		case <-ctx.Done():
			if st.Err != nil {
				return fmt.Errorf("jupyter: server not ready: %w (last error: %v)", ctx.Err(), st.Err)
			}
			return fmt.Errorf("jupyter: server not ready: %w", ctx.Err())
		}
	}
}

// Client waits until the server is ready and returns a client bound to the
// current generation. Do not Close it: the supervisor does, when the
// generation ends.
func (s *Supervisor) Client(ctx context.Context) (*Client, error) {
	for {
		if err := s.Ready(ctx); err != nil {
			return nil, err
		}
		s.mu.Lock()
		c := s.client
		s.mu.Unlock()
		if c != nil && c.staleErr() == nil {
			return c, nil
		}
	}
}

// Status returns the server's current state.
func (s *Supervisor) Status() ServerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.Changed = s.changed
	return st
}

// URL returns the ready server's base URL, or "" if it is not ready.
func (s *Supervisor) URL() string { return s.Status().URL }

// Token returns the ready server's token, or "" if it is not ready.
func (s *Supervisor) Token() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status.State != ServerReady {
		return ""
	}
	return s.token
}

func (s *Supervisor) setStatus(f func(*ServerStatus)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status.State == ServerStopped {
		return // final
	}
	f(&s.status)
	close(s.changed)
	s.changed = make(chan struct{})
}

// staleFunc tells a generation's client whether its server is still the
// live one.
func (s *Supervisor) staleFunc(gen uint64) func() error {
	return func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch {
		case s.status.State == ServerReady && s.status.Generation == gen:
			return nil
		case s.stopping || s.status.State == ServerStopped:
			return ErrStopped
		}
		return ErrServerRestarted
	}
}

func (s *Supervisor) reportFirst(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.firstSent {
		s.firstSent = true
		s.first <- err
	}
}

// loop runs the server until Stop, restarting it with backoff.
func (s *Supervisor) loop() {
	defer close(s.done)
	clock := s.opts.Clock
	retry := backoff.New(backoff.Policy{Floor: s.opts.MinBackoff, Cap: s.opts.MaxBackoff}, clock, "jupyter", "restart")
	for {
		began := clock.Now()
		err := s.runOnce()
		if s.ctx.Err() != nil {
			s.reportFirst(ErrStopped) // no-op unless stopped during the first start
			return
		}
		if clock.Since(began) >= stableRun {
			retry.Reset()
		}
		s.log.Warn("restarting jupyter server", "backoff", retry.Delay(), "error", err)
		s.setStatus(func(st *ServerStatus) {
			st.State, st.URL, st.PID, st.Err = ServerRestarting, "", 0, err
		})
		// After the status, so that Start's caller sees the error there too.
		s.reportFirst(err)
		if retry.Wait(s.ctx) != nil {
			return
		}
	}
}

// runOnce starts one server, waits for it to be healthy, publishes it, and
// returns when it exits or fails to start (with why) or when Stop is called
// (with nil).
func (s *Supervisor) runOnce() error {
	gen := s.Status().Generation
	err := s.runServer()
	// An error before the server was published (its generation counted)
	// is a failed start.
	if err != nil && s.ctx.Err() == nil && s.Status().Generation == gen {
		s.setStatus(func(st *ServerStatus) { st.StartFailing = true })
	}
	return err
}

// runServer is runOnce but for the status of a failed start.
func (s *Supervisor) runServer() error {
	s.setStatus(func(st *ServerStatus) { st.State, st.URL, st.PID = ServerStarting, "", 0 })
	if a := s.takeAdoption(); a != nil {
		began := time.Now()
		// Its port is envd's from the start (the ports monitor asks).
		s.setStatus(func(st *ServerStatus) { st.PID = a.PID })
		run, client, err := s.adoptRun(a)
		s.adoptDone(err)
		if err == nil {
			err = s.serve(run, client, a.URL, a.Token, began)
			client.Close()
			return err
		}
		s.setStatus(func(st *ServerStatus) { st.PID = 0 })
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	token := randomHex(24)
	if err := s.writeConfig(token); err != nil {
		return err
	}
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	client, err := NewClient(url, token, s.clientOptions())
	if err != nil {
		return err
	}
	defer client.Close()

	began := time.Now()
	run, err := s.spawn(port)
	if err != nil {
		return fmt.Errorf("jupyter: start server: %w", err)
	}
	s.setStatus(func(st *ServerStatus) { st.PID = run.pid })
	if err := s.waitHealthy(client, run); err != nil {
		s.stopRun(run, false)
		if s.ctx.Err() != nil {
			return nil
		}
		err = fmt.Errorf("jupyter: start server: %w", err)
		s.log.Warn("jupyter server failed to start", "error", err)
		s.logTail(run, tailLines)
		return err
	}
	return s.serve(run, client, url, token, began)
}

// serve publishes a healthy server run as the next generation and returns
// when it exits (with why) or when Stop or Handover is called (with nil).
func (s *Supervisor) serve(run *serverRun, client *Client, url, token string, began time.Time) error {
	s.mu.Lock()
	gen := s.status.Generation + 1
	s.live = run
	client.stale = s.staleFunc(gen) // before publishing: no one else has it yet
	s.client, s.token = client, token
	s.mu.Unlock()
	s.setStatus(func(st *ServerStatus) {
		*st = ServerStatus{State: ServerReady, Generation: gen, URL: url, PID: run.pid}
	})
	s.log.Info("jupyter server ready", "url", url, "pid", run.pid, "generation", gen,
		"startup_ms", time.Since(began).Milliseconds())
	s.reportFirst(nil)

	watchCtx, stopWatch := context.WithCancel(s.ctx)
	stuck := make(chan error, 1)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if s.opts.HangAfter > 0 {
			if err := s.watchHealth(watchCtx, client); err != nil {
				stuck <- err
			}
		}
	}()
	defer func() {
		stopWatch()
		<-watched
	}()
	select {
	case err := <-stuck:
		s.runEnded(err)
		s.killStuck(run, err)
		return err
	case <-run.exited:
		err := fmt.Errorf("jupyter server exited unexpectedly: %s", exitDesc(run.waitErr))
		s.runEnded(err)
		orphans := sweep(run.marker)
		s.finishOutput(run)
		s.log.Warn("jupyter server crashed", "error", err, "pid", run.pid, "orphans_killed", orphans)
		s.logTail(run, tailLines)
		return err
	case <-s.ctx.Done():
		if s.leaveRunning(run) {
			return nil
		}
		s.stopRun(run, true)
		return nil
	}
}

// runEnded unpublishes the live run, which exited or is stuck (err says
// which), and marks its generation dead before anything else is done
// about it, so that clients fail with ErrServerRestarted rather than with
// connection errors.
func (s *Supervisor) runEnded(err error) {
	s.mu.Lock()
	s.live = nil
	s.mu.Unlock()
	s.setStatus(func(st *ServerStatus) {
		st.State, st.URL, st.PID, st.Err = ServerRestarting, "", 0, err
	})
}

// startPoll is the pause between a starting server's health checks: a
// refused connection costs next to nothing, and every millisecond of the
// wait is envd's start to its first execution.
const startPoll = 5 * time.Millisecond

// waitHealthy polls the server until it answers, it exits, Stop is
// called, or StartTimeout passes.
func (s *Supervisor) waitHealthy(c *Client, run *serverRun) error {
	deadline := time.NewTimer(s.opts.StartTimeout)
	defer deadline.Stop()
	for {
		ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
		err := c.health(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-run.exited:
			return fmt.Errorf("server exited during startup: %s", exitDesc(run.waitErr))
		case <-s.ctx.Done():
			return ErrStopped
		case <-deadline.C:
			return fmt.Errorf("server not healthy after %s: %w", s.opts.StartTimeout, err)
		case <-time.After(startPoll):
		}
	}
}

// LogRecentOutput logs the last lines the live server and its kernels
// printed (a kernel's traceback as it failed to start, say), saying why.
// Nothing for an external server, or while none runs.
func (s *Supervisor) LogRecentOutput(why string) {
	s.mu.Lock()
	run := s.live
	s.mu.Unlock()
	if run == nil {
		return
	}
	s.log.Warn("the jupyter server's recent output follows", "pid", run.pid, "why", why)
	s.logTail(run, tailLines)
}

// LogOutputSince logs what the live server and its kernels printed from
// the first retained line that holds mark (a kernel's id: from the
// server's word of its start, with what the kernel printed since), at most
// sinceLines lines, saying why; or the last lines, as LogRecentOutput
// does, if no retained line holds it. Nothing for an external server, or
// while none runs.
func (s *Supervisor) LogOutputSince(mark, why string) {
	s.mu.Lock()
	run := s.live
	s.mu.Unlock()
	if run == nil {
		return
	}
	lines := run.out.LinesFrom(mark, sinceLines)
	if lines == nil {
		lines = run.out.Lines(tailLines)
	}
	s.log.Warn("the jupyter server's recent output follows", "pid", run.pid, "why", why, "from", mark)
	s.logLines(run, lines)
}

// RecentOutput returns the last n lines the live server and its kernels
// printed, oldest first: nil for an external server, or while none runs.
func (s *Supervisor) RecentOutput(n int) []string {
	s.mu.Lock()
	run := s.live
	s.mu.Unlock()
	if run == nil {
		return nil
	}
	return run.out.Lines(n)
}

// tailLines is how many of its last output lines are logged when a server
// fails or crashes; sinceLines bounds LogOutputSince's.
const (
	tailLines  = 20
	sinceLines = 100
)

// logTail logs the last n lines the server (and its kernels) printed.
func (s *Supervisor) logTail(run *serverRun, n int) {
	s.logLines(run, run.out.Lines(n))
}

// logLines logs lines of the server's output, one record a line: read as
// they were printed, not one attribute full of escaped line breaks.
func (s *Supervisor) logLines(run *serverRun, lines []string) {
	for i, line := range lines {
		s.log.Warn("jupyter server output", "pid", run.pid, "line", fmt.Sprintf("%d/%d", i+1, len(lines)), "text", line)
	}
}

// Zygote says which kernels a zygote forks and what it preloads.
type Zygote struct {
	// Kernels are kernelspec names whose command is [PYTHON, one-word
	// options (-P...), -m, ipykernel_launcher, args...]; a launch of
	// another command is started as usual.
	Kernels []string
	// Preload are modules the zygote imports beyond the kernel's own,
	// for users' first imports (numpy, pandas, matplotlib.pyplot).
	Preload []string
}

// DefaultZygote forks Python kernels from a zygote with the data stack
// users import first.
func DefaultZygote() *Zygote {
	return &Zygote{Kernels: []string{"python3"}, Preload: []string{"numpy", "pandas", "matplotlib.pyplot"}}
}
