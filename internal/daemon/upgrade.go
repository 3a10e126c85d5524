package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	hpb "github.com/envd-dev/envd/gen/envd/handover/v1"
	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/handover"
	"github.com/envd-dev/envd/internal/process"
	"github.com/envd-dev/envd/internal/reaper"
	"github.com/envd-dev/envd/internal/server"
	"github.com/envd-dev/envd/internal/shell"
)

// Live upgrade (docs/upgrade.md): POST /upgrade or SIGUSR2 replaces envd's
// binary in the same pid without stopping the workload. The checks come
// first and change nothing; once they pass, envd stops accepting, cuts the
// requests still open, stops what it does not hand over (port forwards,
// tunnels, package operations), hands over code execution (the Jupyter
// server keeps running), parks the processes, writes the handover record
// and execs the new binary, which adopts the listeners, the processes, the
// Jupyter server with the contexts, and the watchers (adopt, below).

// Grace periods of a handover.
const (
	// upgradeRequestGrace is how long requests in flight get to end by
	// themselves once envd stops accepting; the rest (streams) are cut,
	// and their clients reconnect to the new envd.
	upgradeRequestGrace = time.Second
	// upgradeParkTimeout bounds the wait for the processes' output readers
	// to stop.
	upgradeParkTimeout = 10 * time.Second
)

// maxUpgradeBody bounds POST /upgrade's body.
const maxUpgradeBody = 64 << 10

// upgradeStatus is what GET /upgrade says of the last upgrade.
type upgradeStatus struct {
	At     time.Time `json:"at"`
	Via    string    `json:"via"` // "POST /upgrade", "SIGUSR2", or "" when unknown (after a rollback)
	Path   string    `json:"path,omitempty"`
	From   string    `json:"from,omitempty"`
	To     string    `json:"to,omitempty"`
	Result string    `json:"result"` // upgraded, refused, rolled_back
	Error  string    `json:"error,omitempty"`
	// Jupyter says, after an upgrade, what became of the Jupyter server
	// handed over: "adopting", "adopted", or "restarted: why" (a new
	// server: the contexts got new kernels). Empty: none was handed over.
	Jupyter string `json:"jupyter,omitempty"`
}

// upgradeReq is an upgrade whose checks passed.
type upgradeReq struct {
	bin  *handover.Binary
	info handover.Info
	via  string
}

// upgrader serves /upgrade and SIGUSR2.
type upgrader struct {
	p    *parts
	busy sync.Mutex // held from an upgrade's checks to its exec (TryLock)
	reqs chan upgradeReq

	lastMu sync.Mutex
	last   *upgradeStatus // guarded by lastMu
}

func newUpgrader(p *parts) *upgrader {
	return &upgrader{p: p, reqs: make(chan upgradeReq, 1)}
}

func (u *upgrader) routes() []server.Route {
	return []server.Route{
		{Pattern: "POST /upgrade", Handler: http.HandlerFunc(u.post)},
		{Pattern: "GET /upgrade", Handler: http.HandlerFunc(u.get)},
	}
}

func (u *upgrader) setLast(s upgradeStatus) {
	s.At = time.Now().UTC()
	u.lastMu.Lock()
	u.last = &s
	u.lastMu.Unlock()
}

// get serves GET /upgrade: this envd's version and the last upgrade.
func (u *upgrader) get(w http.ResponseWriter, r *http.Request) {
	u.lastMu.Lock()
	last := u.last
	u.lastMu.Unlock()
	if last != nil && last.Result == "upgraded" {
		cp := *last
		cp.Jupyter = u.p.code.adopted()
		last = &cp
	}
	upgrading := !u.busy.TryLock()
	if !upgrading {
		u.busy.Unlock()
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"version": Version, "pid": os.Getpid(), "upgrading": upgrading, "last": last})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// check opens and checks the binary, and runs its preflight; the caller
// holds u.busy. Once it passed, the snapshot hooks' lock is held (see
// Hooks.HoldForUpgrade) until the exec.
func (u *upgrader) check(ctx context.Context, path, sha string) (upgradeReq, error) {
	// Held from here to the exec: no freeze may start in between.
	release, err := u.p.hooks.HoldForUpgrade()
	if err != nil {
		return upgradeReq{}, &server.StatusError{Status: http.StatusConflict, Msg: err.Error()}
	}
	ok := false
	defer func() {
		if !ok {
			release()
		}
	}()
	bin, err := handover.OpenBinary(path, sha)
	if err != nil {
		status := http.StatusUnprocessableEntity
		if errors.Is(err, handover.ErrInvalid) {
			status = http.StatusBadRequest
		}
		return upgradeReq{}, &server.StatusError{Status: status, Msg: err.Error()}
	}
	info, err := bin.Preflight(ctx, os.Args[1:])
	if err != nil {
		bin.Close()
		status := http.StatusUnprocessableEntity
		if !errors.Is(err, handover.ErrRefused) {
			status = http.StatusInternalServerError
		}
		return upgradeReq{}, &server.StatusError{Status: status, Msg: err.Error()}
	}
	ok = true
	return upgradeReq{bin: bin, info: info}, nil
}

// post serves POST /upgrade: {"path": "/abs/envd", "sha256": "hex"}. It
// answers 202 once the new binary passed its checks, before the exec; the
// caller then watches GET /health's X-Envd-Version (or GET /upgrade).
func (u *upgrader) post(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Path   string `json:"path"`
		SHA256 string `json:"sha256"`
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxUpgradeBody))
	if err != nil {
		server.WriteError(w, http.StatusBadRequest, fmt.Sprintf("read /upgrade body: %v", err))
		return
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		server.WriteError(w, http.StatusBadRequest, fmt.Sprintf(`invalid /upgrade body: %v: want {"path": "/absolute/path/to/envd", "sha256": "optional hex"}`, err))
		return
	}
	if !u.busy.TryLock() {
		server.WriteError(w, http.StatusConflict, "an upgrade is already in progress")
		return
	}
	req, err := u.check(r.Context(), body.Path, body.SHA256)
	if err != nil {
		u.busy.Unlock()
		u.setLast(upgradeStatus{Via: "POST /upgrade", Path: body.Path, From: Version, Result: "refused", Error: err.Error()})
		var se *server.StatusError
		if errors.As(err, &se) {
			server.WriteError(w, se.Status, se.Msg)
		} else {
			server.WriteError(w, http.StatusInternalServerError, err.Error())
		}
		return
	}
	req.via = "POST /upgrade"
	u.p.log.Info("upgrade accepted", "path", req.bin.Path, "sha256", req.bin.SHA256, "from", Version, "to", req.info.Version)
	writeJSON(w, http.StatusAccepted, map[string]any{"from": Version, "to": req.info.Version, "sha256": req.bin.SHA256, "pid": os.Getpid()})
	u.reqs <- req // u.busy stays held: the handover releases it never, or on failure
}

// fromSignal is SIGUSR2: upgrade to the binary at envd's own path, as it
// is on disk now. Refusals are logged (and in GET /upgrade).
func (u *upgrader) fromSignal() {
	path, err := os.Executable()
	if err != nil {
		u.p.log.Error("SIGUSR2: cannot find envd's own path; no upgrade", "error", err)
		return
	}
	if !u.busy.TryLock() {
		u.p.log.Warn("SIGUSR2: an upgrade is already in progress")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), handover.PreflightTimeout)
	defer cancel()
	req, err := u.check(ctx, path, "")
	if err != nil {
		u.busy.Unlock()
		u.setLast(upgradeStatus{Via: "SIGUSR2", Path: path, From: Version, Result: "refused", Error: err.Error()})
		u.p.log.Error("SIGUSR2: upgrade refused; envd serves on unchanged", "path", path, "error", err)
		return
	}
	req.via = "SIGUSR2"
	u.p.log.Info("upgrade accepted", "via", "SIGUSR2", "path", path, "sha256", req.bin.SHA256, "from", Version, "to", req.info.Version)
	u.reqs <- req
}

// notifyUpgrades calls fromSignal on each SIGUSR2 until stop is called.
func (u *upgrader) notifyUpgrades() (stop func()) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGUSR2)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-c:
				u.fromSignal()
			case <-done:
				return
			}
		}
	}()
	return func() { signal.Stop(c); close(done) }
}

// handOver replaces envd with req's binary. It returns only if neither the
// new binary nor, after it, envd's own could be exec'd.
func (p *parts) handOver(s *serving, req upgradeReq) error {
	log := p.log
	log.Info("upgrading: handing over to the new envd", "to", req.info.Version, "via", req.via)
	s.stopAccepting()
	graceCtx, cancel := context.WithTimeout(context.Background(), upgradeRequestGrace)
	var wg sync.WaitGroup
	for _, srv := range s.srvs {
		srv.SetKeepAlivesEnabled(false)
		wg.Go(func() { srv.Shutdown(graceCtx) })
	}
	wg.Wait()
	cancel()
	s.cancelRequests()
	for _, srv := range s.srvs {
		srv.Close()
	}
	s.g.Wait()

	// Not handed over yet: stopped, the new envd starts them afresh.
	closePackages(p.pkgs, log)
	p.ports.stop()
	p.tunls.Close()
	stopCtx, cancel := context.WithTimeout(context.Background(), p.cfg.ShutdownGrace)
	code := p.code.handover(stopCtx)
	cancel()
	watchers := watchersToProto(p.files.HandoverWatchers())
	p.files.Close()
	p.boot.stop()

	reaper.Pause()
	parkCtx, cancel := context.WithTimeout(context.Background(), upgradeParkTimeout)
	if err := p.procs.Park(parkCtx); err != nil {
		log.Warn("handing over processes whose output did not stop: a chunk being read may be lost", "error", err)
	}
	if err := p.shell.Park(parkCtx); err != nil {
		log.Warn("handing over shell sessions that did not stop reading their shells' output", "error", err)
	}
	cancel()
	code.checkReaped(log)

	rec, files, fds := p.record(s)
	rec.Watchers = watchers
	if code != nil {
		rec.Jupyter = code.rec
		cf, cfds := code.files()
		files, fds = append(files, cf...), append(fds, cfds...)
	}
	exe, err := unix.Open("/proc/self/exe", unix.O_RDONLY, 0) // no O_CLOEXEC: the new envd keeps it
	if err != nil {
		return fmt.Errorf("upgrade: open envd's own binary: %w", err)
	}
	rec.OldExecutableFd = int32(exe)
	mem, err := handover.Write(rec)
	if err != nil {
		return fmt.Errorf("upgrade: %w", err)
	}
	memFD := handover.FD(mem)
	if err := handover.SetInherit(append(fds, memFD, exe), true); err != nil {
		return fmt.Errorf("upgrade: keep descriptors open across the exec: %w", err)
	}
	env := handover.Env(os.Environ(), memFD, exe)
	log.Info("exec'ing the new envd", "path", req.bin.Path, "processes", len(rec.GetProcesses()), "ended", len(rec.GetEnded()), "listeners", len(rec.GetListeners()))
	err = handover.Exec(req.bin.FD(), os.Args, env)
	// Still here: the exec failed. Exec this binary back, with the record.
	log.Error("cannot exec the new envd: exec'ing this one back", "error", err)
	env = append(env, handover.EnvRollback+"=exec "+req.bin.Path+": "+err.Error())
	err2 := handover.Exec(exe, os.Args, env)
	runtime.KeepAlive(files)
	runtime.KeepAlive(mem)
	return fmt.Errorf("upgrade: %v; and exec'ing envd back: %v", err, err2)
}

// record is the handover record of everything handed over; files are the
// listeners' descriptors (keep them referenced until the exec), fds every
// descriptor the record names.
func (p *parts) record(s *serving) (rec *hpb.Handover, files []*os.File, fds []int) {
	rec = &hpb.Handover{Schema: handover.Schema, FromVersion: Version, WrittenUnixNano: time.Now().UnixNano()}
	for _, l := range s.lns {
		f, network, err := l.file()
		if err != nil {
			p.log.Warn("a listener is not handed over: the new envd listens anew", "addr", l.Addr().String(), "error", err)
			continue
		}
		files = append(files, f)
		fd := handover.FD(f)
		fds = append(fds, fd)
		rec.Listeners = append(rec.Listeners, &hpb.Listener{Fd: int32(fd), Role: l.role, Addr: l.Addr().String(), Network: network})
	}
	st := p.defs.State()
	rec.Settings = &hpb.Settings{AccessToken: p.token.Get(), DefaultUser: st.User, DefaultWorkdir: st.Workdir, InitEnv: st.Env, HostEnv: st.HostEnv}
	live, ended, pfds := processesToProto(p.procs.Snapshot(handover.FD))
	rec.Processes, rec.Ended = live, ended
	shells, shellDir, sfds := shellsToProto(p.shell.Snapshot(handover.FD))
	rec.Shells, rec.ShellDir = shells, shellDir
	return rec, files, append(append(fds, pfds...), sfds...)
}

// handoverListener is a listener that can stop accepting without closing
// its socket, which a handover passes on.
type handoverListener struct {
	net.Listener
	role     hpb.Listener_Role
	stopping atomic.Bool
}

var errHandedOver = errors.New("listener handed over to the new envd")

func (l *handoverListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil && l.stopping.Load() {
		return nil, errHandedOver
	}
	return c, err
}

// Close closes the socket, but not once it is being handed over.
func (l *handoverListener) Close() error {
	if l.stopping.Load() {
		return nil
	}
	return l.Listener.Close()
}

// stop makes Accept return errHandedOver.
func (l *handoverListener) stop() {
	l.stopping.Store(true)
	if d, ok := l.Listener.(interface{ SetDeadline(time.Time) error }); ok {
		d.SetDeadline(time.Now())
	}
}

// file is a descriptor of the socket (a dup, close-on-exec).
func (l *handoverListener) file() (*os.File, string, error) {
	switch ln := l.Listener.(type) {
	case *net.TCPListener:
		f, err := ln.File()
		return f, "tcp", err
	case *net.UnixListener:
		f, err := ln.File()
		return f, "unix", err
	case *vsockListener:
		f, err := ln.file()
		return f, "vsock", err
	}
	return nil, "", fmt.Errorf("a %T cannot be handed over (TCP, unix and vsock sockets can)", l.Listener)
}

func (s *serving) stopAccepting() {
	for _, l := range s.lns {
		l.stop()
	}
}

// inherited are the listeners a handover passed on, by what they serve.
type inherited struct {
	mu  sync.Mutex
	lns map[string]net.Listener // "main/tcp", "main/unix", "main/vsock", "code/tcp"
}

func (i *inherited) take(key string) net.Listener {
	if i == nil {
		return nil
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	ln := i.lns[key]
	delete(i.lns, key)
	return ln
}

// closeRest closes what no listen took (the flags changed).
func (i *inherited) closeRest() {
	if i == nil {
		return
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	for k, ln := range i.lns {
		ln.Close()
		delete(i.lns, k)
	}
}

func listenerKey(role hpb.Listener_Role, network string) string {
	r := "main"
	if role == hpb.Listener_ROLE_CODE {
		r = "code"
	}
	return r + "/" + network
}

// adopt takes over what the handover record hands: settings, listeners and
// processes. It checks everything first; an error (or a panic) before its
// commit leaves the record untouched for a rollback. It enables the reaper.
func (p *parts) adopt(ho *handover.Pending) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic while adopting the handover: %v", r)
		}
	}()
	handover.TestFailAdopt()
	rec := ho.Record
	inh := &inherited{lns: map[string]net.Listener{}}
	for _, l := range rec.GetListeners() {
		dup, err := unix.FcntlInt(uintptr(l.GetFd()), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			inh.closeRest()
			return fmt.Errorf("listener %s (fd %d): %w", l.GetAddr(), l.GetFd(), err)
		}
		f := os.NewFile(uintptr(dup), l.GetAddr())
		var ln net.Listener
		if l.GetNetwork() == "vsock" {
			ln, err = vsockFromFile(f) // takes f
		} else {
			ln, err = net.FileListener(f)
			f.Close()
		}
		if err != nil {
			inh.closeRest()
			return fmt.Errorf("listener %s (fd %d): %w", l.GetAddr(), l.GetFd(), err)
		}
		inh.lns[listenerKey(l.GetRole(), l.GetNetwork())] = ln
	}
	procs, err := processesFromProto(rec.GetProcesses(), rec.GetEnded())
	var adoption *process.Adoption
	if err == nil {
		adoption, err = p.procs.PrepareAdopt(procs)
	}
	var shells shell.Snapshot
	if err == nil {
		shells, err = shellsFromProto(rec)
	}
	var shellAdoption *shell.Adoption
	if err == nil {
		shellAdoption, err = p.shell.PrepareAdopt(shells)
	}
	if err == nil {
		err = checkJupyterRecord(rec.GetJupyter())
	}
	if err != nil {
		inh.closeRest()
		return err
	}
	// Commit: nothing below fails.
	p.cfg.inherited = inh
	st := rec.GetSettings()
	p.token.Set(st.GetAccessToken())
	p.defs.Restore(defaults.State{User: st.GetDefaultUser(), Workdir: st.GetDefaultWorkdir(), Env: st.GetInitEnv(), HostEnv: st.GetHostEnv()})
	exits := map[int]<-chan reaper.Exit{}
	for _, pid := range adoption.Running() {
		exits[pid] = reaper.Adopt(pid)
	}
	var jupyterExit <-chan reaper.Exit
	if s := rec.GetJupyter().GetServer(); s != nil {
		jupyterExit = reaper.Adopt(int(s.GetPid()))
	}
	if err := reaper.Enable(p.log); err != nil {
		p.log.Warn("cannot reap orphans", "error", err)
	}
	adoption.Commit(exits)
	shellAdoption.Commit(p.procs)
	if rec.GetJupyter() != nil {
		p.code.adopt(rec.GetJupyter(), jupyterExit)
	}
	p.files.AdoptWatchers(watchersFromProto(rec.GetWatchers()))
	for _, l := range rec.GetListeners() {
		unix.Close(int(l.GetFd()))
	}
	ho.Commit()
	p.upg.setLast(upgradeStatus{From: rec.GetFromVersion(), To: Version, Result: "upgraded"})
	p.log.Info("adopted the handover", "from", rec.GetFromVersion(), "processes", len(rec.GetProcesses()), "ended", len(rec.GetEnded()), "listeners", len(rec.GetListeners()),
		"shell_sessions", len(rec.GetShells()),
		"contexts", len(rec.GetJupyter().GetContexts()), "jupyter_server", rec.GetJupyter().GetServer().GetPid(), "watchers", len(rec.GetWatchers()))
	if ho.RolledBack != "" {
		p.upg.setLast(upgradeStatus{From: Version, Result: "rolled_back", Error: ho.RolledBack})
		p.log.Error("the upgrade failed: this envd took its workload back", "error", ho.RolledBack)
	}
	return nil
}
