package daemon

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/interpreter"
	"github.com/envd-dev/envd/internal/packages"
	"github.com/envd-dev/envd/internal/packages/pkgconnect"
	"github.com/envd-dev/envd/internal/server"
)

// newPackages builds the packages service (envd.packages.v1) over the
// same locations kernels and commands install into, with the code engine
// (if any) told of the contexts a change leaves stale.
func newPackages(cfg Config, log *slog.Logger, defs *defaults.Defaults, code *codeExec) (*packages.Installer, server.Route, error) {
	locs, err := defaults.FindPackages()
	if err != nil {
		return nil, server.Route{}, fmt.Errorf("package locations: %w", err)
	}
	opts := packages.Options{
		Logger:      log.With("component", "packages"),
		PythonVenv:  locs.PythonVenv,
		RLibrary:    locs.RLibrary,
		DefaultUser: defs.User,
		Env:         defs.Env,
		StrictUsers: cfg.StrictUsers,
		Kernels:     code.kernels(),
	}
	if cfg.StrictUsers {
		opts.RootEnv = func() map[string]string { return strictRootEnv(defs) }
	}
	in := packages.New(opts)
	path, h := pkgconnect.New(in, pkgconnect.Options{Logger: log}).Handler(server.HandlerOptions(log, defs)...)
	return in, server.Route{Pattern: path, Handler: h}, nil
}

// The code engine answers which contexts loaded a package.
var _ packages.Kernels = (*interpreter.Engine)(nil)

// kernels is the code engine as the packages service asks it which
// contexts loaded a package; nil without code execution.
func (c *codeExec) kernels() packages.Kernels {
	if c.eng == nil {
		return nil
	}
	return c.eng
}

// closePackages kills the package installers still running and waits for
// their operations to end, at most grace.
func closePackages(in *packages.Installer, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), hardGrace)
	defer cancel()
	if err := in.Close(ctx); err != nil {
		log.Warn("stop package operations", "error", err)
	}
}
