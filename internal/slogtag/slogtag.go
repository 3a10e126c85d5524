// Package slogtag is a slog.Handler that adds attributes to every record,
// attributes which can be set after the loggers that use it were made:
// envd learns the sandbox's identity (from the MMDS) after its components
// already hold their loggers, and tags their logs with it from then on.
package slogtag

import (
	"context"
	"log/slog"
	"sync/atomic"
)

// Handler wraps another handler. Every handler derived from it (With,
// WithGroup) shares its tags.
type Handler struct {
	inner slog.Handler
	tags  *atomic.Pointer[[]slog.Attr]
}

// Wrap returns a handler that passes records to inner with the tags added.
func Wrap(inner slog.Handler) *Handler {
	return &Handler{inner: inner, tags: &atomic.Pointer[[]slog.Attr]{}}
}

// Set replaces the tags of this handler and of every handler derived from
// it; records logged from then on carry them.
func (h *Handler) Set(attrs ...slog.Attr) {
	a := append([]slog.Attr(nil), attrs...)
	h.tags.Store(&a)
}

// Enabled reports whether the wrapped handler handles level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.inner.Enabled(ctx, level)
}

// Handle adds the tags to r and passes it on. In a group (WithGroup) they
// land inside the group, as any attribute of the record would.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if t := h.tags.Load(); t != nil && len(*t) > 0 {
		r = r.Clone()
		r.AddAttrs(*t...)
	}
	return h.inner.Handle(ctx, r)
}

// WithAttrs returns a handler with attrs that shares h's tags.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Handler{inner: h.inner.WithAttrs(attrs), tags: h.tags}
}

// WithGroup returns a handler in group name that shares h's tags.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{inner: h.inner.WithGroup(name), tags: h.tags}
}
