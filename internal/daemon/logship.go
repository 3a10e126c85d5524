package daemon

import (
	"context"
	"log/slog"
	"time"

	"github.com/envd-dev/envd/internal/logship"
)

// shipCloseGrace bounds, at shutdown, the sending of the records still
// queued: a dead collector never holds envd's exit.
const shipCloseGrace = 2 * time.Second

// shipLogs, with cfg.ShipLogs and an MMDS, makes the shipper of envd's log
// records and tees cfg.Logger's records to it. The shipper sits beside the
// sandbox-id tags (cfg.tags), not under them: it adds the ids itself, in
// upstream's fields (instanceID, envID), from the metadata that names its
// address. Its own logger writes envd's log only.
func shipLogs(cfg Config) Config {
	if !cfg.ShipLogs || cfg.MMDSURL == "" || cfg.MMDSURL == "off" {
		return cfg
	}
	cfg.shipper = logship.New(logship.Options{
		Logger: slog.New(cfg.tags).With("component", "logship"),
		Clock:  cfg.Clock,
	})
	cfg.Logger = slog.New(teeHandler{main: cfg.Logger.Handler(), ship: cfg.shipper.Handler()})
	return cfg
}

// closeShipper sends what is still queued, for at most shipCloseGrace, and
// stops shipping. It runs last at shutdown, after the last record shipped.
func (p *parts) closeShipper() {
	if p.cfg.shipper == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	timer := p.cfg.Clock.AfterFunc(shipCloseGrace, cancel, "shutdown", "logship")
	defer timer.Stop()
	p.cfg.shipper.Close(ctx) // logs its counters, and what it abandons
}

// teeHandler passes each record main handles to ship too: the records
// shipped are those envd logs, at the same levels.
type teeHandler struct {
	main, ship slog.Handler
}

func (h teeHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.main.Enabled(ctx, level)
}

// Handle never waits on ship: it only queues the record.
func (h teeHandler) Handle(ctx context.Context, r slog.Record) error {
	err := h.main.Handle(ctx, r)
	if h.ship.Enabled(ctx, r.Level) {
		h.ship.Handle(ctx, r) // never fails
	}
	return err
}

func (h teeHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return teeHandler{main: h.main.WithAttrs(attrs), ship: h.ship.WithAttrs(attrs)}
}

func (h teeHandler) WithGroup(name string) slog.Handler {
	return teeHandler{main: h.main.WithGroup(name), ship: h.ship.WithGroup(name)}
}
