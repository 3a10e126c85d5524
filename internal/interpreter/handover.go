package interpreter

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/envd-dev/envd/internal/jupyter"
)

// A live upgrade (internal/handover, docs/upgrade.md) keeps the Jupyter
// server running across the exec of a new envd (jupyter.Supervisor's
// Handover and Adopt), and with it every kernel. The old engine stops
// (Handover: executions in flight end, saying envd is being upgraded, and
// the code they ran is interrupted in its kernel; the prestarted kernels
// are deleted) and describes its contexts; the new one re-creates them
// (Adopt) with the same ids, languages, directories and defaults, and
// reconnects each to its kernel, with its variables: at Start, and in any
// case at its next use. A kernel that is gone (the server could not be
// adopted) is replaced by a new one, and the next execution gets a notice
// saying the state is lost.

// ContextState is a context as a live upgrade hands it over.
type ContextState struct {
	ID, Language, Cwd string
	// KernelName is its kernelspec, Code the language of envd's setup code
	// in it ("" for none).
	KernelName, Code string
	// Default: it is its language's default context.
	Default bool
	// KernelID is its kernel's id; "": it has none (not started yet, or
	// lost).
	KernelID string
	// SetUp: the kernel's working directory and GlobalEnv were set in it.
	SetUp     bool
	GlobalEnv map[string]string
	// Warm: the kernel was prestarted. LossReported: an execution was
	// told that the kernel lost its state.
	Warm, LossReported bool
	// Baseline are a JavaScript kernel's own globals.
	Baseline []string
	// Restarts counts the restarts its users asked for.
	Restarts int
	// Notices are pending for its next execution.
	Notices []Notice
}

// stoppedText says why an execution was stopped by Shutdown or Handover:
// "envd is shutting down; " + what, or that it is being upgraded.
func (e *Engine) stoppedText(what string) string {
	if e.upgrading.Load() {
		return "envd is being upgraded; " + what + " (the context keeps its state: run it again once envd answers)"
	}
	return "envd is shutting down; " + what
}

// Handover stops the engine for a live upgrade and returns its contexts,
// in creation order. It is Shutdown but that the contexts' kernels are
// left running (only their connections close), and that the code running
// in them when it was called is interrupted, so that they are idle for the
// next envd.
func (e *Engine) Handover(ctx context.Context) (_ []ContextState, executions []string) {
	e.upgrading.Store(true)
	var busy []*kernelState
	e.mu.Lock()
	// Those an earlier upgrade handed over first (AdoptExecutions keeps
	// the last ones), then this envd's own.
	executions = append(slices.Sorted(maps.Keys(e.upgraded)), slices.Sorted(maps.Keys(e.execs))...)
	for _, c := range e.order {
		c.mu.Lock()
		if c.current != nil && c.ks != nil {
			busy = append(busy, c.ks)
		}
		c.mu.Unlock()
	}
	e.mu.Unlock()
	var states []ContextState
	e.shutdown(ctx, func(ctxs []*Context) {
		e.mu.Lock()
		defaults := maps.Clone(e.defaults)
		e.mu.Unlock()
		for _, c := range ctxs {
			states = append(states, c.state(defaults[c.Language] == c))
		}
	})
	for _, ks := range busy {
		ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := ks.client.InterruptKernel(ictx, ks.id); err != nil && !gone(err) {
			e.log.Warn("cannot interrupt a kernel whose execution the upgrade stopped", "kernel_id", ks.id, "error", err)
		}
		cancel()
	}
	return states, executions
}

// maxUpgraded bounds the execution ids an envd keeps from the envds before
// its upgrades (see AdoptExecutions).
const maxUpgraded = 4096

// AdoptExecutions records the ids of the executions the envd before a live
// upgrade knew (stopped or ended): a client reattaching to one learns that
// the upgrade ended it rather than that it never existed. At most
// maxUpgraded, the last ones, are kept.
func (e *Engine) AdoptExecutions(ids []string) {
	if len(ids) > maxUpgraded {
		ids = ids[len(ids)-maxUpgraded:]
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.upgraded == nil {
		e.upgraded = make(map[string]bool, len(ids))
	}
	for _, id := range ids {
		e.upgraded[id] = true
	}
}

// state describes the context for a handover; no execution may run.
func (c *Context) state(isDefault bool) ContextState {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := ContextState{
		ID: c.ID, Language: c.Language, Cwd: c.Cwd, KernelName: c.kernelName, Code: c.code, Default: isDefault,
		Restarts: c.restarts, Notices: slices.Clone(c.notices),
	}
	if h := c.handed; h != nil {
		// Handed over to this envd and not reconnected yet: pass it on.
		st.KernelID, st.SetUp, st.GlobalEnv, st.Warm, st.LossReported, st.Baseline =
			h.KernelID, h.SetUp, h.GlobalEnv, h.Warm, h.LossReported, h.Baseline
	}
	ks := c.ks
	if ks == nil || !ks.usable() {
		return st
	}
	st.KernelID = ks.id
	st.SetUp = ks.setupRestarts >= 0 && ks.setupRestarts == ks.kernel.Status().Restarts
	st.GlobalEnv = maps.Clone(ks.globalEnv)
	st.Warm, st.LossReported = ks.warm, ks.lossReported
	st.Baseline = slices.Sorted(maps.Keys(ks.baseline))
	return st
}

// Adopt re-creates the contexts a live upgrade handed over. Call it
// before Start, which reconnects them to their kernels.
func (e *Engine) Adopt(states []ContextState) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, st := range states {
		if st.ID == "" || e.contexts[st.ID] != nil {
			continue
		}
		c := &Context{
			ID: st.ID, Language: st.Language, Cwd: st.Cwd, kernelName: st.KernelName, code: st.Code, eng: e,
			restarts: st.Restarts, notices: slices.Clone(st.Notices),
		}
		if st.KernelID != "" {
			h := st
			c.handed = &h
		}
		e.contexts[c.ID] = c
		e.order = append(e.order, c)
		if st.Default && e.defaults[c.Language] == nil {
			e.defaults[c.Language] = c
		}
	}
	e.log.Info("contexts handed over", "contexts", len(states))
}

// reattachLocked reconnects, in the background, every context handed
// over to its kernel. e.mu is held.
func (e *Engine) reattachLocked() {
	for _, c := range e.order {
		c.mu.Lock()
		handed := c.handed != nil
		c.mu.Unlock()
		if handed {
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				c.revive()
			}()
		}
	}
}

// reattach reconnects the context to the kernel handed over to it, if
// any, and brings it up to date (setup). It returns nil when there is
// none, or it is gone: the context then needs a new kernel, and its next
// execution is told that its state is lost. Requires the queue.
func (c *Context) reattach(ctx context.Context, client *jupyter.Client) *kernelState {
	c.mu.Lock()
	h := c.handed
	c.handed = nil
	c.mu.Unlock()
	if h == nil {
		return nil
	}
	k, err := client.Connect(ctx, h.KernelID, c.eng.kernelOptions(c.kernelName))
	if err == nil {
		ks := &kernelState{client: client, kernel: k, id: h.KernelID, setupRestarts: -1, globalEnv: h.GlobalEnv,
			userRestarts: c.restartCount(), lossReported: h.LossReported, warm: h.Warm, oomSeen: c.eng.oomKills()}
		if h.SetUp {
			ks.setupRestarts = k.Status().Restarts
		}
		if len(h.Baseline) > 0 {
			ks.baseline = make(map[string]bool, len(h.Baseline))
			for _, name := range h.Baseline {
				ks.baseline[name] = true
			}
		}
		if err = c.setup(ctx, ks); err == nil {
			c.eng.log.Info("context reconnected to its kernel after the upgrade", "context_id", c.ID, "kernel_id", h.KernelID)
			return ks
		}
		_ = k.Close()
	}
	if ctx.Err() != nil {
		// Not the kernel's fault: keep it for the next try.
		c.mu.Lock()
		c.handed = h
		c.mu.Unlock()
		return nil
	}
	c.eng.log.Warn("cannot reconnect a context to its kernel after the upgrade; it gets a new one", "context_id", c.ID,
		"kernel_id", h.KernelID, "error", err)
	c.notice(NoticeKernelReplaced, "envd was upgraded and this context's "+c.Language+" kernel could not be kept ("+
		err.Error()+"): its variables, imports and definitions from before are gone")
	return nil
}

// forgetHanded deletes the kernel handed over to the context, if it was
// not reconnected to yet (a restart or removal before its first use).
func (c *Context) forgetHanded(ctx context.Context) {
	c.mu.Lock()
	h := c.handed
	c.handed = nil
	c.mu.Unlock()
	if h == nil {
		return
	}
	client, err := c.eng.sup.Client(ctx)
	if err == nil {
		err = client.DeleteKernel(ctx, h.KernelID)
	}
	if err != nil && !gone(err) {
		c.eng.log.Warn("cannot delete the kernel handed over to a context", "context_id", c.ID, "kernel_id", h.KernelID, "error", err)
	}
}
