package portstest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/testutil"
)

// The fake Jupyter server and kernel: helper processes whose sockets are
// laid out as those of envd's Jupyter server and of an ipykernel kernel,
// for the tests of which listeners are private.
const (
	jupyterEnv = "ENVD_PORTS_TEST_JUPYTER" // run as the fake server
	kernelEnv  = "ENVD_PORTS_TEST_KERNEL"  // run as the fake kernel
)

// Jupyter is a fake Jupyter server (a process that listens) and its one
// kernel (its child).
type Jupyter struct {
	ServerPID  int
	ServerPort uint16 // the server's own listener
	Kernel     Kernel

	cmd   *exec.Cmd
	lines <-chan string // what the kernel prints after its facts
}

// Kernel is a fake kernel's listeners, all on 127.0.0.1, each a raw
// socket (no Go netpoller).
type Kernel struct {
	PID int `json:"pid"`
	// Channel is a ZeroMQ channel's port (one the connection file names):
	// in the kernel's channels' poller (an epoll instance), as ZeroMQ's I/O
	// thread has it.
	Channel uint16 `json:"channel"`
	// Pipe is ipykernel's IOPub pipe: in the same poller, named by no file.
	Pipe uint16 `json:"pipe"`
	// Late joins that poller when the kernel gets SIGUSR1 (as a ZeroMQ
	// listener does just after it starts listening): the kernel prints
	// "late" then.
	Late uint16 `json:"late"`
	// Thread is a server code run in the kernel starts in a thread: in no
	// poller.
	Thread uint16 `json:"thread"`
	// OwnPoller is one in a poller of its own (code's asyncio loop, or a
	// ZeroMQ context of its own).
	OwnPoller uint16 `json:"own_poller"`
	// Sub is a server in a subprocess of the kernel, SubPID.
	Sub    uint16 `json:"sub"`
	SubPID int    `json:"sub_pid"`
}

// StartHelper starts the test binary again as a helper process, with env
// (NAME=value) added, which the package's TestMain reads to play its part;
// it dies with the test process (Pdeathsig). It returns the command, which
// the caller ends, and the helper's stdout, a line at a time, closed at its
// end.
func StartHelper(t *testing.T, env string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 8)
	go func() {
		r := bufio.NewReader(out)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				close(lines)
				return
			}
			lines <- strings.TrimSpace(l)
		}
	}()
	return cmd, lines
}

// StartJupyter starts a fake Jupyter server and its kernel, and returns
// once every listener of theirs listens. All are killed, by pid, when the
// test ends.
func StartJupyter(t *testing.T) *Jupyter {
	t.Helper()
	cmd, lines := StartHelper(t, jupyterEnv+"=1")
	j := &Jupyter{ServerPID: cmd.Process.Pid, cmd: cmd, lines: lines}
	t.Cleanup(j.kill)
	port, err := strconv.ParseUint(testutil.RequireReceive(t, j.lines), 10, 16)
	if err != nil {
		t.Fatal("the fake Jupyter server's port:", err)
	}
	j.ServerPort = uint16(port)
	facts := testutil.RequireReceive(t, j.lines)
	if err := json.Unmarshal([]byte(facts), &j.Kernel); err != nil {
		t.Fatalf("the fake kernel's facts %q: %v", facts, err)
	}
	return j
}

// Late has the kernel add its Late listener to its channels' poller, and
// returns once it has.
func (j *Jupyter) Late(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(j.Kernel.PID, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if l := testutil.RequireReceive(t, j.lines); l != "late" {
		t.Fatalf("the fake kernel said %q, want late", l)
	}
}

// kill ends the kernel's subprocess, the kernel and the server, by pid.
func (j *Jupyter) kill() {
	for _, pid := range []int{j.Kernel.SubPID, j.Kernel.PID} {
		if pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if j.cmd.ProcessState == nil {
		j.cmd.Process.Kill()
		j.cmd.Wait()
	}
}

// fakeJupyter is the fake server: it listens, prints its port, starts the
// kernel (which prints its facts on the same output), and waits.
func fakeJupyter() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), kernelEnv+"=1")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	cmd.Wait()
	os.Exit(1)
}

// fakeKernel is the fake kernel: it makes its listeners, starts its
// subprocess server, prints its facts, and waits (for SIGUSR1: Late).
func fakeKernel() {
	must := func(err error) {
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
	}
	listen := func() (int, uint16) {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		must(err)
		must(unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
		must(unix.Listen(fd, 100))
		sa, err := unix.Getsockname(fd)
		must(err)
		return fd, uint16(sa.(*unix.SockaddrInet4).Port)
	}
	poller := func() int {
		ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		must(err)
		return ep
	}
	watch := func(ep, fd int) {
		must(unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}))
	}
	k := Kernel{PID: os.Getpid()}
	channels, own := poller(), poller()
	var fd, late int
	fd, k.Channel = listen()
	watch(channels, fd)
	fd, k.Pipe = listen()
	watch(channels, fd)
	late, k.Late = listen()
	_, k.Thread = listen()
	fd, k.OwnPoller = listen()
	watch(own, fd)

	sub := exec.Command(os.Args[0])
	sub.Env = append(os.Environ(), serveEnv+"=127.0.0.1:0")
	sub.Stderr = os.Stderr
	sub.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := sub.StdoutPipe()
	must(err)
	must(sub.Start())
	l, _ := bufio.NewReader(out).ReadString('\n')
	p, err := strconv.ParseUint(strings.TrimSpace(l), 10, 16)
	must(err)
	k.Sub, k.SubPID = uint16(p), sub.Process.Pid

	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	b, err := json.Marshal(k)
	must(err)
	fmt.Println(string(b))
	go io.Copy(io.Discard, out)
	for {
		select {
		case <-usr1:
			watch(channels, late)
			fmt.Println("late")
		case <-time.After(time.Hour):
		}
	}
}
