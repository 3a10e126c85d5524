package daemon

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	hpb "github.com/envd-dev/envd/gen/envd/handover/v1"
	"github.com/envd-dev/envd/internal/interpreter"
	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/jupyter/startup"
	"github.com/envd-dev/envd/internal/reaper"
)

// Code execution across a live upgrade (docs/upgrade.md): the Jupyter
// server, envd's child, keeps running through the exec, and the contexts
// keep their ids and their kernels, so their variables.

// codeHandover is code execution as handOver passes it on.
type codeHandover struct {
	rec    *hpb.Jupyter
	server *jupyter.ServerHandover // nil: no server passed on
}

// handover stops code execution for a live upgrade, leaving the Jupyter
// server running (when it runs: else it is stopped, and the new envd
// starts one), and describes it. nil without code execution.
func (c *codeExec) handover(ctx context.Context) *codeHandover {
	if c.sup == nil {
		return nil
	}
	states, execs := c.eng.Handover(ctx)
	ch := &codeHandover{rec: &hpb.Jupyter{Contexts: contextsToProto(states), Executions: execs}}
	h, ok := c.sup.Handover()
	if !ok {
		c.log.Warn("no running Jupyter server to hand over: the new envd starts one, and the contexts get new kernels")
		if err := c.sup.Stop(ctx); err != nil {
			c.log.Warn("stop jupyter server", "error", err)
		}
		return ch
	}
	ch.server = h
	ch.rec.Server = &hpb.JupyterServer{
		Pid: uint32(h.PID), Url: h.URL, Token: h.Token, Marker: h.Marker,
		RuntimeDir: h.RuntimeDir, OwnsRuntimeDir: h.OwnsDir,
		RuntimeDirFd: int32(h.DirFD), ConfigDirFd: int32(h.ConfigFD), OutputFd: int32(h.OutputFD),
	}
	if c.startup != nil {
		ch.rec.Server.StartupDir = c.startup.Dir
	}
	return ch
}

// checkReaped drops the server from ch if this envd reaped it since it was
// handed over (the reaper is paused: nothing is reaped after this), and
// then stops its kernels.
func (ch *codeHandover) checkReaped(log interface{ Warn(string, ...any) }) {
	if ch == nil || ch.server == nil || reaper.Waiting(ch.server.PID) {
		return
	}
	log.Warn("the Jupyter server exited while being handed over: the new envd starts one", "pid", ch.server.PID)
	jupyter.DiscardHandover(ch.server)
	ch.server, ch.rec.Server = nil, nil
}

// files and fds are what must stay open across the exec.
func (ch *codeHandover) files() ([]*os.File, []int) {
	if ch == nil || ch.server == nil {
		return nil, nil
	}
	return ch.server.Keep, ch.server.FDs()
}

// checkJupyterRecord checks, changing nothing, that the descriptors of the
// server handed over are open.
func checkJupyterRecord(j *hpb.Jupyter) error {
	s := j.GetServer()
	if s == nil {
		return nil
	}
	if s.GetPid() == 0 {
		return fmt.Errorf("jupyter server handed over without a pid")
	}
	for _, fd := range []int32{s.GetRuntimeDirFd(), s.GetConfigDirFd(), s.GetOutputFd()} {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			return fmt.Errorf("jupyter server handed over: descriptor %d: %w", fd, err)
		}
	}
	return nil
}

// adopt takes over the code execution handed over; exited is the server's
// exit (reaper.Adopt), nil when no server was handed over. Called before
// start.
func (c *codeExec) adopt(j *hpb.Jupyter, exited <-chan reaper.Exit) {
	s := j.GetServer()
	if c.sup == nil {
		if s != nil {
			c.log.Warn("stopping the Jupyter server handed over: this envd runs without code execution", "pid", s.GetPid())
			jupyter.DiscardHandover(serverHandover(s))
		}
		return
	}
	c.eng.Adopt(contextsFromProto(j.GetContexts()))
	c.eng.AdoptExecutions(j.GetExecutions())
	if s == nil {
		return
	}
	c.sup.Adopt(&jupyter.Adoption{ServerHandover: *serverHandover(s), Exited: exited})
	if dir := s.GetStartupDir(); dir != "" {
		// The adopted server's kernels use the startup files it was
		// started with: keep them, and remove them at the end.
		if t, err := startup.AdoptTemp(dir); err != nil {
			c.log.Warn("the kernel startup files handed over are not removed at shutdown", "dir", dir, "error", err)
		} else {
			c.handedStartup = t
		}
	}
}

// adopted says what became of the Jupyter server handed over (for GET
// /upgrade): "", "adopting", "adopted" or "restarted: why".
func (c *codeExec) adopted() string {
	if c.sup == nil {
		return ""
	}
	return c.sup.Adopted()
}

func serverHandover(s *hpb.JupyterServer) *jupyter.ServerHandover {
	return &jupyter.ServerHandover{
		PID: int(s.GetPid()), URL: s.GetUrl(), Token: s.GetToken(), Marker: s.GetMarker(),
		RuntimeDir: s.GetRuntimeDir(), OwnsDir: s.GetOwnsRuntimeDir(),
		DirFD: int(s.GetRuntimeDirFd()), ConfigFD: int(s.GetConfigDirFd()), OutputFD: int(s.GetOutputFd()),
	}
}

func contextsToProto(states []interpreter.ContextState) []*hpb.CodeContext {
	out := make([]*hpb.CodeContext, 0, len(states))
	for _, st := range states {
		cc := &hpb.CodeContext{
			Id: st.ID, Language: st.Language, Cwd: st.Cwd, KernelName: st.KernelName, CodeLanguage: st.Code,
			DefaultFor: st.Default, KernelId: st.KernelID, SetUp: st.SetUp, GlobalEnv: st.GlobalEnv,
			Warm: st.Warm, LossReported: st.LossReported, Baseline: st.Baseline, Restarts: int32(st.Restarts),
		}
		for _, n := range st.Notices {
			cc.Notices = append(cc.Notices, &hpb.CodeNotice{Kind: uint32(n.Kind), Text: n.Text, AtUnixNano: n.At.UnixNano()})
		}
		out = append(out, cc)
	}
	return out
}

func contextsFromProto(ccs []*hpb.CodeContext) []interpreter.ContextState {
	out := make([]interpreter.ContextState, 0, len(ccs))
	for _, cc := range ccs {
		st := interpreter.ContextState{
			ID: cc.GetId(), Language: cc.GetLanguage(), Cwd: cc.GetCwd(), KernelName: cc.GetKernelName(), Code: cc.GetCodeLanguage(),
			Default: cc.GetDefaultFor(), KernelID: cc.GetKernelId(), SetUp: cc.GetSetUp(), GlobalEnv: cc.GetGlobalEnv(),
			Warm: cc.GetWarm(), LossReported: cc.GetLossReported(), Baseline: cc.GetBaseline(), Restarts: int(cc.GetRestarts()),
		}
		for _, n := range cc.GetNotices() {
			st.Notices = append(st.Notices, interpreter.Notice{Kind: interpreter.NoticeKind(n.GetKind()), Text: n.GetText(),
				At: time.Unix(0, n.GetAtUnixNano()).UTC()})
		}
		out = append(out, st)
	}
	return out
}
