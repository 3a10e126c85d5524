// Package procstat reads what /proc/<pid>/stat says of processes: their
// state, parent, process group, session, terminal's foreground group,
// start time and command name. It is the one parser of that
// file, for the reaper (envd's children), the process domain (a killed
// group's members) and tests.
package procstat

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// Stat is what /proc/<pid>/stat says of one process.
type Stat struct {
	Pid     int
	State   byte // R, S, D, Z, T...
	PPid    int
	PGrp    int
	Session int
	TPGid   int    // its terminal's foreground process group (-1: none)
	Start   uint64 // clock ticks after boot it started: tells a pid from a later one reusing it
	Comm    string // its command name, as the kernel keeps it (truncated)
	// CPU is the CPU time it used so far, user and system, in clock ticks
	// (USER_HZ: 100 a second on Linux; see Ticks).
	CPU uint64
}

// TickDuration is the length of one clock tick of Stat.CPU: USER_HZ is 100
// on every Linux architecture envd runs on.
const TickDuration = 10 * time.Millisecond

// errFormat: a stat file this package cannot read.
var errFormat = errors.New("unexpected format")

// Read returns the stat of pid; an error wrapping fs.ErrNotExist once pid
// is gone (reaped).
func Read(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, fmt.Errorf("read stat of %d: %w", pid, err)
	}
	st, err := parse(pid, string(b))
	if err != nil {
		return Stat{}, fmt.Errorf("parse stat of %d: %w", pid, err)
	}
	return st, nil
}

// parse reads a stat line. The command name, in parentheses, may hold
// spaces and parentheses: the fields that follow start after the last ')':
// state ppid pgrp session tty tpgid ... utime stime (the 12th and 13th)
// ... starttime (the 20th). The kernel
// writes them all; a line that stops after session leaves TPGid and Start
// zero.
func parse(pid int, s string) (Stat, error) {
	open, i := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || i < open {
		return Stat{}, errFormat
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 4 || len(f[0]) != 1 {
		return Stat{}, errFormat
	}
	st := Stat{Pid: pid, State: f[0][0], Comm: s[open+1 : i]}
	var err error
	for j, p := range []*int{&st.PPid, &st.PGrp, &st.Session} {
		if *p, err = strconv.Atoi(f[j+1]); err != nil {
			return Stat{}, errFormat
		}
	}
	if len(f) >= 20 {
		if st.TPGid, err = strconv.Atoi(f[5]); err != nil {
			return Stat{}, errFormat
		}
		if st.Start, err = strconv.ParseUint(f[19], 10, 64); err != nil {
			return Stat{}, errFormat
		}
		utime, uerr := strconv.ParseUint(f[11], 10, 64)
		stime, serr := strconv.ParseUint(f[12], 10, 64)
		if uerr != nil || serr != nil {
			return Stat{}, errFormat
		}
		st.CPU = utime + stime
		if st.CPU < utime { // no process lives that long: saturate
			st.CPU = math.MaxUint64
		}
	}
	return st, nil
}

// All returns the stat of every process that could be read (one that ends
// while it reads is left out), in /proc's order.
func All() []Stat {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]Stat, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := Read(pid); err == nil {
			out = append(out, st)
		}
	}
	return out
}

// Select returns the pids of the processes for which keep is true.
func Select(keep func(Stat) bool) []int {
	var out []int
	for _, st := range All() {
		if keep(st) {
			out = append(out, st.Pid)
		}
	}
	return out
}
