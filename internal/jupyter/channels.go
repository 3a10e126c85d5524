package jupyter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// maxConnectionFile bounds what KernelChannels reads of a connection file
// (a few hundred bytes when Jupyter writes it) and of a command line.
const maxConnectionFile = 64 << 10

// KernelChannels returns the ports of the ZeroMQ channels (shell, iopub,
// stdin, control, heartbeat) of process pid when it is a kernel of this
// server: its command line names a connection file in the server's runtime
// directory. Otherwise, or when that cannot be read, it returns nil. These
// ports are the server's private line to its kernel, not the workload's:
// the ports monitor must not forward them.
func (s *Supervisor) KernelChannels(pid int) []uint16 {
	s.mu.Lock()
	dir := s.connDir
	s.mu.Unlock()
	if dir == "" {
		return nil
	}
	cmdline, err := readBounded(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil
	}
	for arg := range strings.SplitSeq(string(cmdline), "\x00") {
		name := strings.TrimPrefix(arg, "--f=")
		if filepath.Dir(name) != dir || !strings.HasPrefix(filepath.Base(name), "kernel-") || filepath.Ext(name) != ".json" {
			continue
		}
		if ports := connectionPorts(name); ports != nil {
			return ports
		}
	}
	return nil
}

// connectionPorts reads the channel ports of a connection file, never
// following a link and never blocking on a FIFO planted in its place.
func connectionPorts(name string) []uint16 {
	b, err := readBounded(name)
	if err != nil {
		return nil
	}
	var info map[string]any
	if json.Unmarshal(b, &info) != nil {
		return nil
	}
	var ports []uint16
	for _, key := range []string{"shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"} {
		f, ok := info[key].(float64)
		if !ok {
			continue
		}
		if p, err := strconv.ParseUint(strconv.FormatFloat(f, 'f', -1, 64), 10, 16); err == nil && p != 0 {
			ports = append(ports, uint16(p))
		}
	}
	return ports
}

// readBounded reads a regular file (or a procfs one) up to
// maxConnectionFile bytes, without following a final link.
func readBounded(name string) ([]byte, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", name)
	}
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, io.LimitReader(f, maxConnectionFile)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
