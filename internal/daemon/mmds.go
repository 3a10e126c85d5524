package daemon

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/logship"
	"github.com/envd-dev/envd/internal/mmds"
	"github.com/envd-dev/envd/internal/slogtag"
)

// Bounds of the boot metadata's reads.
const (
	// bootPollFor bounds one round of polling the MMDS: outside a
	// Firecracker guest nothing answers, and envd stops asking.
	bootPollFor = time.Minute
	// initRefreshTimeout bounds /init's read of the current token hash.
	initRefreshTimeout = 2 * time.Second
)

// bootMetadata is what the host publishes on the MMDS: polled at boot
// (never blocking startup or /health), exported to processes and kernels
// (E2B_SANDBOX_ID, E2B_TEMPLATE_ID), put on every log record, where the
// records are shipped (with ShipLogs), and the hash /init checks its token
// against.
type bootMetadata struct {
	client *mmds.Client
	log    *slog.Logger
	defs   *defaults.Defaults
	tags   *slogtag.Handler // nil when the logger is not tagged
	ship   *logship.Shipper // nil without ShipLogs
	run    *runDir          // nil without a run directory

	ctx    context.Context // ends at shutdown
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	known   bool // guarded by mu: the MMDS answered once
	polling bool // guarded by mu
	md      mmds.Metadata
}

// newBootMetadata returns nil when cfg.MMDSURL is "" or "off".
func newBootMetadata(cfg Config, defs *defaults.Defaults) (*bootMetadata, error) {
	if cfg.MMDSURL == "" || cfg.MMDSURL == "off" {
		return nil, nil
	}
	// The real clock, not cfg.Clock: a test driving the shutdown's mock
	// clock must not also drive the polling.
	c, err := mmds.New(cfg.MMDSURL, mmds.Options{})
	if err != nil {
		return nil, err
	}
	b := &bootMetadata{client: c, log: cfg.Logger.With("component", "mmds"), defs: defs}
	b.tags, b.ship, b.run = cfg.tags, cfg.shipper, newRunDir(cfg.RunDir)
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b, nil
}

// start polls the MMDS in the background.
func (b *bootMetadata) start() {
	if b == nil {
		return
	}
	b.poll()
}

// stop ends the polling and waits for it.
func (b *bootMetadata) stop() {
	if b == nil {
		return
	}
	b.cancel()
	b.wg.Wait()
	b.client.Close()
}

// poll starts a round of polling unless one runs.
func (b *bootMetadata) poll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.polling || b.ctx.Err() != nil {
		return
	}
	b.polling = true
	b.wg.Go(func() {
		ctx, cancel := context.WithTimeout(b.ctx, bootPollFor)
		defer cancel()
		md, err := b.client.Poll(ctx, mmds.DefaultBackoff, func(attempt int, err error) {
			if attempt == 1 {
				b.log.Debug("no boot metadata from the MMDS yet; polling", "url", b.client.URL(), "error", err)
			}
		})
		b.mu.Lock()
		b.polling = false
		b.mu.Unlock()
		if err != nil {
			if b.ctx.Err() == nil {
				b.log.Info("no boot metadata from the MMDS; not a Firecracker guest, or its host publishes none", "url", b.client.URL(), "error", err)
			}
			return
		}
		b.apply(md)
	})
}

// apply makes md the metadata in force.
func (b *bootMetadata) apply(md mmds.Metadata) {
	b.mu.Lock()
	changed := !b.known || md != b.md
	b.known, b.md = true, md
	b.mu.Unlock()
	if !changed {
		return
	}
	b.defs.SetHostVar("E2B_SANDBOX_ID", md.SandboxID)
	b.defs.SetHostVar("E2B_TEMPLATE_ID", md.TemplateID)
	if b.tags != nil {
		b.tags.Set(slog.String("sandbox_id", md.SandboxID), slog.String("template_id", md.TemplateID))
	}
	if b.ship != nil {
		// An empty address (none published, or none after a resume) holds
		// the records, bounded, until one is.
		b.ship.SetTarget(logship.Target{Address: md.LogsAddress, InstanceID: md.SandboxID, EnvID: md.TemplateID})
	}
	for name, v := range map[string]string{runFileSandboxID: md.SandboxID, runFileTemplateID: md.TemplateID} {
		if err := b.run.write(name, v); err != nil {
			b.log.Warn("cannot write the sandbox's ids for code in the sandbox", "error", err)
		}
	}
	b.log.Info("boot metadata from the MMDS", "logs_address", md.LogsAddress, "access_token_hash", md.AccessTokenHash != "")
}

// AccessTokenHash is httpapi.BootMetadata's: once the MMDS has answered,
// the hash it publishes now (read again, bounded: a resumed sandbox has a
// new one, and new ids), else the last one read. Before it has answered,
// none, and /init starts another round of polling.
func (b *bootMetadata) AccessTokenHash(ctx context.Context) (string, bool) {
	b.mu.Lock()
	known := b.known
	b.mu.Unlock()
	if !known {
		b.poll()
		return "", false
	}
	ctx, cancel := context.WithTimeout(ctx, initRefreshTimeout)
	defer cancel()
	md, err := b.client.Get(ctx)
	if err == nil && md.Ready() {
		b.apply(md)
	} else if err != nil {
		b.log.Warn("cannot read the MMDS again for /init; checking the token against the hash read before", "error", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.md.AccessTokenHash, b.md.AccessTokenHash != ""
}
