package daemon

import (
	"fmt"
	"maps"
	"slices"
	"syscall"
	"time"

	hpb "github.com/envd-dev/envd/gen/envd/handover/v1"
	"github.com/envd-dev/envd/internal/outbuf"
	"github.com/envd-dev/envd/internal/process"
	"github.com/envd-dev/envd/internal/reaper"
)

// Processes across a live upgrade (docs/upgrade.md): the process domain
// describes them (Manager.Snapshot, after Park) and takes them back
// (Manager.PrepareAdopt, then Adoption.Commit); these convert its Snapshot
// to the handover's record and back.

var reasonsToWire = map[process.EndReason]hpb.EndReason{
	process.EndExited:       hpb.EndReason_END_REASON_EXITED,
	process.EndSignaled:     hpb.EndReason_END_REASON_SIGNALED,
	process.EndTimedOut:     hpb.EndReason_END_REASON_TIMED_OUT,
	process.EndClientSignal: hpb.EndReason_END_REASON_CLIENT_SIGNAL,
	process.EndShutdown:     hpb.EndReason_END_REASON_SHUTDOWN,
	process.EndOOMKilled:    hpb.EndReason_END_REASON_OOM_KILLED,
}

// reasonFromWire is r in the domain; a reason it does not know (an
// unspecified one) is a signal's.
func reasonFromWire(r hpb.EndReason) process.EndReason {
	for k, v := range reasonsToWire {
		if v == r {
			return k
		}
	}
	return process.EndSignaled
}

// processesToProto is s in the handover record; fds lists every
// descriptor the record names, which the caller keeps open across the
// exec.
func processesToProto(s process.Snapshot) (live []*hpb.Process, ended []*hpb.EndedProcess, fds []int) {
	for _, st := range s.Live {
		rec := &hpb.Process{Pid: st.Pid, Tag: st.Tag, OwnerUid: st.Owner, Command: commandToProto(st.Config),
			Output: outputToProto(st.Output), Cgroup: st.Cgroup, Killed: st.Killed}
		fd := func(n int) *int32 {
			if n == process.NoFD {
				return nil
			}
			fds = append(fds, n)
			fd32 := int32(n)
			return &fd32
		}
		rec.PtyFd, rec.StdoutFd, rec.StderrFd, rec.StdinFd = fd(st.PTY), fd(st.Stdout), fd(st.Stderr), fd(st.Stdin)
		if st.Timeout > 0 {
			left := int64(st.Timeout)
			rec.TimeoutRemainingNs = &left
		}
		for _, sig := range slices.Sorted(maps.Keys(st.Sent)) {
			rec.Sent = append(rec.Sent, &hpb.SentSignal{Signal: int32(sig), Why: reasonsToWire[st.Sent[sig]]})
		}
		if ex := st.Reaped; ex != nil {
			rec.Reaped = &hpb.Exit{WaitStatus: uint32(ex.Status)}
			if ex.Usage != nil {
				u, s, rss := ex.Usage.Utime.Nano(), ex.Usage.Stime.Nano(), ex.Usage.Maxrss
				rec.Reaped.UserCpuNs, rec.Reaped.SystemCpuNs, rec.Reaped.MaxRssBytes = &u, &s, &rss
			}
		}
		live = append(live, rec)
	}
	for _, st := range s.Ended {
		ex := st.Exit
		e := &hpb.Exit{Code: int32(ex.Code), Exited: ex.Exited, Status: ex.Status, Reason: reasonsToWire[ex.Reason]}
		if u := ex.Usage; u != nil {
			a, b, c, d := int64(u.UserCPU), int64(u.SystemCPU), u.MaxRSS, u.MemoryPeak
			e.UserCpuNs, e.SystemCpuNs, e.MaxRssBytes, e.MemoryPeakBytes = &a, &b, &c, &d
		}
		ended = append(ended, &hpb.EndedProcess{Pid: st.Pid, Tag: st.Tag, OwnerUid: st.Owner, Command: commandToProto(st.Config),
			Pty: st.PTY, Exit: e, Output: outputToProto(st.Output), RetentionRemainingNs: int64(st.Retention)})
	}
	return live, ended, fds
}

// processesFromProto is the processes of a handover record in the domain,
// for Manager.PrepareAdopt, which checks the rest; an error: a record the
// domain cannot hold (a process without a command, an output record of no
// kind).
func processesFromProto(live []*hpb.Process, ended []*hpb.EndedProcess) (process.Snapshot, error) {
	var s process.Snapshot
	for _, r := range live {
		if r.GetCommand() == nil {
			return process.Snapshot{}, fmt.Errorf("a process without pid or command")
		}
		out, err := outputFromProto(r.GetOutput())
		if err != nil {
			return process.Snapshot{}, fmt.Errorf("process %d: %w", r.GetPid(), err)
		}
		fd := func(n *int32) int {
			if n == nil {
				return process.NoFD
			}
			return int(*n)
		}
		st := process.LiveState{Pid: r.GetPid(), Tag: r.Tag, Owner: r.GetOwnerUid(), Config: configFromProto(r.GetCommand()), Output: out,
			Stdout: fd(r.StdoutFd), Stderr: fd(r.StderrFd), Stdin: fd(r.StdinFd), PTY: fd(r.PtyFd),
			Cgroup: r.GetCgroup(), Killed: r.GetKilled()}
		if r.TimeoutRemainingNs != nil {
			st.Timeout = max(time.Duration(r.GetTimeoutRemainingNs()), 1)
		}
		for _, sig := range r.GetSent() {
			if st.Sent == nil {
				st.Sent = map[syscall.Signal]process.EndReason{}
			}
			st.Sent[syscall.Signal(sig.GetSignal())] = reasonFromWire(sig.GetWhy())
		}
		if e := r.GetReaped(); e != nil {
			st.Reaped = &reaper.Exit{Status: syscall.WaitStatus(e.GetWaitStatus())}
			if e.UserCpuNs != nil {
				st.Reaped.Usage = &syscall.Rusage{Utime: syscall.NsecToTimeval(e.GetUserCpuNs()), Stime: syscall.NsecToTimeval(e.GetSystemCpuNs()), Maxrss: e.GetMaxRssBytes()}
			}
		}
		s.Live = append(s.Live, st)
	}
	for _, r := range ended {
		out, err := outputFromProto(r.GetOutput())
		if err != nil {
			return process.Snapshot{}, fmt.Errorf("ended process %d: %w", r.GetPid(), err)
		}
		e := r.GetExit()
		ex := process.Exit{Code: int(e.GetCode()), Exited: e.GetExited(), Status: e.GetStatus(), Reason: reasonFromWire(e.GetReason())}
		if e.UserCpuNs != nil {
			ex.Usage = &process.Usage{UserCPU: time.Duration(e.GetUserCpuNs()), SystemCPU: time.Duration(e.GetSystemCpuNs()),
				MaxRSS: e.GetMaxRssBytes(), MemoryPeak: e.GetMemoryPeakBytes()}
		}
		s.Ended = append(s.Ended, process.EndedState{Pid: r.GetPid(), Tag: r.Tag, Owner: r.GetOwnerUid(), Config: configFromProto(r.GetCommand()),
			PTY: r.GetPty(), Exit: ex, Output: out, Retention: time.Duration(r.GetRetentionRemainingNs())})
	}
	return s, nil
}

func commandToProto(c process.Config) *hpb.Command {
	return &hpb.Command{Cmd: c.Cmd, Args: c.Args, Envs: c.Envs, Cwd: c.Cwd}
}

// configFromProto is c in the domain; nil (an ended process's command is
// not checked) is an empty Config.
func configFromProto(c *hpb.Command) process.Config {
	if c == nil {
		return process.Config{}
	}
	return process.Config{Cmd: c.GetCmd(), Args: c.GetArgs(), Envs: c.GetEnvs(), Cwd: c.Cwd}
}

func outputToProto(o process.Output) *hpb.Output {
	out := &hpb.Output{Start: o.Start, End: o.End, Records: make([]*hpb.Record, len(o.Records))}
	for i, r := range o.Records {
		out.Records[i] = &hpb.Record{Offset: r.Off, Kind: uint32(r.Kind), Data: r.Data}
	}
	return out
}

func outputFromProto(o *hpb.Output) (process.Output, error) {
	var recs []outbuf.Record // nil for none, as the log's snapshot
	if n := len(o.GetRecords()); n > 0 {
		recs = make([]outbuf.Record, n)
	}
	for i, r := range o.GetRecords() {
		if r.GetKind() > 255 {
			return process.Output{}, fmt.Errorf("output record kind %d", r.GetKind())
		}
		recs[i] = outbuf.Record{Off: r.GetOffset(), Kind: uint8(r.GetKind()), Data: r.GetData()}
	}
	return process.Output{Start: o.GetStart(), End: o.GetEnd(), Records: recs}, nil
}
