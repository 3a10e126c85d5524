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

// newPorts builds the ports monitor and its service. Private, never
// forwarded: envd's own listeners, whatever its Jupyter server listens on,
// and its kernels' lines to the server (each kernel's ZeroMQ channels and
// the sockets of their poller, ipykernel's IOPub pipe among them). What a
// kernel's subprocess listens on, or a server code run in a kernel starts
// in a thread (a Gradio or Flask app run in a notebook), is the
// workload's. internal/ports/private.go has the rule.
func newPorts(cfg Config, log *slog.Logger, defs *defaults.Defaults, code *codeExec) (*portsPart, server.Route) {
	opts := ports.Options{
		Logger:   log.With("component", "ports"),
		Forward:  cfg.ForwardPorts,
		Interval: cfg.PortScanInterval,
		// The real clock, not cfg.Clock: a test driving the shutdown's
		// mock clock must not also drive the scans.
	}
	if code.sup != nil {
		// Status().PID is the server's from its spawn (or adoption) on:
		// its port is private from the start.
		opts.JupyterServer = func() int { return code.sup.Status().PID }
		opts.KernelChannels = code.sup.KernelChannels
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
