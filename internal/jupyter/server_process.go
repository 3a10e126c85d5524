package jupyter

import (
	"crypto/rand"
	_ "embed" // for serverConfigPy
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/envd-dev/envd/internal/reaper"
	"golang.org/x/sys/unix"
)

// serverConfigPy turns TCP_NODELAY on for kernel WebSockets: without it an
// execute round trip waits on Nagle's algorithm meeting a delayed ACK.
// Written to our JUPYTER_CONFIG_DIR.
//
//go:embed jupyter_server_config.py
var serverConfigPy []byte

// serverHooksPy dumps the server's Python stacks on SIGQUIT and stops the
// server (and, if it is stuck, kills its run) when envd is gone. Written to
// our JUPYTER_CONFIG_DIR, before serverConfigPy.
//
//go:embed server_hooks.py
var serverHooksPy []byte

// kernelExitPy adds to the "restarting" status a dead kernel's WebSockets
// get how its process ended (KernelStatus.Exit), and opens the WebSockets
// of a kernel that died before answering its first kernel_info_request
// once it is restarted (or given up on), instead of after the server's
// 60 s kernel_info_timeout. Written to our JUPYTER_CONFIG_DIR, after
// serverConfigPy.
//
//go:embed kernel_exit.py
var kernelExitPy []byte

// kernelGroupsPy makes the server signal a kernel's process group by its
// number only while the kernel is unreaped (its pid holds the number), and
// after that only the members that were there before: never a group that
// took the number since. Written after serverHooksPy (whose pidfd walk it
// uses) and kernelExitPy; earlyKernelPy and zygoteLaunchPy use it.
//
//go:embed kernel_groups.py
var kernelGroupsPy []byte

// earlyBootPy runs the server (in place of python3 -m jupyter_server),
// first launching the kernel envd will ask for first, so that the two
// start side by side; earlyKernelPy, in the server's config, hands that
// kernel over when it is asked for. Written to our JUPYTER_CONFIG_DIR.
//
//go:embed early_boot.py
var earlyBootPy []byte

//go:embed early_kernel.py
var earlyKernelPy []byte

// kernelPortsPy picks kernels' ports outside the system's ephemeral range,
// where no connect() or bind to port 0 takes them between the pick and the
// kernel's bind (or its restart's). Written ahead of earlyBootPy and
// earlyKernelPy, which use it.
//
//go:embed kernel_ports.py
var kernelPortsPy []byte

// zygotePy is the zygote kernels are forked from (Options.Zygote), and
// zygoteLaunchPy, in the server's config after earlyKernelPy, asks it for
// kernels. Written to our JUPYTER_CONFIG_DIR.
//
//go:embed zygote.py
var zygotePy []byte

//go:embed zygote_launch.py
var zygoteLaunchPy []byte

// zygoteStartPy starts a zygote: written ahead of earlyBootPy, which starts
// the early kernel's zygote in its place, and of zygoteLaunchPy.
//
//go:embed zygote_start.py
var zygoteStartPy []byte

// Names of the early kernel's files in the config directory.
const (
	earlyBootFile    = "envd_jupyter_server.py"
	earlyRequestFile = "envd_early_kernel.json"
	zygoteFile       = "envd_zygote.py"
	zygoteConfigFile = "envd_zygote.json"
)

// earlyDiscard is how long an early kernel waits to be asked for before
// the server discards it. A variable for tests.
var earlyDiscard = 60 * time.Second

// parentKey names the environment variable holding envd's pid: the
// server's parent, which serverHooksPy watches (an upgrade keeps the pid).
const parentKey = "ENVD_JUPYTER_PARENT"

// markerKey names the environment variable that tags every process of one
// server run (the server, its kernels and their children), so that they can
// be found and killed even after the server is gone; see sweep.
const markerKey = "ENVD_JUPYTER_RUN"

// serverRun is one server process.
type serverRun struct {
	cmd     *exec.Cmd
	pid     int
	marker  string        // "ENVD_JUPYTER_RUN=<random>"
	exited  chan struct{} // closed once the process is reaped
	waitErr error         // valid after exited; nil for exit status 0, else says how it ended
	out     *tailBuffer   // the server's and its kernels' stdout/stderr
	outR    *os.File      // read end of their output pipe
	outDone chan struct{} // closed when the output reader returns
}

// spawn starts the server process.
func (s *Supervisor) spawn(port int) (*serverRun, error) {
	argv := append([]string{}, s.opts.Command...)
	if n := len(argv); n >= 3 && argv[n-2] == "-m" && argv[n-1] == "jupyter_server" {
		// The same server, run through the boot file that launches the
		// early kernel first (a no-op without its request).
		argv = append(argv[:n-2], filepath.Join(s.runtimeDir, "config", earlyBootFile))
	}
	argv = append(argv,
		"--ServerApp.ip=127.0.0.1",
		"--ServerApp.port="+strconv.Itoa(port),
		"--ServerApp.port_retries=0",
		"--ServerApp.allow_root=True",
		"--ServerApp.open_browser=False",
		"--ServerApp.root_dir=/",
		// Without this a 50 MB print arrives as one "IOPub data rate
		// exceeded" notice; output caps are the daemon's job.
		"--ServerApp.limit_rate=False",
		// Notice a dead kernel in ~0.5 s instead of 3 s.
		"--KernelRestarter.time_to_dead=0.5",
		// The default (5 quick deaths) removes the kernel for good.
		"--KernelRestarter.restart_limit=100",
	)
	argv = append(argv, s.opts.Args...)
	// The token is in the config file, not in argv: /proc/pid/cmdline is
	// world-readable.

	run := &serverRun{
		marker:  markerKey + "=" + randomHex(12),
		exited:  make(chan struct{}),
		out:     newTailBuffer(s.opts.LogTailBytes),
		outDone: make(chan struct{}),
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = s.env(run.marker)
	cmd.Dir = "/"
	var cred *syscall.Credential
	if u := s.opts.RunAs; u != nil {
		cred = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}
		if u.Home != "" {
			if fi, err := os.Stat(u.Home); err == nil && fi.IsDir() {
				cmd.Dir = u.Home
			}
		}
	} else if home, err := os.UserHomeDir(); err == nil {
		cmd.Dir = home
	}
	cmd.SysProcAttr = sysProcAttr(cred)
	// Our own pipe rather than an io.Writer: exec would then make Wait wait
	// for every holder of the pipe, and kernels inherit it.
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = w, w
	run.cmd, run.outR = cmd, r

	// Start and wait through the reaper, which reaps every child of envd
	// (nobody else may wait, or the reap loop and Wait steal each other's
	// status).
	started := make(chan error, 1)
	go func() {
		var exitc <-chan reaper.Exit
		start := func() error {
			var err error
			exitc, err = reaper.Start(cmd)
			return err
		}
		var err error
		if s.opts.Place != nil {
			err = s.opts.Place(cmd, start)
		} else {
			err = start()
		}
		if err != nil {
			started <- err
			return
		}
		started <- nil
		if ex := <-exitc; ex.Code() != 0 {
			run.waitErr = errors.New(ex.String())
		}
		close(run.exited)
	}()
	err = <-started
	_ = w.Close()
	if err != nil {
		_ = r.Close()
		return nil, err
	}
	run.pid = cmd.Process.Pid
	go func() {
		defer close(run.outDone)
		_, _ = io.Copy(run.out, r)
	}()
	return run, nil
}

// env builds the server's clean environment: nothing of envd's leaks into
// kernels (a pyenv PATH made `!pip` use the wrong pip).
func (s *Supervisor) env(marker string) []string {
	home := "/"
	if u := s.opts.RunAs; u != nil {
		if u.Home != "" {
			home = u.Home
		}
	} else if h, err := os.UserHomeDir(); err == nil {
		home = h
	}
	env := []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + home,
		"LANG=C.UTF-8",
		"JUPYTER_CONFIG_DIR=" + filepath.Join(s.runtimeDir, "config"),
		"JUPYTER_RUNTIME_DIR=" + filepath.Join(s.runtimeDir, "runtime"),
		// Silences debugpy's "frozen modules" warning in every kernel.
		"PYDEVD_DISABLE_FILE_VALIDATION=1",
		// No MPLBACKEND: ipykernel selects the inline backend only when it is
		// unset, and Agg would lose every plot's image/png.
		marker,
		parentKey + "=" + strconv.Itoa(os.Getpid()),
	}
	if u := s.opts.RunAs; u != nil && u.Name != "" {
		env = append(env, "USER="+u.Name, "LOGNAME="+u.Name)
	}
	return append(env, s.opts.Env...) // exec keeps the last of duplicate keys
}

// writeConfig writes the server's config files: the TCP_NODELAY patch and
// the token, which only envd and RunAs (by its group) can read; see
// rundir.go.
func (s *Supervisor) writeConfig(token string) error {
	cfg := s.dirs.config
	py := append([]byte{}, serverHooksPy...)
	if !s.opts.DisableLatencyFixes {
		py = append(py, serverConfigPy...)
	}
	py = append(py, kernelExitPy...)
	py = append(py, kernelGroupsPy...)
	py = append(py, kernelPortsPy...)
	py = append(py, earlyKernelPy...)
	py = append(py, zygoteStartPy...)
	py = append(py, zygoteLaunchPy...)
	if err := writeFileAt(cfg, "jupyter_server_config.py", py, 0o644, -1); err != nil {
		return err
	}
	boot := append(append(append([]byte{}, kernelPortsPy...), zygoteStartPy...), earlyBootPy...)
	if err := writeFileAt(cfg, earlyBootFile, boot, 0o644, -1); err != nil {
		return err
	}
	if err := s.writeEarlyRequest(); err != nil {
		return err
	}
	if err := s.writeZygoteConfig(); err != nil {
		return err
	}
	js, err := json.Marshal(map[string]any{"ServerApp": map[string]any{
		"token": token,
		// No WebSocket pings: the server closes a kernel's WebSocket when a
		// pong comes 90 s late, and a pong queues behind all the output the
		// server has buffered for us (its buffer is unbounded): a large
		// print read at a loaded machine's pace cut the connection, and
		// the running code's outcome was lost. The server is on loopback;
		// envd learns of dead kernels and servers its own ways.
		"tornado_settings": map[string]any{"ws_ping_interval": 0},
	}})
	if err != nil {
		return err
	}
	mode, gid := uint32(0o600), -1
	if u := s.opts.RunAs; u != nil {
		mode, gid = 0o640, int(u.GID)
	}
	return writeFileAt(cfg, "jupyter_server_config.json", js, mode, gid)
}

// writeEarlyRequest asks the next server run for an early kernel, if
// EarlyKernel names one, or takes back an earlier run's request.
func (s *Supervisor) writeEarlyRequest() error {
	var name, dir string
	if s.opts.EarlyKernel != nil {
		name, dir = s.opts.EarlyKernel()
	}
	if name == "" || !filepath.IsAbs(dir) {
		if err := unix.Unlinkat(int(s.dirs.config.Fd()), earlyRequestFile, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("jupyter: remove %s: %w", earlyRequestFile, err)
		}
		return nil
	}
	js, err := json.Marshal(map[string]any{"name": name, "cwd": filepath.Clean(dir), "discard_after": earlyDiscard.Seconds()})
	if err != nil {
		return err
	}
	return writeFileAt(s.dirs.config, earlyRequestFile, js, 0o644, -1)
}

// writeZygoteConfig writes the zygote and its config for the next server
// run if Options.Zygote is set, or takes back an earlier run's config.
func (s *Supervisor) writeZygoteConfig() error {
	z := s.opts.Zygote
	if z == nil || len(z.Kernels) == 0 {
		if err := unix.Unlinkat(int(s.dirs.config.Fd()), zygoteConfigFile, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("jupyter: remove %s: %w", zygoteConfigFile, err)
		}
		return nil
	}
	if err := writeFileAt(s.dirs.config, zygoteFile, zygotePy, 0o644, -1); err != nil {
		return err
	}
	js, err := json.Marshal(map[string]any{"kernels": z.Kernels, "preload": z.Preload})
	if err != nil {
		return err
	}
	return writeFileAt(s.dirs.config, zygoteConfigFile, js, 0o644, -1)
}

// stopRun stops a server process and everything it started. graceful sends
// SIGTERM first and waits up to StopGrace (or until Stop's ctx is done).
//
// The group is signalled only while the server has not been reaped, so its
// pid (the pgid) cannot have been reused. Whatever outlives it is found by
// the run's marker (sweep).
func (s *Supervisor) stopRun(run *serverRun, graceful bool) {
	alive := func() bool {
		select {
		case <-run.exited:
			return false
		default:
			return true
		}
	}
	if graceful && alive() {
		_ = syscall.Kill(-run.pid, syscall.SIGTERM)
		t := time.NewTimer(s.opts.StopGrace)
		select {
		case <-run.exited:
		case <-t.C:
			s.log.Warn("jupyter server ignored SIGTERM, killing it", "pid", run.pid)
		case <-s.killNow:
		}
		t.Stop()
	}
	if alive() {
		_ = syscall.Kill(-run.pid, syscall.SIGKILL)
	}
	<-run.exited
	sweep(run.marker)
	s.finishOutput(run)
}

// finishOutput waits briefly for the output reader to drain, then closes
// the pipe under it: a process that escaped the sweep (one that cleared its
// environment) may still hold the write end.
func (s *Supervisor) finishOutput(run *serverRun) {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-run.outDone:
	case <-t.C:
	}
	_ = run.outR.Close()
	<-run.outDone
}

// exitDesc says how the server ended: "exit status 1", "signal: killed".
func exitDesc(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// freePort asks the kernel for a free loopback port. Another process could
// take it before the server binds; the server then fails and is retried on
// a new port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("jupyter: pick a port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails on Linux
	return hex.EncodeToString(b)
}
