package interpreter

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// Phases of creating a context, in order; each is logged with its
// duration, and a caller that stops waiting is told which one it gave up
// in.
const (
	phaseServer   = "wait for the Jupyter server"
	phaseSpecs    = "list kernel specs"
	phaseStart    = "start kernel"
	phaseHandover = "take a prestarted kernel"
	phaseConnect  = "connect to the kernel's channels"
	phaseSetup    = "set up kernel (working directory, sandbox env vars)"
)

// creation is one creation of a context, going through the phases above.
// A nil *creation records nothing (a kernel replaced on use).
type creation struct {
	e     *Engine
	lang  string
	began time.Time
	done  chan struct{} // closed when a language default's creation ended

	mu     sync.Mutex
	phase  string    // guarded by mu
	since  time.Time // guarded by mu; when phase began
	kernel string    // guarded by mu; the kernel's id, once it has one
}

// started records the id of the kernel the creation started or took.
func (cr *creation) started(kernelID string) {
	if cr == nil {
		return
	}
	cr.mu.Lock()
	cr.kernel = kernelID
	cr.mu.Unlock()
}

// lateAfter is how long a phase may take before its failure or its
// caller's giving up says what the kernel's processes are doing.
const lateAfter = 5 * time.Second

// progress is ", KERNEL PROGRESS" for a phase that took d, if the kernel
// is known and d is long; "" otherwise.
func (cr *creation) progress(d time.Duration) string {
	cr.mu.Lock()
	id, phase := cr.kernel, cr.phase
	cr.mu.Unlock()
	if d < lateAfter || (phase != phaseConnect && phase != phaseSetup) {
		return ""
	}
	if p := kernelProgress(id); p != "" {
		return "; " + p
	}
	return ""
}

func (e *Engine) newCreation(lang string) *creation {
	now := e.clock.Now()
	return &creation{e: e, lang: lang, began: now, done: make(chan struct{}), phase: phaseServer, since: now}
}

// enter ends the current phase (logging its duration) and begins phase.
func (cr *creation) enter(phase string) {
	if cr == nil {
		return
	}
	now := cr.e.clock.Now()
	cr.mu.Lock()
	prev, since := cr.phase, cr.since
	if prev == phase {
		cr.mu.Unlock()
		return
	}
	cr.phase, cr.since = phase, now
	cr.mu.Unlock()
	if prev != "" {
		cr.e.log.Debug("context creation phase done", "language", cr.lang, "phase", prev, "duration", now.Sub(since))
	}
}

// finish logs the last phase, and the failure if err is not nil.
func (cr *creation) finish(err error) {
	if cr == nil {
		return
	}
	now := cr.e.clock.Now()
	cr.mu.Lock()
	phase, since := cr.phase, cr.since
	cr.mu.Unlock()
	if errors.Is(err, ErrClosed) {
		return
	}
	if errors.Is(err, ErrUnsupportedLanguage) {
		cr.e.log.Info("context not created: language not available", "language", cr.lang, "error", err)
		return
	}
	if err != nil {
		attrs := []any{"language", cr.lang, "phase", phase,
			"phase_duration", now.Sub(since), "duration", now.Sub(cr.began), "error", err}
		if p := cr.progress(now.Sub(since)); p != "" {
			attrs = append(attrs, "kernel", p[2:])
		}
		cr.e.log.Warn("context creation failed", attrs...)
		switch phase {
		case phaseStart, phaseHandover, phaseConnect, phaseSetup:
			// A kernel failing to start or to answer says why on its
			// stderr, which goes to the server's output.
			cr.e.sup.LogRecentOutput("a " + cr.lang + " context's creation failed: " + phase)
		}
		return
	}
	cr.e.log.Debug("context creation phase done", "language", cr.lang, "phase", phase, "duration", now.Sub(since))
}

// notReady is the answer to a caller whose wait for the creation ended
// (cause), naming the phase the creation is in.
func (cr *creation) notReady(cause error) error {
	now := cr.e.clock.Now()
	cr.mu.Lock()
	phase, since := cr.phase, cr.since
	cr.mu.Unlock()
	detail := ""
	if phase == phaseServer {
		detail = fmt.Sprintf(" (the Jupyter server is %s)", cr.e.sup.Status().State)
	}
	return newErr(ErrNotReady, cause, "%s: the %s context is still being created: phase %q%s has taken %s (%s in all)%s",
		ErrNotReady.Error(), cr.lang, phase, detail, round(now.Sub(since)), round(now.Sub(cr.began)), cr.progress(now.Sub(since)))
}

func round(d time.Duration) time.Duration {
	if d > time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}
