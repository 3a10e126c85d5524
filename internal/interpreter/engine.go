package interpreter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/backoff"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/jupyter/startup"
)

// Options configures an Engine. Every zero value is a usable default except
// Supervisor, which is required.
type Options struct {
	// Supervisor runs the Jupyter server the kernels live in. The engine
	// neither starts nor stops it.
	Supervisor *jupyter.Supervisor
	// RunAs is the account the kernels run as: working directories are
	// checked with its permissions and relative ones resolved against its
	// home. Zero (nil): envd's own account.
	RunAs *identity.User
	// DefaultCwd returns the working directory of contexts created without
	// one, language defaults included. Zero, or "": RunAs's home.
	DefaultCwd func() string
	// GlobalEnv returns the sandbox-wide environment variables (what
	// upstream's /envs returns). They are set in every kernel before its
	// first execution, again after a restart and when they change. Zero:
	// none.
	GlobalEnv func() map[string]string
	// Logger receives the engine's logs. Zero: slog.Default().
	Logger *slog.Logger
	// LogBytes is the capacity of each execution's event log. Zero: 4 MiB.
	LogBytes int
	// ReaderGrace is how long an execution waits for a following Reader that
	// reads nothing before it leaves it behind (its next Read reports the
	// loss). Zero: 2 s.
	ReaderGrace time.Duration
	// InterruptGrace is how long interrupted code may take to stop before
	// its kernel is restarted, as a last resort (Deno ignores interrupts; so
	// does Python code that catches KeyboardInterrupt). Zero: 5 s: a loaded
	// machine can take over a second to raise KeyboardInterrupt, and a
	// restart loses state.
	InterruptGrace time.Duration
	// InterruptResend is how long an interrupted kernel may stay silent
	// before the interrupt is sent again (ipykernel loses a SIGINT that
	// lands outside user code). Zero: 1 s.
	InterruptResend time.Duration
	// DrainGrace is how long Shutdown waits, once every execution's end is
	// published, for the readers following them to read it. Zero: 2 s.
	DrainGrace time.Duration
	// Clock drives the engine's timers (reader grace, interrupt grace and
	// resend, drain grace, timeouts, keeping finished executions, the
	// retries of the default context and of the pool, the waits for a
	// kernel asked to exit and for the server after a lost connection).
	// Zero: the real clock.
	Clock quartz.Clock
	// KeepFinished is how long a finished execution stays findable by id.
	// Zero: 1 min. At most maxFinished are kept.
	KeepFinished time.Duration
	// DenoFlush bounds how long a Deno execution that reported completion
	// waits for its flush, which collects the outputs Deno publishes after
	// idle (jupyter.KernelOptions.FlushAfterIdle; the flush takes one round
	// trip to the kernel). Zero: 5 s.
	DenoFlush time.Duration
	// SetupStall bounds the setup of a kernel just started for a context
	// (its first silent executions): one that has not answered by then is
	// deleted and another started, once. Seen on loaded machines: a Deno
	// kernel, up and connected, that never answered its setup. Zero: 25 s.
	SetupStall time.Duration
	// CreateTimeout bounds the creation of a language's default context,
	// which is not tied to the request that triggered it, and each start
	// of a prestarted kernel. Zero: 2 min.
	CreateTimeout time.Duration
	// WarmKernels is how many prestarted kernels to keep ready per
	// language, so that a new context (or a language default's first use)
	// takes one instead of waiting for a kernel start; they are refilled
	// in the background once the default Python context exists (Start).
	// It must be valid (WarmKernels.Validate; New panics otherwise). Each
	// costs an idle kernel's memory (a Python one about 70 MB). Zero
	// (nil): none; envd's default is DefaultWarmKernels.
	WarmKernels WarmKernels
	// OOMKills, if set, counts the kernels the OOM killer has killed so
	// far (the kernels' cgroup's oom_kill count): an execution whose
	// kernel died while the count grew says the sandbox ran out of memory.
	OOMKills func() uint64
}

// maxFinished bounds how many finished executions are kept for reattaching.
const maxFinished = 32

// ReadyWait is how long a request of either adapter waits by default for
// its context (Jupyter, a language's first kernel): under the 60 s the
// SDKs wait for response headers.
const ReadyWait = 50 * time.Second

// DisabledMessage is the adapters' answer to every request when envd runs
// without code execution.
const DisabledMessage = "code execution is off: envd was started with -no-jupyter"

// Engine runs code in contexts: each context is a kernel of one language
// with a working directory, whose state persists between executions. It
// survives kernel deaths (the context gets a restarted kernel) and Jupyter
// server restarts (the context gets a new kernel, same id and cwd).
//
// Use: New, Start, then Execute, CreateContext, ...; Close at shutdown.
type Engine struct {
	opts  Options
	sup   *jupyter.Supervisor
	log   *slog.Logger
	clock quartz.Clock

	ctx    context.Context // cancelled when Shutdown begins
	cancel context.CancelFunc
	ready  chan struct{} // closed once the default Python context first exists
	wg     sync.WaitGroup
	pool   *pool // nil without WarmKernels

	mu       sync.Mutex
	started  bool                  // guarded by mu
	closed   bool                  // guarded by mu
	contexts map[string]*Context   // by id; guarded by mu
	order    []*Context            // creation order; guarded by mu
	defaults map[string]*Context   // by language; guarded by mu
	creating map[string]*creation  // language default being created; guarded by mu
	execs    map[string]*Execution // by id; guarded by mu
	upgraded map[string]bool       // ids from the envd before a live upgrade (AdoptExecutions); guarded by mu
	finished []*Execution          // oldest first; guarded by mu
	lastErr  error                 // why the default context could not be created; guarded by mu

	upgrading atomic.Bool // Handover: executions end saying envd is being upgraded
	specs     specCache   // the last kernelspec listing, for context creations
}

// New returns an engine; nothing runs until Start.
func New(opts Options) *Engine {
	if opts.Supervisor == nil {
		panic("interpreter: Options.Supervisor is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.LogBytes <= 0 {
		opts.LogBytes = 4 << 20
	}
	if opts.ReaderGrace <= 0 {
		opts.ReaderGrace = 2 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = quartz.NewReal()
	}
	if opts.InterruptGrace <= 0 {
		opts.InterruptGrace = 5 * time.Second
	}
	if opts.InterruptResend <= 0 {
		opts.InterruptResend = time.Second
	}
	if opts.DrainGrace <= 0 {
		opts.DrainGrace = 2 * time.Second
	}
	if opts.KeepFinished <= 0 {
		opts.KeepFinished = time.Minute
	}
	if opts.SetupStall <= 0 {
		opts.SetupStall = 25 * time.Second
	}
	if opts.DenoFlush <= 0 {
		opts.DenoFlush = 5 * time.Second
	}
	if opts.CreateTimeout <= 0 {
		opts.CreateTimeout = 2 * time.Minute
	}
	if err := opts.WarmKernels.Validate(); err != nil {
		panic("interpreter: Options.WarmKernels: " + err.Error())
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Engine{
		opts:     opts,
		sup:      opts.Supervisor,
		log:      opts.Logger.With("component", "interpreter"),
		clock:    opts.Clock,
		ctx:      ctx,
		cancel:   cancel,
		ready:    make(chan struct{}),
		contexts: make(map[string]*Context),
		defaults: make(map[string]*Context),
		creating: make(map[string]*creation),
		execs:    make(map[string]*Execution),
	}
	e.pool = newPool(e, opts.WarmKernels.wanted())
	return e
}

// Start creates the default Python context in the background, as soon as
// the Jupyter server is up (retrying with backoff if that fails), then
// fills the pool of prestarted kernels (Options.WarmKernels), and watches
// for server restarts to give that context a fresh kernel at once. It
// returns immediately.
func (e *Engine) Start() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started || e.closed {
		return
	}
	e.started = true
	e.wg.Add(2)
	go e.bootstrap()
	go e.watch()
	e.reattachLocked()
}

// EarlyKernel names the kernel the Jupyter server may launch before it
// is up (jupyter.Options.EarlyKernel): the default Python context's, until
// that context exists; then none.
func (e *Engine) EarlyKernel() (name, dir string) {
	e.mu.Lock()
	made := e.defaults[Python] != nil
	e.mu.Unlock()
	if made {
		return "", ""
	}
	dir, err := e.resolveCwd("") // defaultDir's, without its warning: it will warn
	if errors.Is(err, ErrBadCwd) {
		dir, err = "/", nil
	}
	if err != nil {
		return "", ""
	}
	return builtinNamed(Python).kernel, dir
}

// Ready is closed once the default Python context has been created.
func (e *Engine) Ready() <-chan struct{} { return e.ready }

// serverFailing is ErrNotReady with the cause while the Jupyter server
// fails to start (or the one given does not answer): requests are answered
// at once with why, rather than after waiting for a server that is not
// coming. nil otherwise, including while a server starts for the first
// time or after a crash.
func (e *Engine) serverFailing() error {
	st := e.sup.Status()
	if st.State == jupyter.ServerReady || !st.StartFailing || st.Err == nil {
		return nil
	}
	return newErr(ErrNotReady, st.Err, "%s: the Jupyter server is not running: %v", ErrNotReady.Error(), st.Err)
}

// Health returns nil when code can run at once: the default Python context
// exists and the Jupyter server is up. Otherwise it says why not.
func (e *Engine) Health() error {
	if err := e.serverFailing(); err != nil {
		return err
	}
	select {
	case <-e.ready:
	default:
		e.mu.Lock()
		err := e.lastErr
		e.mu.Unlock()
		if err != nil {
			return newErr(ErrNotReady, err, "%s: starting the default Python context: %v", ErrNotReady.Error(), err)
		}
		return newErr(ErrNotReady, nil, "%s: the default Python context is starting", ErrNotReady.Error())
	}
	if st := e.sup.Status(); st.State != jupyter.ServerReady {
		return newErr(ErrNotReady, nil, "%s: the Jupyter server is %s", ErrNotReady.Error(), st.State)
	}
	return nil
}

// Close is Shutdown with no deadline but DrainGrace.
func (e *Engine) Close() { e.Shutdown(context.Background()) }

// Shutdown stops the engine, graceful then hard: every execution ends (with
// EndInterrupted, saying that envd is shutting down) and its end event is
// published; then the readers following the executions get up to
// DrainGrace (and never past ctx) to read it; then the kernel connections
// are closed. It waits for the engine's goroutines (a prestarted kernel's
// start in flight until ctx ends), deletes the prestarted kernels no
// context took, and does not delete the contexts' kernels: stopping the
// supervisor does. Calls after the first return at once.
func (e *Engine) Shutdown(ctx context.Context) { e.shutdown(ctx, nil) }

// shutdown is Shutdown; before, if set, is called with the contexts once
// every execution ended, before their connections are closed.
func (e *Engine) shutdown(ctx context.Context, before func([]*Context)) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	ctxs := append([]*Context(nil), e.order...)
	execs := make([]*Execution, 0, len(e.execs))
	for _, x := range e.execs {
		execs = append(execs, x)
	}
	e.mu.Unlock()
	e.cancel()
	if e.pool != nil {
		stop := context.AfterFunc(ctx, e.pool.hardCancel)
		defer stop()
		defer e.pool.hardCancel()
	}
	e.wg.Wait() // every execution's end is published
	e.drain(ctx, execs)
	e.pool.close()
	if before != nil {
		before(ctxs)
	}
	for _, c := range ctxs {
		c.closeKernel()
	}
}

// drain waits until no Reader follows any of execs (each read the end and
// was closed, or was left behind as too slow), at most DrainGrace or until
// ctx ends.
func (e *Engine) drain(ctx context.Context, execs []*Execution) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := e.clock.AfterFunc(e.opts.DrainGrace, cancel, "drain")
	defer timer.Stop()
	for _, x := range execs {
		if !x.drained(ctx) {
			e.log.Warn("shutting down with executions still being read", "grace", e.opts.DrainGrace)
			return
		}
	}
}

func (e *Engine) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

// bootstrapBackoff spaces bootstrap's attempts at the default Python
// context.
var bootstrapBackoff = backoff.Policy{Floor: time.Second, Cap: 30 * time.Second}

func (e *Engine) bootstrap() {
	defer e.wg.Done()
	retry := backoff.New(bootstrapBackoff, e.clock, "bootstrap")
	for {
		_, err := e.defaultContext(e.ctx, Python)
		if err == nil {
			e.listLazyDefault(JavaScript)
			close(e.ready)
			e.mu.Lock()
			e.lastErr = nil
			if e.pool != nil && !e.closed {
				e.wg.Add(1) // bootstrap holds one: Shutdown's Wait has not returned
				go e.pool.run()
			}
			e.mu.Unlock()
			return
		}
		if e.ctx.Err() != nil {
			return
		}
		e.mu.Lock()
		e.lastErr = err
		e.mu.Unlock()
		e.log.Warn("cannot create the default python context; retrying", "error", err, "backoff", retry.Delay())
		if retry.Wait(e.ctx) != nil {
			return
		}
	}
}

// listLazyDefault gives a language its default context without starting
// its kernel: the context is listed (with its id for good) and its kernel
// starts on its first use. E2B's server starts the JavaScript default at
// start; a Deno kernel costs about 200 MB, which only a sandbox that runs
// JavaScript should pay. Nothing happens if the language is not installed
// or already has a default.
func (e *Engine) listLazyDefault(lang string) {
	// The server is up (the Python default exists): listing its
	// kernelspecs is quick, and readiness waits for it.
	ctx, cancel := context.WithTimeout(e.ctx, min(e.opts.CreateTimeout, 30*time.Second))
	defer cancel()
	l, err := e.resolve(ctx, lang)
	if err != nil {
		e.log.Info("no default context for a language", "language", lang, "error", err)
		return
	}
	dir, err := e.defaultDir(l.name)
	if err != nil {
		e.log.Warn("no default context for a language", "language", lang, "error", err)
		return
	}
	c := &Context{ID: newID(), Language: l.name, Cwd: dir, kernelName: l.kernel, code: codeLanguage(l.code), eng: e}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.defaults[l.name] != nil || e.creating[l.name] != nil {
		return
	}
	e.contexts[c.ID] = c
	e.order = append(e.order, c)
	e.defaults[l.name] = c
	e.log.Info("default context listed; its kernel starts on first use", "context_id", c.ID, "language", c.Language,
		"kernel", c.kernelName, "cwd", dir)
}

// watch gives the default Python context a new kernel as soon as a new
// Jupyter server generation is up, so that the first run after a server
// crash pays no kernel start. Other contexts get theirs on next use.
func (e *Engine) watch() {
	defer e.wg.Done()
	st := e.sup.Status()
	gen := st.Generation
	for {
		select {
		case <-st.Changed:
		case <-e.ctx.Done():
			return
		}
		st = e.sup.Status()
		e.pool.poke() // its kernels may be gone with the server
		switch {
		case st.State == jupyter.ServerStopped:
			return
		case st.State == jupyter.ServerReady && st.Generation != gen:
			gen = st.Generation
			e.mu.Lock()
			c := e.defaults[Python]
			e.mu.Unlock()
			if c != nil {
				c.revive()
			}
		}
	}
}

// ContextInfo describes a context.
type ContextInfo struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// Contexts lists the live contexts in creation order.
func (e *Engine) Contexts() []ContextInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]ContextInfo, 0, len(e.order))
	for _, c := range e.order {
		out = append(out, c.Info())
	}
	return out
}

// Context returns the context with the given id. "default" is accepted as
// an alias of the default Python context, as E2B's server does.
func (e *Engine) Context(id string) (*Context, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.contexts[id]
	if c == nil && id == "default" {
		c = e.defaults[Python]
	}
	if c == nil {
		return nil, notFound(id)
	}
	return c, nil
}

func notFound(id string) error {
	return newErr(ErrContextNotFound, nil, "context %q not found", id)
}

// CreateContext starts a kernel for language in cwd (empty: DefaultCwd) and
// returns the new context. It is not a language default. The language is
// one of Languages, by name or alias. The request is checked before any
// kernel starts. It fails with ErrUnsupportedLanguage, ErrBadCwd,
// ErrNotReady (naming the phase of the creation it was in) when ctx ends
// first, ErrClosed, or a Jupyter error.
func (e *Engine) CreateContext(ctx context.Context, language, cwd string) (*Context, error) {
	lang := NormalizeLanguage(language)
	dir, err := e.resolveCwd(cwd)
	if err != nil {
		return nil, err
	}
	if err := e.serverFailing(); err != nil {
		return nil, err
	}
	cr := e.newCreation(lang)
	c, err := e.createContext(ctx, cr, lang, dir, false)
	cr.finish(err)
	if err != nil && ctx.Err() != nil && !errors.Is(err, ErrClosed) {
		return nil, cr.notReady(ctx.Err())
	}
	return c, err
}

// languages lists what the installed kernelspecs run, as the Jupyter
// server lists them now (it reads its kernelspec directories on every
// listing, so kernelspecs added or removed since envd started count). It
// waits for the server until ctx ends.
func (e *Engine) languages(ctx context.Context) ([]language, error) {
	client, err := e.sup.Client(ctx)
	if err != nil {
		if errors.Is(err, jupyter.ErrStopped) {
			return nil, errClosed
		}
		return nil, newErr(ErrNotReady, err, "%s: waiting for the Jupyter server to list the installed kernels: %v",
			ErrNotReady.Error(), err)
	}
	list, err := e.listLanguages(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("list kernelspecs: %w", err)
	}
	return list, nil
}

// resolve finds a language (normalized) by name or alias among what the
// installed kernelspecs run, or says which ones they run.
func (e *Engine) resolve(ctx context.Context, lang string) (language, error) {
	list, err := e.languages(ctx)
	if err != nil {
		return language{}, err
	}
	l, ok := lookup(list, lang)
	if !ok {
		return language{}, unsupported(lang, list)
	}
	return l, nil
}

// LanguageInfo describes a language the sandbox can run: the kernelspec
// that runs it and its default context.
type LanguageInfo struct {
	// Language is its name as contexts report it: envd's name (python,
	// javascript, typescript, r, bash), else the kernelspec's language
	// field, else the kernelspec's name.
	Language string `json:"language"`
	// KernelName is the Jupyter kernelspec that runs it.
	KernelName string `json:"kernel_name"`
	// DisplayName is the kernelspec's display name.
	DisplayName string `json:"display_name"`
	// Aliases are other names that select it (never nil).
	Aliases []string `json:"aliases"`
	// DefaultContextID is the id of its default context, the one a run
	// with this language and no context uses; "" until it has one.
	DefaultContextID string `json:"default_context_id"`
	// DefaultContextRunning is whether that context has a kernel now (the
	// JavaScript default is listed from the start; its kernel starts on
	// first use).
	DefaultContextRunning bool `json:"default_context_running"`
	// WarmKernels counts its prestarted kernels ready now, for the next
	// contexts (see Options.WarmKernels).
	WarmKernels int `json:"warm_kernels"`
}

// Languages lists the languages the installed kernelspecs run, envd's
// own first (python, javascript, typescript, r, bash, when installed),
// then the others by name. It waits for the Jupyter server until ctx
// ends (ErrNotReady).
func (e *Engine) Languages(ctx context.Context) ([]LanguageInfo, error) {
	if err := e.serverFailing(); err != nil {
		return nil, err
	}
	list, err := e.languages(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]LanguageInfo, len(list))
	for i, l := range list {
		out[i] = LanguageInfo{Language: l.name, KernelName: l.kernel, DisplayName: l.displayName, Aliases: l.aliases,
			WarmKernels: e.pool.ready(l.name)}
		if out[i].Aliases == nil {
			out[i].Aliases = []string{}
		}
		e.mu.Lock()
		d := e.defaults[l.name]
		e.mu.Unlock()
		if d != nil {
			out[i].DefaultContextID = d.ID
			out[i].DefaultContextRunning = d.running()
		}
	}
	return out, nil
}

// defaultContext returns the language's default context, creating it if
// needed (one creation at a time per language; the creation is not tied
// to ctx, only the wait is: when ctx ends first, the error names the phase
// the creation is in).
func (e *Engine) defaultContext(ctx context.Context, lang string) (*Context, error) {
	for {
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			return nil, errClosed
		}
		if c := e.defaults[lang]; c != nil {
			e.mu.Unlock()
			return c, nil
		}
		if cr := e.creating[lang]; cr != nil {
			e.mu.Unlock()
			select {
			case <-cr.done:
				continue
			case <-ctx.Done():
				return nil, cr.notReady(ctx.Err())
			}
		}
		cr := e.newCreation(lang)
		e.creating[lang] = cr
		e.wg.Add(1)
		e.mu.Unlock()

		type result struct {
			c   *Context
			err error
		}
		res := make(chan result, 1)
		go func() {
			defer e.wg.Done()
			cctx, cancel := context.WithTimeout(e.ctx, e.opts.CreateTimeout)
			defer cancel()
			var c *Context
			dir, err := e.defaultDir(lang)
			if err == nil {
				c, err = e.createContext(cctx, cr, lang, dir, true)
			}
			switch {
			case err == nil:
			case e.ctx.Err() != nil:
				err = errClosed
			case cctx.Err() != nil:
				err = fmt.Errorf("gave up after %s: %w", e.opts.CreateTimeout, cr.notReady(cctx.Err()))
			}
			cr.finish(err)
			e.mu.Lock()
			delete(e.creating, lang)
			e.mu.Unlock()
			close(cr.done)
			res <- result{c, err}
		}()
		select {
		case r := <-res:
			return r.c, r.err
		case <-ctx.Done():
			return nil, cr.notReady(ctx.Err())
		}
	}
}

// defaultDir returns the working directory of a language default:
// DefaultCwd, or "/" when that is unusable (a default context must come up
// whatever the default directory's state).
func (e *Engine) defaultDir(lang string) (string, error) {
	dir, err := e.resolveCwd("")
	if errors.Is(err, ErrBadCwd) {
		e.log.Warn("default working directory unusable; using /", "language", lang, "error", err)
		return "/", nil
	}
	return dir, err
}

// createContext starts a context's kernel in dir (checked), going through
// cr's phases.
func (e *Engine) createContext(ctx context.Context, cr *creation, lang, dir string, asDefault bool) (*Context, error) {
	if e.isClosed() {
		return nil, errClosed
	}
	cr.enter(phaseServer)
	client, err := e.sup.Client(ctx)
	if err != nil {
		if errors.Is(err, jupyter.ErrStopped) {
			return nil, errClosed
		}
		return nil, cr.notReady(err)
	}
	cr.enter(phaseSpecs)
	l, err := e.findLanguage(ctx, client, lang)
	if err != nil {
		return nil, err
	}
	c := &Context{
		Language:   l.name,
		Cwd:        dir,
		kernelName: l.kernel,
		code:       codeLanguage(l.code),
		eng:        e,
	}
	ks, err := c.startKernel(ctx, client, cr)
	if err != nil {
		return nil, err
	}
	c.ID = ks.id
	c.ks = ks

	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		c.closeKernel()
		return nil, errClosed
	}
	e.contexts[c.ID] = c
	e.order = append(e.order, c)
	if asDefault {
		e.defaults[c.Language] = c
	}
	e.mu.Unlock()
	e.log.Info("context created", "context_id", c.ID, "language", c.Language, "kernel", c.kernelName, "cwd", dir, "default", asDefault,
		"prestarted", ks.warm, "duration", e.clock.Since(cr.began))
	return c, nil
}

// forget drops a removed context from the registry.
func (e *Engine) forget(c *Context) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.contexts, c.ID)
	for i, o := range e.order {
		if o == c {
			e.order = append(e.order[:i:i], e.order[i+1:]...)
			break
		}
	}
	for lang, d := range e.defaults {
		if d == c {
			delete(e.defaults, lang)
		}
	}
}

// RemoveContext shuts the context's kernel down and forgets the context.
// Code running in it ends with an error. Removing a language's default
// makes the next run in that language create a new default.
func (e *Engine) RemoveContext(ctx context.Context, id string) error {
	c, err := e.Context(id)
	if err != nil {
		return err
	}
	return c.remove(ctx)
}

// RestartContext restarts the context's kernel: same id, same cwd, fresh
// state. Code running in it ends with a ContextRestarting error.
func (e *Engine) RestartContext(ctx context.Context, id string) (ContextInfo, error) {
	c, err := e.Context(id)
	if err != nil {
		return ContextInfo{}, err
	}
	return c.Info(), c.restart(ctx)
}

// ExecuteRequest is one run of code.
type ExecuteRequest struct {
	Code string
	// ContextID and Language select the context; at most one may be set.
	// Neither: the default Python context. Language: that language's
	// default context, created on first use.
	ContextID string
	Language  string
	// Env is set in the kernel for this execution only, then restored.
	Env map[string]string
	// Timeout stops the execution (interrupt, then restart if it does not
	// stop) once it passed, counted from Execute. Zero: none.
	Timeout time.Duration
}

// Execute queues code on its context and returns at once with the
// execution and a Reader that follows its events from the first one (see
// EventStarted). The execution's lifetime is the engine's, not ctx's: ctx
// only bounds finding or creating the context. Close the Reader when done
// with it. The request is checked before any kernel starts.
//
// Errors: ErrContextAndLanguage, ErrContextNotFound,
// ErrUnsupportedLanguage, ErrBadEnv, ErrNotReady (naming the phase of the
// context's creation when ctx ended first), ErrClosed, or the failure to
// create a language's default context.
func (e *Engine) Execute(ctx context.Context, req ExecuteRequest) (*Execution, *Reader, error) {
	if e.isClosed() {
		return nil, nil, errClosed
	}
	if err := e.serverFailing(); err != nil {
		return nil, nil, err
	}
	var c *Context
	var err error
	lang := NormalizeLanguage(req.Language)
	code := lang // the language of the env code
	switch {
	case req.ContextID != "" && req.Language != "":
		return nil, nil, newErr(ErrContextAndLanguage, nil, "%s", ErrContextAndLanguage.Error())
	case req.ContextID != "":
		if c, err = e.Context(req.ContextID); err != nil {
			return nil, nil, err
		}
	default:
		c = e.languageDefault(lang)
		if c == nil && builtinNamed(lang) == nil {
			// Another kernelspec's name or language: which one, and the
			// name its default goes by, only the Jupyter server knows.
			l, err := e.resolve(ctx, lang)
			if err != nil {
				return nil, nil, err
			}
			lang, code = l.name, codeLanguage(l.code)
			c = e.languageDefault(lang)
		}
	}
	if c != nil {
		lang, code = c.Language, c.code
	}
	setEnv, err := envCode(lang, code, req.Env)
	if err != nil {
		return nil, nil, err
	}
	if c == nil {
		if c, err = e.defaultContext(ctx, lang); err != nil {
			return nil, nil, err
		}
	}
	x := newExecution(e, c, req, setEnv)
	r := x.Follow()
	ticket := c.queue.Enqueue()

	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		c.queue.Cancel(ticket)
		r.Close()
		return nil, nil, errClosed
	}
	e.execs[x.ID] = x
	e.wg.Add(1)
	e.mu.Unlock()
	go x.run(ticket)
	return x, r, nil
}

// languageDefault returns the language's default context, if it has one.
func (e *Engine) languageDefault(lang string) *Context {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.defaults[lang]
}

// envCode is the silent code that sets a per-execution env in a context
// of lang whose env code is in code ("" for none), or an ErrBadEnv error.
func envCode(lang, code string, env map[string]string) (string, error) {
	if len(env) == 0 {
		return "", nil
	}
	if code == "" {
		return "", newErr(ErrBadEnv, nil, "%s: envd cannot set env vars per execution in %s (it knows no way to in that kernel's language)",
			ErrBadEnv.Error(), lang)
	}
	vars := make(map[string]*string, len(env))
	for k, v := range env {
		vars[k] = &v
	}
	set, err := startup.SetEnvCode(code, vars)
	if err != nil {
		return "", newErr(ErrBadEnv, err, "%s: %v", ErrBadEnv.Error(), err)
	}
	return set, nil
}

// Interrupt interrupts the execution running on a context, if any (see
// Execution.Interrupt); queued executions are left alone. It reports
// whether one was running.
func (e *Engine) Interrupt(contextID string) (bool, error) {
	c, err := e.Context(contextID)
	if err != nil {
		return false, err
	}
	// An execution that has sent its end may still be restoring env vars:
	// the context counts as idle, and the restore is not interrupted.
	x := c.Current()
	if x == nil || x.End() != nil {
		return false, nil
	}
	x.Interrupt()
	return true, nil
}

// Execution returns a running or recently finished execution by id, or an
// ErrExecutionNotFound error.
func (e *Engine) Execution(id string) (*Execution, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.execs[id]
	if !ok && e.upgraded[id] {
		return nil, newErr(ErrExecutionNotFound, nil, "execution %q is gone: envd was upgraded while it ran or after it ended, "+
			"and its output is not kept across an upgrade (its context kept its state: run the code again, or read what it stored)", id)
	}
	if !ok {
		return nil, newErr(ErrExecutionNotFound, nil, "execution %q not found: it never existed, or it ended too long ago "+
			"(envd keeps the last %d finished executions for %s)", id, maxFinished, e.opts.KeepFinished)
	}
	return x, nil
}

// finished records that x ended: it stays findable for KeepFinished, and
// at most maxFinished are kept.
func (e *Engine) executionFinished(x *Execution) {
	e.mu.Lock()
	e.finished = append(e.finished, x)
	for len(e.finished) > maxFinished {
		delete(e.execs, e.finished[0].ID)
		e.finished[0] = nil
		e.finished = e.finished[1:]
	}
	e.mu.Unlock()
	e.clock.AfterFunc(e.opts.KeepFinished, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		for i, f := range e.finished {
			if f == x {
				delete(e.execs, x.ID)
				// Delete zeroes the slot it frees: the forgotten
				// execution (and its output) must not stay reachable
				// through the backing array.
				e.finished = slices.Delete(e.finished, i, i+1)
				return
			}
		}
	}, "keep")
}

// globalEnv returns the sandbox-wide env vars now.
func (e *Engine) globalEnv() map[string]string {
	if e.opts.GlobalEnv == nil {
		return nil
	}
	return maps.Clone(e.opts.GlobalEnv())
}

// runAs returns the kernels' account.
func (e *Engine) runAs() (*identity.User, error) {
	if e.opts.RunAs != nil {
		return e.opts.RunAs, nil
	}
	return identity.Current()
}

// resolveCwd makes cwd absolute (relative to the kernels' user's home;
// empty means DefaultCwd) and checks, with that user's permissions, that it
// is a directory they can enter.
func (e *Engine) resolveCwd(cwd string) (string, error) {
	u, err := e.runAs()
	if err != nil {
		return "", err
	}
	def := ""
	if e.opts.DefaultCwd != nil {
		def = e.opts.DefaultCwd()
	}
	dir, err := u.Resolve(cwd, def)
	if err != nil {
		return "", badCwd(err, "%v", err)
	}
	err = u.Do(func() error {
		fi, err := os.Stat(dir)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return badCwd(err, "%s does not exist", dir)
		case errors.Is(err, os.ErrPermission):
			return badCwd(err, "%s is not accessible to user %q", dir, u.Name)
		case err != nil:
			return badCwd(err, "%v", err)
		case !fi.IsDir():
			return badCwd(nil, "%s is not a directory", dir)
		}
		// Resolving "dir/." needs search permission on dir itself, which
		// is what a chdir needs.
		if _, err := os.Stat(dir + "/."); err != nil {
			return badCwd(err, "user %q cannot enter %s", u.Name, dir)
		}
		return nil
	})
	return dir, err
}

func badCwd(cause error, format string, args ...any) error {
	return newErr(ErrBadCwd, cause, "%s: %s", ErrBadCwd.Error(), fmt.Sprintf(format, args...))
}

// oomKills is Options.OOMKills' count, 0 without it.
func (e *Engine) oomKills() uint64 {
	if e.opts.OOMKills == nil {
		return 0
	}
	return e.opts.OOMKills()
}
