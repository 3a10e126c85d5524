package jupyter

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/envd-dev/envd/internal/handover"
	"github.com/envd-dev/envd/internal/reaper"
)

// A live upgrade (internal/handover, docs/upgrade.md) execs a new envd in
// envd's pid. The Jupyter server is envd's child and stays one: the old
// envd stops supervising it without stopping it (Handover) and passes on
// what the new one needs to supervise it again (ServerHandover): its pid,
// address and token, its runtime directory and the read end of its output
// pipe, both kept open across the exec. The new envd adopts it (Adopt,
// then Start): it health-checks it and publishes it as its first
// generation, so the kernels and their state live on; a server found dead
// or unhealthy is stopped (its kernels swept) and a new one started, as
// after a crash.

// ServerHandover is a running server handed to the envd that replaces this
// one.
type ServerHandover struct {
	PID        int
	URL, Token string
	// Marker is the environment entry of the server's run (see sweep).
	Marker string
	// RuntimeDir is the runtime directory; OwnsDir: a temporary one of
	// envd's, removed by Stop.
	RuntimeDir string
	OwnsDir    bool
	// Descriptors of the runtime directory (flocked when owned), of its
	// config subdirectory and of the read end of the server's output.
	DirFD, ConfigFD, OutputFD int
	// Keep are the files behind the descriptors: keep them referenced
	// until the exec, or the garbage collector closes them.
	Keep []*os.File
}

// FDs lists the descriptors h names.
func (h *ServerHandover) FDs() []int { return []int{h.DirFD, h.ConfigFD, h.OutputFD} }

// Adoption is a server handed over by the envd before this one.
type Adoption struct {
	ServerHandover
	// Exited receives the server's exit (reaper.Adopt).
	Exited <-chan reaper.Exit
}

// adoptState is what became of an Adoption.
type adoptState struct {
	tried, done bool
	err         error
}

// Handover stops supervising the server without stopping it and returns
// it, for the envd exec'd next; the supervisor is then stopped (Stop must
// not be called). It returns false, changing nothing, when there is no
// healthy server of ours to hand over (an external one, one starting or
// restarting): the caller stops the supervisor as usual.
func (s *Supervisor) Handover() (*ServerHandover, bool) {
	s.mu.Lock()
	if !s.started || s.stopping || s.opts.URL != "" || s.live == nil || s.status.State != ServerReady {
		s.mu.Unlock()
		return nil, false
	}
	h := &ServerHandover{URL: s.status.URL, Token: s.token, RuntimeDir: s.runtimeDir, OwnsDir: s.ownsDir}
	s.handing = true
	s.mu.Unlock()
	s.cancel()
	<-s.done
	s.mu.Lock()
	run := s.handedTo
	s.handing = false
	if run != nil {
		s.stopping = true
	}
	s.mu.Unlock()
	if run == nil {
		return nil, false // it exited meanwhile
	}
	// Its output waits in the pipe for the new envd.
	_ = run.outR.SetReadDeadline(time.Now())
	<-run.outDone
	h.PID, h.Marker = run.pid, run.marker
	h.DirFD, h.ConfigFD, h.OutputFD = int(s.dirs.top.Fd()), int(s.dirs.config.Fd()), handover.FD(run.outR)
	h.Keep = []*os.File{s.dirs.top, s.dirs.config, run.outR}
	s.dropClient()
	s.log.Info("jupyter server handed over, running", "pid", h.PID, "url", h.URL)
	return h, true
}

// leaveRunning tells the supervision loop, stopped by Handover, to leave
// run running.
func (s *Supervisor) leaveRunning(run *serverRun) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.handing {
		return false
	}
	select {
	case <-run.exited:
		return false
	default:
	}
	s.handedTo, s.live = run, nil
	return true
}

// Adopt makes Start take over a server handed over rather than start one.
// Call it before Start; the supervisor owns a's descriptors from then on.
func (s *Supervisor) Adopt(a *Adoption) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.adopt = a
}

// Adopted says what became of the server Adopt gave: "" when there was
// none, "adopting" until it is known, "adopted", or why a new server was
// started instead.
func (s *Supervisor) Adopted() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.adopted
	switch {
	case !a.tried && s.adopt == nil:
		return ""
	case !a.done:
		return "adopting"
	case a.err != nil:
		return "restarted: " + a.err.Error()
	}
	return "adopted"
}

// prepareOrAdoptDir is prepareDir, or takes the runtime directory of the
// server to adopt.
func (s *Supervisor) prepareOrAdoptDir() error {
	s.mu.Lock()
	a := s.adopt
	s.mu.Unlock()
	if a == nil {
		return s.prepareDir()
	}
	s.runtimeDir, s.ownsDir = a.RuntimeDir, a.OwnsDir
	s.dirs.top = os.NewFile(uintptr(a.DirFD), a.RuntimeDir)
	s.dirs.config = os.NewFile(uintptr(a.ConfigFD), filepath.Join(a.RuntimeDir, "config"))
	return nil
}

// takeAdoption returns the server to adopt, once.
func (s *Supervisor) takeAdoption() *Adoption {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.adopt
	s.adopt = nil
	if a != nil {
		s.adopted.tried = true
	}
	return a
}

// adoptDone records and logs what became of the adoption.
func (s *Supervisor) adoptDone(err error) {
	s.mu.Lock()
	s.adopted.done, s.adopted.err = true, err
	s.mu.Unlock()
	if err != nil {
		s.log.Warn("the Jupyter server handed over is not usable; starting a new one (the contexts get new kernels)", "error", err)
		return
	}
	s.log.Info("adopted the Jupyter server handed over, with its kernels")
}

// adoptRun takes over a server handed over: its exit, its output, and a
// health check. On failure the server and its kernels are stopped.
func (s *Supervisor) adoptRun(a *Adoption) (*serverRun, *Client, error) {
	run := &serverRun{
		pid:     a.PID,
		marker:  a.Marker,
		exited:  make(chan struct{}),
		out:     newTailBuffer(s.opts.LogTailBytes),
		outR:    os.NewFile(uintptr(a.OutputFD), "jupyter-output"),
		outDone: make(chan struct{}),
	}
	go func() {
		if ex := <-a.Exited; ex.Code() != 0 {
			run.waitErr = errors.New(ex.String())
		}
		close(run.exited)
	}()
	go func() {
		defer close(run.outDone)
		_, _ = io.Copy(run.out, run.outR)
	}()
	client, err := NewClient(a.URL, a.Token, s.clientOptions())
	if err == nil {
		err = s.waitHealthy(client, run)
		if err != nil {
			client.Close()
		}
	}
	if err != nil {
		s.stopRun(run, false)
		s.logTail(run, tailLines)
		return nil, nil, fmt.Errorf("jupyter: the server handed over (pid %d): %w", a.PID, err)
	}
	return run, client, nil
}

// DiscardHandover stops a server handed over that this envd does not
// supervise (it runs without code execution): SIGKILL to its group and
// its kernels, and its descriptors closed.
func DiscardHandover(h *ServerHandover) {
	_ = syscall.Kill(-h.PID, syscall.SIGKILL)
	sweep(h.Marker)
	for _, fd := range h.FDs() {
		_ = syscall.Close(fd)
	}
}
