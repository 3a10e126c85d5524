package interpreter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/envd-dev/envd/backoff"
	"github.com/envd-dev/envd/internal/jupyter"
)

// warmDir is where prestarted kernels start: a directory no sandbox code
// can write (kernels run as root by default, and a language may read
// files from the directory it starts in while it starts). Setup moves a
// kernel to its context's directory at handover, as it does after any
// start.
const warmDir = "/"

// warmBackoff spaces the refills of a language after a failed start, or a
// prestarted kernel that died while waiting.
var warmBackoff = backoff.Policy{Floor: time.Second, Cap: 30 * time.Second}

// pool keeps prestarted kernels (Options.WarmKernels), so that a new
// context, or a language default's first use, takes one that is up (one
// handover: setup moves it to the context's directory and sets the
// sandbox-wide env, as after any start) instead of waiting for a kernel
// start. One goroutine refills it in the background, one kernel at a time
// (a start takes a core), with backoff after failures; it starts once the
// default Python context exists, so as not to slow envd's start.
//
// A prestarted kernel is exactly a fresh one of its kernelspec started in
// warmDir: nothing runs in it before its handover (Jupyter's own
// kernel_info aside), so its namespace is empty and its first execution
// is number 1. One that died or restarted while waiting, or whose server
// is gone (a Jupyter server restart ends every kernel), is discarded, never
// handed over. Shutdown deletes the pool's kernels.
type pool struct {
	e    *Engine
	want map[string]int // by normalized language; each > 0
	kick chan struct{}  // 1-buffered: look again (a kernel taken or gone, the server changed)
	// hard bounds starting and deleting the pool's kernels. Shutdown
	// cancels it when its own context ends: until then a start in flight is
	// waited for, so that its kernel is deleted rather than left behind.
	hard       context.Context
	hardCancel context.CancelFunc

	mu     sync.Mutex
	idle   map[string][]*warmKernel // by language, oldest first; guarded by mu
	gone   []*warmKernel            // left the pool unusable, to delete; guarded by mu
	taken  map[string]bool          // languages a kernel was handed over in since the last look; guarded by mu
	closed bool                     // guarded by mu
	// changed is closed and replaced whenever idle changes; guarded by mu.
	changed chan struct{}
}

// warmKernel is one prestarted kernel, connected.
type warmKernel struct {
	lang   string          // normalized language
	kernel string          // kernelspec name
	client *jupyter.Client // of the server generation it lives in
	k      *jupyter.Kernel
	id     string
	out    chan struct{} // closed when it leaves the pool (taken or discarded)
	preset *presetState  // set up ahead for a context directory; nil: not
}

// usable reports whether it can be handed over: its server is the live
// one, and the kernel neither died nor restarted since it started.
func (w *warmKernel) usable() bool {
	st := w.k.Status()
	return w.client.Err() == nil && st.Err == nil && st.Restarts == 0
}

func newPool(e *Engine, want map[string]int) *pool {
	if len(want) == 0 {
		return nil
	}
	hard, cancel := context.WithCancel(context.Background())
	return &pool{
		e:          e,
		want:       want,
		kick:       make(chan struct{}, 1),
		hard:       hard,
		hardCancel: cancel,
		idle:       map[string][]*warmKernel{},
		taken:      map[string]bool{},
		changed:    make(chan struct{}),
	}
}

// changedLocked wakes the watchers of idle.
func (p *pool) changedLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// poke makes the filler look again.
func (p *pool) poke() {
	if p == nil {
		return
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// take hands over a prestarted kernel of lang and kernelspec kernel living
// in client's server generation, or returns nil. Kernels it finds unusable
// leave the pool, to be deleted by the filler. Nil-safe.
func (p *pool) take(lang, kernel string, client *jupyter.Client) *warmKernel {
	if p == nil || p.want[lang] == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	defer p.poke()
	list := p.idle[lang]
	defer func() {
		if len(list) != len(p.idle[lang]) {
			p.idle[lang] = list
			p.changedLocked()
		}
	}()
	for len(list) > 0 {
		w := list[0]
		list = list[1:]
		close(w.out)
		if w.client == client && w.kernel == kernel && w.usable() {
			p.taken[lang] = true
			return w
		}
		p.gone = append(p.gone, w)
	}
	return nil
}

// ready counts the usable kernels of lang waiting in the pool.
func (p *pool) ready(lang string) int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, w := range p.idle[lang] {
		if w.usable() {
			n++
		}
	}
	return n
}

// run keeps the pool full until the engine shuts down.
func (p *pool) run() {
	defer p.e.wg.Done()
	e := p.e
	backoffs := map[string]*backoff.Backoff{} // of the languages failing
	retry := map[string]time.Time{}           // no start before then
	lastErr := map[string]string{}            // logged as a warning once
	// fail puts off lang's next start, and returns by how long.
	fail := func(lang string) time.Duration {
		b := backoffs[lang]
		if b == nil {
			b = backoff.New(warmBackoff, e.clock) // Next only: p.wait waits, a poke ends it early
			backoffs[lang] = b
		}
		d := b.Next()
		retry[lang] = e.clock.Now().Add(d)
		return d
	}
	for {
		died, taken := p.prune()
		for _, lang := range taken {
			delete(backoffs, lang)
			delete(retry, lang)
		}
		for _, w := range died {
			if w.client.Err() == nil && !w.usable() {
				// It died or restarted by itself: as bad as a failed start.
				e.log.Warn("prestarted kernel died while waiting; discarded", "language", w.lang, "kernel_id", w.id)
				fail(w.lang)
			}
			p.delete(w)
		}
		lang, wait := p.next(retry)
		if lang == "" {
			if !p.wait(wait) {
				return
			}
			continue
		}
		began := e.clock.Now()
		w, err := p.startKernel(lang)
		if e.ctx.Err() != nil || errors.Is(err, jupyter.ErrStopped) {
			if w != nil {
				p.delete(w) // shutting down
			}
			return
		}
		if err != nil {
			d := fail(lang)
			if msg := err.Error(); msg != lastErr[lang] {
				lastErr[lang] = msg
				e.log.Warn("cannot prestart a kernel; retrying", "language", lang, "error", err, "backoff", d)
			} else {
				e.log.Debug("cannot prestart a kernel; retrying", "language", lang, "error", err, "backoff", d)
			}
			continue
		}
		delete(lastErr, lang)
		if !p.add(w) {
			p.delete(w) // shutting down
			return
		}
		e.log.Info("kernel prestarted", "language", lang, "kernel", w.kernel, "kernel_id", w.id,
			"duration", e.clock.Since(began), "ready", p.ready(lang), "want", p.want[lang])
		e.wg.Add(1)
		go p.watchKernel(w)
	}
}

// wait waits for a poke, or d (0: no limit); false when the engine shuts
// down.
func (p *pool) wait(d time.Duration) bool {
	var timer <-chan time.Time
	if d > 0 {
		t := p.e.clock.NewTimer(d, "pool", "backoff")
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-p.kick:
	case <-timer:
	case <-p.e.ctx.Done():
		return false
	}
	return true
}

// prune takes the unusable kernels out of the pool and returns them with
// those take left (unusable, or of another kernelspec), and the languages
// a kernel was taken in since the last call.
func (p *pool) prune() (gone []*warmKernel, taken []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	gone, p.gone = p.gone, nil
	for lang, list := range p.idle {
		keep := list[:0]
		for _, w := range list {
			if w.usable() {
				keep = append(keep, w)
				continue
			}
			close(w.out)
			gone = append(gone, w)
		}
		clear(list[len(keep):])
		if len(keep) != len(list) {
			p.idle[lang] = keep
			p.changedLocked()
		}
	}
	for lang := range p.taken {
		taken = append(taken, lang)
	}
	clear(p.taken)
	return gone, taken
}

// next returns a language to start a kernel of now (envd's order: python
// first), else how long until one may be started (0: none is missing).
func (p *pool) next(retry map[string]time.Time) (string, time.Duration) {
	now := p.e.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	var wait time.Duration
	for _, lang := range p.langs() {
		if len(p.idle[lang]) >= p.want[lang] {
			continue
		}
		at, ok := retry[lang]
		if !ok || !at.After(now) {
			return lang, 0
		}
		if d := at.Sub(now); wait == 0 || d < wait {
			wait = d
		}
	}
	return "", wait
}

// langs lists the pool's languages in envd's order.
func (p *pool) langs() []string {
	var out []string
	for _, b := range builtins {
		if p.want[b.name] > 0 {
			out = append(out, b.name)
		}
	}
	return out
}

// add puts w in the pool; false if the pool is closed or full.
func (p *pool) add(w *warmKernel) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle[w.lang]) >= p.want[w.lang] {
		return false
	}
	p.idle[w.lang] = append(p.idle[w.lang], w)
	p.changedLocked()
	return true
}

// startKernel starts a kernel of lang in warmDir and connects to it. The
// wait for the Jupyter server ends at shutdown; the start itself only when
// the pool's hard context ends (see pool.hard).
func (p *pool) startKernel(lang string) (*warmKernel, error) {
	e := p.e
	ctx, cancel := context.WithTimeout(e.ctx, e.opts.CreateTimeout)
	defer cancel()
	client, err := e.sup.Client(ctx)
	if err != nil {
		return nil, err
	}
	l, err := e.findLanguage(ctx, client, lang)
	if err != nil {
		return nil, err
	}
	hctx, hcancel := context.WithTimeout(p.hard, e.opts.CreateTimeout)
	defer hcancel()
	m, err := client.StartKernel(hctx, l.kernel, warmDir)
	if err != nil {
		return nil, e.startError(lang, l.kernel, err)
	}
	k, err := client.Connect(hctx, m.ID, e.kernelOptions(l.kernel))
	if err != nil {
		p.deleteKernel(client, m.ID)
		return nil, fmt.Errorf("connect to %s kernel: %w", l.kernel, err)
	}
	w := &warmKernel{lang: lang, kernel: l.kernel, client: client, k: k, id: m.ID, out: make(chan struct{})}
	p.presetup(ctx, w, l)
	return w, nil
}

// presetup sets w up ahead of its handover for a context in the default
// working directory, as most are: the very setup a handover runs (cwd,
// sandbox-wide env), run now, so that handing w over to such a context
// needs no round trip to the kernel unless the env changed since (then
// only the change is sent). A failure leaves w to be set up at its
// handover, as before.
func (p *pool) presetup(ctx context.Context, w *warmKernel, l language) {
	e := p.e
	dir, err := e.resolveCwd("")
	if err != nil {
		return
	}
	c := &Context{Language: l.name, Cwd: dir, kernelName: l.kernel, code: codeLanguage(l.code), eng: e}
	if c.code == "" {
		return
	}
	ks := &kernelState{client: w.client, kernel: w.k, id: w.id, setupRestarts: -1, warm: true}
	if err := c.setup(ctx, ks); err != nil {
		e.log.Debug("prestarted kernel not set up ahead; it will be at its handover", "kernel_id", w.id, "error", err)
		return
	}
	w.preset = &presetState{cwd: dir, restarts: ks.setupRestarts, env: ks.globalEnv, baseline: ks.baseline}
}

// presetState is what presetup did to a prestarted kernel.
type presetState struct {
	cwd      string            // the context directory it was set up for
	restarts int               // its restarts then (0)
	env      map[string]string // the sandbox-wide env it got
	baseline map[string]bool   // a JavaScript kernel's globals after setup
}

// watchKernel pokes the filler when w dies or restarts while it waits.
func (p *pool) watchKernel(w *warmKernel) {
	defer p.e.wg.Done()
	for {
		st := w.k.Status()
		if st.Err != nil || st.Restarts != 0 {
			p.poke()
			return
		}
		select {
		case <-st.Changed:
		case <-w.out:
			return
		case <-p.e.ctx.Done():
			return
		}
	}
}

// delete closes w's connection and deletes its kernel, unless its server
// is gone (and the kernel with it).
func (p *pool) delete(w *warmKernel) {
	_ = w.k.Close()
	if w.client.Err() == nil {
		p.deleteKernel(w.client, w.id)
	}
}

func (p *pool) deleteKernel(client *jupyter.Client, id string) {
	ctx, cancel := context.WithTimeout(p.hard, 30*time.Second)
	defer cancel()
	err := client.DeleteKernel(ctx, id)
	switch {
	case err == nil || gone(err):
	case p.hard.Err() != nil:
		// Shutdown's time is up: stopping the supervisor ends the kernel.
		p.e.log.Debug("prestarted kernel not deleted: shutdown's time is up", "kernel_id", id, "error", err)
	default:
		p.e.log.Warn("cannot delete a prestarted kernel", "kernel_id", id, "error", err)
	}
}

// close deletes every kernel of the pool; nothing is added after it. The
// filler must have stopped.
func (p *pool) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	all := p.gone
	p.gone = nil
	for _, list := range p.idle {
		for _, w := range list {
			close(w.out)
			all = append(all, w)
		}
	}
	clear(p.idle)
	p.changedLocked()
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range all {
		wg.Go(func() { p.delete(w) })
	}
	wg.Wait()
}
