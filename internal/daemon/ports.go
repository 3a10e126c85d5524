package daemon

import (
	"context"
	"log/slog"

	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/ports"
	"github.com/envd-dev/envd/internal/ports/portsconnect"
	"github.com/envd-dev/envd/internal/server"
)

// portsPart is the ports monitor (envd.ports.v1) and its scans.
type portsPart struct {
	m      *ports.Monitor
	cancel context.CancelFunc
	done   chan struct{}
}

// newPorts builds the ports monitor and its service. The monitor counts
// envd's Jupyter server as envd (its port is never forwarded), and so the
// kernels' ZeroMQ channels to it; anything else a kernel listens on (a
// Gradio app run in a notebook) is the workload's, as are servers kernels
// start.
func newPorts(cfg Config, log *slog.Logger, defs *defaults.Defaults, code *codeExec) (*portsPart, server.Route) {
	opts := ports.Options{
		Logger:   log.With("component", "ports"),
		Forward:  cfg.ForwardPorts,
		Interval: cfg.PortScanInterval,
		// The real clock, not cfg.Clock: a test driving the shutdown's
		// mock clock must not also drive the scans.
	}
	if code.sup != nil {
		opts.Ignore = func() []int {
			if st := code.sup.Status(); st.PID != 0 {
				return []int{st.PID}
			}
			return nil
		}
		opts.Private = code.sup.KernelChannels
	}
	m := ports.New(opts)
	path, h := portsconnect.New(m, portsconnect.Options{Logger: log}).Handler(server.HandlerOptions(log, defs)...)
	return &portsPart{m: m, done: make(chan struct{})}, server.Route{Pattern: path, Handler: h}
}

// start starts the scans.
func (pp *portsPart) start() {
	ctx, cancel := context.WithCancel(context.Background())
	pp.cancel = cancel
	go func() {
		defer close(pp.done)
		pp.m.Run(ctx)
	}()
}

// stop ends the scans and every forward (their listeners and
// connections), and waits for them.
func (pp *portsPart) stop() {
	if pp.cancel == nil {
		return
	}
	pp.cancel()
	<-pp.done
}
