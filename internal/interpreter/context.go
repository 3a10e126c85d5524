package interpreter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/envd-dev/envd/internal/interpreter/fifo"
	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/jupyter/startup"
)

// Context is a kernel of one language with a working directory; variables
// and imports persist between its executions, which run one at a time in
// the order they were submitted.
//
// Its id is the id of its first kernel (a random one for a default listed
// before its kernel starts: see Engine.listLazyDefault) and never changes:
// when the kernel is lost for good (Jupyter server restarted, kernel
// removed after too many deaths) the context gets a new kernel on its next
// use, with fresh state and the same cwd.
type Context struct {
	ID       string // immutable after creation
	Language string // normalized
	Cwd      string // absolute

	kernelName string
	// code is the language of the setup and env code envd runs in its
	// kernels ("python" for a second Python kernelspec); "": none exists
	// (a kernelspec of a language envd has no code for: the kernel starts
	// in Cwd, and per-execution env vars are refused).
	code  string
	eng   *Engine
	queue fifo.Queue

	mu       sync.Mutex
	ks       *kernelState // guarded by mu; nil: the next use starts a new kernel
	removed  bool         // guarded by mu
	removing bool         // guarded by mu; a removal is deleting the kernel
	restarts int          // REST restarts asked for; guarded by mu
	current  *Execution   // the one holding the queue; guarded by mu
	notices  []Notice     // for the next execution; guarded by mu
	// handed is the kernel a live upgrade handed over, to reconnect to
	// at the next use (reattach); guarded by mu.
	handed *ContextState
}

// maxNotices bounds a context's pending notices: the oldest go first.
const maxNotices = 8

// kernelState is one kernel of a context and what was set up in it.
type kernelState struct {
	client *jupyter.Client // bound to the server generation the kernel lives in
	kernel *jupyter.Kernel
	id     string // Jupyter kernel id

	// Only touched by the holder of the context's queue.
	setupRestarts int               // kernel.Status().Restarts when set up; -1: never
	globalEnv     map[string]string // sandbox-wide vars set in this incarnation
	// userRestarts is the context's restartCount when last set up: a
	// restart since then that the user asked for needs no notice.
	userRestarts int
	// lossReported: an execution was told that this kernel lost its state
	// (it died under the code, the code exited it, it was restarted as a
	// last resort, or its server went away), so the next one needs no
	// notice.
	lossReported bool
	// oomSeen is the kernels' OOM-kill count (Options.OOMKills) when the
	// last execution ended, or the kernel was set up: a death found later
	// is put down to the OOM killer only if the count went up since.
	oomSeen uint64
	// warm: the kernel came from the pool of prestarted kernels.
	warm bool
	// baseline: the globals a JavaScript kernel completed right after its
	// setup (its builtins), which are not the user's variables.
	baseline map[string]bool
}

// usable reports whether the kernel can still run code; when false the
// context needs a new kernel.
func (ks *kernelState) usable() bool {
	return ks.client.Err() == nil && ks.kernel.Status().Err == nil
}

var errRemoved = errors.New("the context was removed")

// Info describes the context.
func (c *Context) Info() ContextInfo {
	return ContextInfo{ID: c.ID, Language: c.Language, Cwd: c.Cwd}
}

// kernelOptions are the connection options of a kernel of kernelspec
// kernel.
func (e *Engine) kernelOptions(kernel string) jupyter.KernelOptions {
	o := jupyter.KernelOptions{
		Logger: e.log,
		// The runner that takes the kernel's messages may itself wait up to
		// ReaderGrace for a slow follower of the execution's log (pacing):
		// the kernel's queue must wait longer than that before it drops
		// output, or a reader that keeps up loses some on a loaded machine.
		ReaderGrace: 2*e.opts.ReaderGrace + time.Second,
	}
	if kernel == "deno" {
		o.FlushAfterIdle = e.opts.DenoFlush
	}
	// ipykernel's executions skip the server (jupyter.KernelOptions.Direct).
	o.Direct = kernel == "python3"
	return o
}

// startKernel gives the context a kernel, set up (cwd, sandbox-wide env):
// a prestarted one when the pool has one, else one it starts in the
// context's cwd and connects to. It goes through cr's phases (cr may be
// nil). On failure nothing is left running.
func (c *Context) startKernel(ctx context.Context, client *jupyter.Client, cr *creation) (*kernelState, error) {
	for {
		w := c.eng.pool.take(c.Language, c.kernelName, client)
		if w == nil {
			break
		}
		cr.enter(phaseHandover)
		ks := &kernelState{client: client, kernel: w.k, id: w.id, setupRestarts: -1, userRestarts: c.restartCount(), warm: true,
			oomSeen: c.eng.oomKills()}
		if ps := w.preset; ps != nil {
			// Set up ahead: for this directory, setup sends only what
			// changed since (usually nothing); for another, it sets the
			// kernel up afresh, unsetting what it was given and is gone.
			ks.globalEnv = ps.env
			if ps.cwd == c.Cwd {
				ks.setupRestarts, ks.baseline = ps.restarts, ps.baseline
			}
		}
		cr.started(w.id)
		cr.enter(phaseSetup)
		err := c.setup(ctx, ks)
		if err == nil {
			return ks, nil
		}
		c.eng.pool.delete(w)
		if ctx.Err() != nil {
			return nil, err
		}
		c.eng.log.Warn("prestarted kernel failed its setup; trying another", "language", c.Language, "kernel_id", w.id, "error", err)
	}
	for attempt := 1; ; attempt++ {
		ks, err := c.startNew(ctx, client, cr, attempt == 1)
		if !errors.Is(err, errSetupStalled) {
			return ks, err
		}
		c.eng.log.Warn("a new kernel did not answer its setup; starting another", "language", c.Language,
			"kernel", c.kernelName, "stall", c.eng.opts.SetupStall)
	}
}

// errSetupStalled: a new kernel did not answer its setup within
// Options.SetupStall.
var errSetupStalled = errors.New("the new kernel did not answer its setup")

// startNew starts a kernel for the context, connects to it and sets it
// up. With stallable, a setup the kernel leaves unanswered for
// Options.SetupStall ends with errSetupStalled (the kernel deleted).
func (c *Context) startNew(ctx context.Context, client *jupyter.Client, cr *creation, stallable bool) (*kernelState, error) {
	cr.enter(phaseStart)
	// The server finishes a start it began whatever its client does: the
	// request is not tied to ctx, so that the kernel of a start the caller
	// gave up on is known, and deleted below, rather than left running.
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), c.eng.opts.CreateTimeout)
	m, err := client.StartKernel(sctx, c.kernelName, c.Cwd)
	scancel()
	if errors.Is(err, jupyter.ErrNoSuchKernelSpec) {
		c.eng.specs.drop()
		return nil, newErr(ErrUnsupportedLanguage, err, "language %q is not available any more: its kernelspec %q was removed",
			c.Language, c.kernelName)
	}
	if err != nil {
		return nil, c.eng.startError(c.Language, c.kernelName, err)
	}
	del := func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := client.DeleteKernel(dctx, m.ID); err != nil && !gone(err) {
			c.eng.log.Warn("cannot delete kernel after a failed start", "kernel_id", m.ID, "error", err)
		}
	}
	cr.started(m.ID)
	if err := ctx.Err(); err != nil {
		del()
		return nil, fmt.Errorf("start a %s kernel: %w", c.kernelName, err)
	}
	cr.enter(phaseConnect)
	k, err := client.Connect(ctx, m.ID, c.eng.kernelOptions(c.kernelName))
	if err != nil {
		del()
		return nil, fmt.Errorf("connect to %s kernel: %w", c.kernelName, err)
	}
	ks := &kernelState{client: client, kernel: k, id: m.ID, setupRestarts: -1, userRestarts: c.restartCount(),
		oomSeen: c.eng.oomKills()}
	cr.enter(phaseSetup)
	sctx, cancel := ctx, context.CancelFunc(func() {})
	if stallable {
		sctx, cancel = context.WithTimeoutCause(ctx, c.eng.opts.SetupStall, errSetupStalled)
	}
	err = c.setupNew(sctx, ks)
	cancel()
	if err != nil {
		stalled := ctx.Err() == nil && errors.Is(context.Cause(sctx), errSetupStalled)
		if stalled {
			// Before its deletion, whose lines would push out its own.
			c.eng.sup.LogOutputSince(m.ID, "a new "+c.Language+" kernel did not answer its setup: kernel "+m.ID)
		}
		_ = k.Close()
		del()
		if stalled {
			return nil, errSetupStalled
		}
		return nil, err
	}
	return ks, nil
}

// failingDeaths is how many times a new kernel may die before its context
// is set up: once is a start that failed (a loaded machine, a signal);
// more is a kernel that cannot start, which the server would restart for
// a minute before giving up on it.
const failingDeaths = 3

// setupNew is setup of a kernel just started, which fails as soon as the
// kernel has died failingDeaths times, saying what it printed.
func (c *Context) setupNew(ctx context.Context, ks *kernelState) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			st := ks.kernel.Status()
			if st.Restarts >= failingDeaths {
				cancel()
				return
			}
			select {
			case <-st.Changed:
			case <-sctx.Done():
				return
			}
		}
	}()
	err := c.setup(sctx, ks)
	cancel()
	<-watched
	if st := ks.kernel.Status(); err != nil && st.Restarts >= failingDeaths {
		return c.eng.failingError(c.Language, c.kernelName, st)
	}
	return err
}

// failingError is the error for a new kernel that keeps dying: how often,
// how it ended last, and the last lines its server's kernels printed
// that are not the server's own log (a traceback, usually).
func (e *Engine) failingError(lang, kernel string, st jupyter.KernelStatus) error {
	msg := fmt.Sprintf("the %s kernel (kernelspec %q) keeps dying as it starts: it died %d times", lang, kernel, st.Restarts)
	if st.Exit != nil {
		msg += " (last: " + st.Exit.String() + ")"
	}
	var out []string
	for _, line := range e.sup.RecentOutput(2 * tailLines) {
		if !serverLogLine.MatchString(line) {
			out = append(out, line)
		}
	}
	if len(out) > tailLines/2 {
		out = out[len(out)-tailLines/2:]
	}
	if len(out) > 0 {
		msg += "; its last output:\n" + strings.Join(out, "\n")
	}
	return errors.New(msg)
}

// tailLines bounds the kernel output failingError looks at.
const tailLines = 20

// serverLogLine matches a line of the Jupyter server's log, e.g.
// "[I 2026-12-06 08:53:32.750 ServerApp] Kernel started: ...".
var serverLogLine = regexp.MustCompile(`^\[[A-Z] \d{4}-\d\d-\d\d `)

// startError is the error for a kernel start the Jupyter server refused:
// the exception it answered with when there is one (the whole traceback
// is for the log, not for the user).
func (e *Engine) startError(lang, kernel string, err error) error {
	if reason := startFailure(err); reason != "" {
		e.log.Debug("kernel start failed", "kernel", kernel, "error", err)
		return fmt.Errorf("the %s kernel (kernelspec %q) failed to start: %s", lang, kernel, reason)
	}
	return fmt.Errorf("start a %s kernel (kernelspec %q): %w", lang, kernel, err)
}

// startFailure is the exception a Jupyter server answered a kernel start
// with (the last line of the traceback in its 500's body, e.g.
// "FileNotFoundError: [Errno 2] No such file or directory: '/opt/x/bin'"
// for a kernelspec whose program is missing), or "".
func startFailure(err error) string {
	var herr *jupyter.HTTPError
	if !errors.As(err, &herr) || herr.Status != 500 {
		return ""
	}
	var body struct {
		Message   string `json:"message"`
		Traceback string `json:"traceback"`
	}
	if json.Unmarshal([]byte(herr.Body), &body) != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(body.Traceback), "\n")
	if last := strings.TrimSpace(lines[len(lines)-1]); last != "" {
		return last
	}
	return body.Message
}

// gone reports whether err means the kernel no longer exists anyway.
func gone(err error) bool {
	return errors.Is(err, jupyter.ErrKernelNotFound) || errors.Is(err, jupyter.ErrServerRestarted) ||
		errors.Is(err, jupyter.ErrStopped) || errors.Is(err, jupyter.ErrKernelDied)
}

// setup brings a kernel incarnation up to date: after a (re)start it
// changes to the context's cwd and sets every sandbox-wide env var; later
// it only sets the vars that changed. One silent execution, or none.
// Requires the queue (or exclusive use of a new kernel).
func (c *Context) setup(ctx context.Context, ks *kernelState) error {
	if c.code == "" {
		return nil // Jupyter started the kernel in Cwd; envd has no code for it
	}
	for attempt := 0; ; attempt++ {
		st := ks.kernel.Status()
		restarts := st.Restarts
		fresh := restarts != ks.setupRestarts
		if fresh && ks.setupRestarts >= 0 {
			// The kernel restarted since it was set up: say so unless the
			// user asked for it or an execution was told.
			if user := c.restartCount(); user == ks.userRestarts && !ks.lossReported {
				oom := c.eng.opts.OOMKills != nil && c.eng.oomKills() > ks.oomSeen
				c.notice(NoticeKernelRestarted, "this context's "+c.Language+" kernel died since the last execution"+
					idleDeath(st.Exit, oom)+" and was restarted: its variables, imports and definitions from before are gone")
			}
			ks.lossReported = false
			ks.oomSeen = c.eng.oomKills()
		}
		ks.userRestarts = c.restartCount()
		env := c.eng.globalEnv()
		var lines []string
		chdir := ""
		if fresh {
			code, err := startup.ChdirCode(c.code, c.Cwd)
			if err != nil {
				return fmt.Errorf("set working directory: %w", err)
			}
			if ks.warm {
				// A prestarted kernel (and each restart of it) started in
				// warmDir: erase what it owes to that.
				moved, err := movedCode(c.code, c.Cwd)
				if err != nil {
					return fmt.Errorf("set working directory: %w", err)
				}
				code = moved + "\n" + code
			}
			chdir = code
			lines = append(lines, code)
		}
		changed := envDiff(ks.globalEnv, env, fresh)
		if len(changed) > 0 {
			code, err := startup.SetGlobalEnvCode(c.code, changed)
			if err != nil {
				// A name the language cannot hold (e.g. not a bash
				// identifier): leave that one out rather than fail every run.
				c.eng.log.Warn("cannot set sandbox env vars in kernel", "language", c.Language, "error", err)
				changed = settable(c.code, changed)
				code, _ = startup.SetGlobalEnvCode(c.code, changed)
			}
			if code != "" {
				lines = append(lines, code)
			}
		}
		if len(lines) == 0 {
			return nil
		}
		err := c.silent(ctx, ks, strings.Join(lines, "\n"))
		if err == nil && fresh && isJS(c.code) {
			// Before any user code: what it completes now is its own.
			if berr := c.jsBaseline(ctx, ks); berr != nil {
				err = fmt.Errorf("list the kernel's globals: %w", berr)
			}
		}
		if err == nil {
			ks.setupRestarts, ks.globalEnv = restarts, env
			return nil
		}
		// A kernel that died during setup comes back fresh: once more.
		if errors.Is(err, jupyter.ErrKernelRestarted) && attempt == 0 {
			continue
		}
		// The env helpers come with envd's startup files; a kernel of a
		// server started without them (-jupyter-url) still gets its cwd.
		var kerr *KernelError
		if errors.As(err, &kerr) && len(lines) > 1 && chdir != "" {
			if err := c.silent(ctx, ks, chdir); err == nil {
				c.eng.log.Warn("cannot set sandbox env vars in kernel; are envd's kernel startup files installed?",
					"language", c.Language, "error", kerr)
				ks.setupRestarts, ks.globalEnv = restarts, env
				return nil
			}
		}
		if fresh {
			return fmt.Errorf("set up kernel (working directory %s): %w", c.Cwd, err)
		}
		return fmt.Errorf("set sandbox env vars in kernel: %w", err)
	}
}

// envDiff returns what to set to go from old to now (nil values unset);
// everything in now if all. What old has and now lacks is unset even
// then: a prestarted kernel set up ahead (presetup) and handed over to
// another directory is set up afresh from what it was given.
func envDiff(old, now map[string]string, all bool) map[string]*string {
	out := make(map[string]*string)
	for k, v := range now {
		if ov, ok := old[k]; all || !ok || ov != v {
			out[k] = &v
		}
	}
	for k := range old {
		if _, ok := now[k]; !ok {
			out[k] = nil
		}
	}
	return out
}

// settable drops the vars the language's env code refuses, one at a time.
func settable(lang string, vars map[string]*string) map[string]*string {
	out := make(map[string]*string, len(vars))
	names := make([]string, 0, len(vars))
	for k := range vars {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if _, err := startup.SetGlobalEnvCode(lang, map[string]*string{k: vars[k]}); err == nil {
			out[k] = vars[k]
		}
	}
	return out
}

// KernelError is an error raised by internal code envd ran in a kernel.
type KernelError struct {
	Name, Value string
}

func (e *KernelError) Error() string {
	if e.Value == "" {
		return e.Name
	}
	return e.Name + ": " + e.Value
}

// silent runs internal code silently and reports whether it raised.
func (c *Context) silent(ctx context.Context, ks *kernelState, code string) error {
	return c.silentOutput(ctx, ks, code, jupyter.ExecuteOptions{Silent: true}, nil)
}

// maxSilentOutput bounds what silentOutput collects.
const maxSilentOutput = 64 << 10

// silentOutput is silent with opts, collecting what the code prints on
// stdout into out (if non-nil, at most maxSilentOutput bytes).
func (c *Context) silentOutput(ctx context.Context, ks *kernelState, code string, opts jupyter.ExecuteOptions, out *strings.Builder) error {
	x, err := ks.kernel.Execute(ctx, code, opts)
	if err != nil {
		return err
	}
	var kerr error
	for {
		m, err := x.Next(ctx)
		if errors.Is(err, io.EOF) {
			return kerr
		}
		if err != nil {
			return err
		}
		if m.Type() == "stream" && out != nil {
			var s jupyter.StreamContent
			if m.DecodeContent(&s) == nil && s.Name == "stdout" && out.Len()+len(s.Text) <= maxSilentOutput {
				out.WriteString(s.Text)
			}
		}
		switch m.Type() {
		case "error":
			var ec jupyter.ErrorContent
			if kerr == nil && m.DecodeContent(&ec) == nil {
				kerr = &KernelError{Name: ec.EName, Value: ec.EValue}
			}
		case "execute_reply":
			var rep jupyter.ExecuteReplyContent
			if m.DecodeContent(&rep) == nil && rep.Status != "ok" && kerr == nil {
				kerr = &KernelError{Name: rep.EName, Value: rep.EValue}
				if rep.EName == "" {
					kerr = &KernelError{Name: "Error", Value: "status " + rep.Status}
				}
			}
		case "stream":
			// bash reports a failed cd on stderr with a non-ok reply;
			// nothing else of internal code is shown.
		}
	}
}

// silentAnswers is how many times silentAnswer runs its query when the
// answer is not in the output.
const silentAnswers = 3

// silentAnswer runs code silently and returns the rest of the line after
// the last marker it printed. Deno publishes some outputs after its idle,
// on a loaded machine even after the flush (KernelOptions.FlushAfterIdle)
// has given up on them: a query whose answer did not come is run again
// (queries have no side effects), up to silentAnswers times.
func (c *Context) silentAnswer(ctx context.Context, ks *kernelState, code, marker, what string) (string, error) {
	for try := 1; ; try++ {
		var out strings.Builder
		if err := c.silentOutput(ctx, ks, code, jupyter.ExecuteOptions{Silent: true}, &out); err != nil {
			return "", err
		}
		if line, ok := markedLine(out.String(), marker); ok {
			return line, nil
		}
		if try == silentAnswers {
			return "", fmt.Errorf("the %s printed no answer (%d tries)", what, try)
		}
		c.eng.log.Info("a query's answer did not come; asking again", "context_id", c.ID, "language", c.Language, "query", what, "try", try)
	}
}

// markedLine returns the rest of the line after the last marker in
// printed, and whether there was one.
func markedLine(printed, marker string) (string, bool) {
	i := strings.LastIndex(printed, marker)
	if i < 0 {
		return "", false
	}
	line, _, _ := strings.Cut(printed[i+len(marker):], "\n")
	return line, true
}

// kernel returns the current kernel, making sure it is usable and set up:
// a new one if the old one is gone, the cwd and env re-applied after a
// restart. Requires the queue.
func (c *Context) kernel(ctx context.Context) (*kernelState, error) {
	c.mu.Lock()
	// Removing too: code queued behind a running one must not start in
	// the kernel being deleted (the server interrupts the running code
	// first, and the kernel would run the next request before it stops).
	if c.removed || c.removing {
		c.mu.Unlock()
		return nil, errRemoved
	}
	ks := c.ks
	c.mu.Unlock()
	if ks != nil && ks.usable() {
		if err := c.setup(ctx, ks); err != nil {
			if ks.usable() {
				return nil, err
			}
			// It went away during setup: replace it below.
		} else {
			return ks, nil
		}
	}
	client, err := c.eng.sup.Client(ctx)
	if err != nil {
		if errors.Is(err, jupyter.ErrStopped) {
			return nil, errClosed
		}
		return nil, newErr(ErrNotReady, err, "%s: waiting for the Jupyter server: %v", ErrNotReady.Error(), err)
	}
	nks := c.reattach(ctx, client)
	if nks == nil {
		if nks, err = c.startKernel(ctx, client, nil); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	if c.removed {
		c.mu.Unlock()
		_ = nks.kernel.Close()
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = client.DeleteKernel(dctx, nks.id)
		return nil, errRemoved
	}
	old := c.ks
	c.ks = nks
	c.mu.Unlock()
	if old != nil {
		_ = old.kernel.Close()
		if !old.lossReported {
			why := "its kernel died and could not be restarted"
			if old.client.Err() != nil {
				why = "the Jupyter server restarted"
			}
			c.notice(NoticeKernelReplaced, "this context got a new "+c.Language+" kernel since the last execution ("+
				why+"): its variables, imports and definitions from before are gone")
		}
	}
	c.eng.log.Info("context got a new kernel", "context_id", c.ID, "kernel_id", nks.id, "language", c.Language)
	return nks, nil
}

// revive gives the context a usable kernel now rather than at its next
// use, waiting its turn in the queue.
func (c *Context) revive() {
	ticket := c.queue.Enqueue()
	select {
	case <-ticket:
	case <-c.eng.ctx.Done():
		c.queue.Cancel(ticket)
		return
	}
	defer c.queue.Release()
	ctx, cancel := context.WithTimeout(c.eng.ctx, c.eng.opts.CreateTimeout)
	defer cancel()
	if _, err := c.kernel(ctx); err != nil && c.eng.ctx.Err() == nil && !errors.Is(err, errRemoved) {
		c.eng.log.Warn("cannot give the context a new kernel", "context_id", c.ID, "error", err)
	}
}

// notice queues a notice for the next execution; one of the same kind
// and text already pending is not repeated.
func (c *Context) notice(kind NoticeKind, text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.notices {
		if n.Kind == kind && n.Text == text {
			return
		}
	}
	if len(c.notices) == maxNotices {
		c.notices = append(c.notices[:0], c.notices[1:]...)
	}
	c.notices = append(c.notices, Notice{Kind: kind, Text: text, At: time.Now().UTC()})
	c.eng.log.Info("notice for the context's next execution", "context_id", c.ID, "kind", kind, "text", text)
}

// takeNotices returns the pending notices and forgets them.
func (c *Context) takeNotices() []Notice {
	c.mu.Lock()
	defer c.mu.Unlock()
	ns := c.notices
	c.notices = nil
	return ns
}

// running reports whether the context has a usable kernel now.
func (c *Context) running() bool {
	c.mu.Lock()
	ks := c.ks
	c.mu.Unlock()
	return ks != nil && ks.usable()
}

// Current returns the execution that has the context now (running, or
// getting its kernel ready), or nil.
func (c *Context) Current() *Execution {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current
}

func (c *Context) setCurrent(x *Execution) {
	c.mu.Lock()
	c.current = x
	c.mu.Unlock()
}

func (c *Context) restartCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.restarts
}

// restart restarts the kernel in place. The running execution (if any)
// ends; the next one re-applies the cwd and env. A kernel that is gone
// anyway is simply replaced at the next use.
func (c *Context) restart(ctx context.Context) error {
	c.mu.Lock()
	if c.removed {
		c.mu.Unlock()
		return notFound(c.ID)
	}
	ks := c.ks
	c.restarts++
	c.mu.Unlock()
	if ks == nil {
		c.forgetHanded(ctx)
		return nil
	}
	if !ks.usable() {
		c.drop(ks)
		return nil
	}
	if err := ks.kernel.Restart(ctx); err != nil {
		if gone(err) {
			c.drop(ks)
			return nil
		}
		return err
	}
	return nil
}

// drop forgets ks (if still current) so that the next use starts a new
// kernel.
func (c *Context) drop(ks *kernelState) {
	c.mu.Lock()
	if c.ks == ks {
		c.ks = nil
	}
	c.mu.Unlock()
	_ = ks.kernel.Close()
}

// remove shuts the kernel down and forgets the context. If Jupyter fails
// to delete a live kernel, nothing changes and the error is returned.
func (c *Context) remove(ctx context.Context) error {
	c.mu.Lock()
	if c.removed {
		c.mu.Unlock()
		return notFound(c.ID)
	}
	ks := c.ks
	c.removing = true // running code now reports the removal, not a death
	c.mu.Unlock()
	c.forgetHanded(ctx)
	if ks != nil && ks.client.Err() == nil {
		// The server finishes a deletion it began whatever its client
		// does: not tied to ctx, so that a caller giving up cannot leave
		// the context listed on a deleted kernel.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err := ks.client.DeleteKernel(dctx, ks.id)
		cancel()
		if err != nil && !gone(err) {
			c.mu.Lock()
			c.removing = false
			c.mu.Unlock()
			return err
		}
	}
	c.mu.Lock()
	if c.removed {
		c.mu.Unlock()
		return notFound(c.ID)
	}
	c.removed = true
	ks = c.ks
	c.ks = nil
	c.mu.Unlock()
	if ks != nil {
		_ = ks.kernel.Close()
	}
	c.eng.forget(c)
	c.eng.log.Info("context removed", "context_id", c.ID, "language", c.Language)
	return nil
}

// isRemoved reports whether the context is removed, or being removed.
func (c *Context) isRemoved() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.removed || c.removing
}

// closeKernel closes the kernel connection (engine shutdown).
func (c *Context) closeKernel() {
	c.mu.Lock()
	ks := c.ks
	c.mu.Unlock()
	if ks != nil {
		_ = ks.kernel.Close()
	}
}
