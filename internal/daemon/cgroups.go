package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"time"

	"github.com/envd-dev/envd/internal/cgroup"
	"github.com/envd-dev/envd/internal/httpapi"
)

// CgroupModes are the values of Config.Cgroups.
var cgroupModes = map[string]cgroup.Version{"": cgroup.Auto, "auto": cgroup.Auto, "v1": cgroup.V1, "v2": cgroup.V2}

// checkCgroupMode tells whether mode is a valid Config.Cgroups.
func checkCgroupMode(mode string) error {
	if _, ok := cgroupModes[mode]; ok || mode == "off" {
		return nil
	}
	return fmt.Errorf("cgroups %q: want auto, v1, v2 or off", mode)
}

// newCgroups makes envd's workload cgroups and sets envd's own
// oom_score_adj (the OOM killer's last pick). Nil when cgroups are off or
// unavailable here: said once, and envd runs without them (no freezing, no
// OOM ends).
func newCgroups(cfg Config, log *slog.Logger) *cgroup.Manager {
	if err := cgroup.SetOOMScoreAdj(0, cgroup.OOMScoreEnvd); err != nil {
		log.Warn("cannot make envd the OOM killer's last pick", "error", err)
	}
	if cfg.Cgroups == "off" {
		log.Info("cgroups off (-cgroups off or -no-cgroups): processes are not placed, /freeze and /unfreeze answer 501")
		return nil
	}
	cg, err := cgroup.New(cgroup.Options{Logger: log, Root: cfg.CgroupTree, FSRoot: cfg.CgroupFSRoot, Version: cgroupModes[cfg.Cgroups]})
	if err != nil {
		if errors.Is(err, cgroup.ErrUnavailable) {
			log.Warn("cgroups unavailable: processes run without them, /freeze and /unfreeze answer 501", "error", err)
		} else {
			log.Warn("cannot make envd's cgroups: processes run without them", "error", err)
		}
		return nil
	}
	log.Info("workload cgroups", "version", cg.Version().String(), "tree", cfg.CgroupTree)
	return cg
}

// jupyterPlace starts the Jupyter server in the jupyter cgroup, with the
// oom_score_adj its kernels inherit. Nil without cgroups: only the score.
func jupyterPlace(cg *cgroup.Manager, log *slog.Logger) func(*exec.Cmd, func() error) error {
	return func(cmd *exec.Cmd, start func() error) error {
		var err error
		if cg != nil {
			err = cg.Group(cgroup.Jupyter).Start(cmd, start)
		} else {
			err = start()
		}
		if err == nil {
			if serr := cgroup.SetOOMScoreAdj(cmd.Process.Pid, cgroup.OOMScoreJupyter); serr != nil {
				log.Debug("cannot set Jupyter's oom_score_adj", "error", serr)
			}
		}
		return err
	}
}

// kernelOOMKills counts the OOM killer's kills in the jupyter cgroup (the
// kernels'). Nil without cgroups, or without a memory controller.
func kernelOOMKills(cg *cgroup.Manager) func() uint64 {
	if cg == nil {
		return nil
	}
	g := cg.Group(cgroup.Jupyter)
	if _, err := g.OOMKills(); err != nil {
		return nil
	}
	return func() uint64 {
		n, _ := g.OOMKills()
		return n
	}
}

// newHooks builds the snapshot hooks.
func newHooks(cfg Config, log *slog.Logger, cg *cgroup.Manager) *httpapi.Hooks {
	w := cfg.FSFreezeWatchdog
	if w <= 0 {
		w = 30 * time.Second
	}
	return httpapi.NewHooks(httpapi.HooksOptions{Logger: log.With("component", "hooks"), Cgroups: cg, FSWatchdog: w})
}
