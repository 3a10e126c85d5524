package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrNoMemory: no memory controller serves g (v1 without a memory
// hierarchy, v2 without the controller enabled).
var ErrNoMemory = errors.New("no memory controller")

// memDir is g's directory in the hierarchy that has the memory controller.
func (g *Group) memDir() (string, error) {
	var d string
	switch {
	case g.m.v2 != nil:
		d = filepath.Join(g.m.v2.own, g.m.root, g.rel)
		if _, err := os.Stat(filepath.Join(d, "memory.events")); err != nil {
			return "", ErrNoMemory
		}
	case g.m.memory != nil:
		d = filepath.Join(g.m.memory.own, g.m.root, g.rel)
	default:
		return "", ErrNoMemory
	}
	return d, nil
}

// OOMKills is how many processes of g the OOM killer took (v2
// memory.events oom_kill, which counts g's descendants too; v1
// memory.oom_control oom_kill, g's own tasks).
func (g *Group) OOMKills() (uint64, error) {
	d, err := g.memDir()
	if err != nil {
		return 0, err
	}
	file := "memory.oom_control"
	if g.m.v2 != nil {
		file = "memory.events"
	}
	return readKey(filepath.Join(d, file), "oom_kill")
}

// MemoryPeak is the most memory g's processes used at once, in bytes (v2
// memory.peak, v1 memory.max_usage_in_bytes): page cache included.
func (g *Group) MemoryPeak() (uint64, error) {
	d, err := g.memDir()
	if err != nil {
		return 0, err
	}
	fd := -1
	if g.peakOpen {
		fd = g.peak
	}
	n, err := readUintFD(fd, filepath.Join(d, peakFile(g.m)))
	if err != nil {
		return 0, fmt.Errorf("read memory peak: %w", err)
	}
	return n, nil
}

// readUint reads a file that holds one number.
func readUint(p string) (uint64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p, err)
	}
	return n, nil
}

// peakFile names the memory peak file.
func peakFile(m *Manager) string {
	if m.v2 != nil {
		return "memory.peak"
	}
	return "memory.max_usage_in_bytes"
}

// SetMemoryLimit limits g's memory, in bytes (v2 memory.max, v1
// memory.limit_in_bytes).
func (g *Group) SetMemoryLimit(n uint64) error {
	d, err := g.memDir()
	if err != nil {
		return err
	}
	file := "memory.limit_in_bytes"
	if g.m.v2 != nil {
		file = "memory.max"
	}
	if err := writeFile(filepath.Join(d, file), []byte(strconv.FormatUint(n, 10))); err != nil {
		return fmt.Errorf("set memory limit: %w", err)
	}
	return nil
}

// readKey reads the value of key in a "key value" per line file.
func readKey(p, key string) (uint64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return parseKey(b, p, key)
}

// parseKey reads the value of key in b, the content of the file p.
func parseKey(b []byte, p, key string) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %s: %w", p, key, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("%s: no %s", p, key)
}
