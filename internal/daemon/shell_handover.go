package daemon

import (
	"fmt"
	"time"

	hpb "github.com/envd-dev/envd/gen/envd/handover/v1"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/shell"
)

// Shell sessions across a live upgrade (docs/upgrade.md): the shell domain
// describes them (Manager.Snapshot, after Park) and takes them back
// (Manager.PrepareAdopt, then Adoption.Commit once the processes are
// adopted); these convert its Snapshot to the handover's record and back.

// shellsToProto is s in the handover record; fds lists every descriptor
// the record names, which the caller keeps open across the exec.
func shellsToProto(s shell.Snapshot) (sessions []*hpb.ShellSession, dir string, fds []int) {
	for _, st := range s.Sessions {
		u := st.User
		rec := &hpb.ShellSession{
			Id: st.ID, Tag: st.Tag, Pty: st.PTY, CreatedUnixNano: st.Created.UnixNano(), Pid: st.Pid,
			User:      &hpb.ShellUser{Name: u.Name, Uid: u.UID, Gid: u.GID, Groups: u.Groups, Home: u.Home, Shell: u.Shell},
			CommandFd: int32(st.CommandFD), ControlFd: int32(st.ControlFD),
			Seq: st.Seq, Started: st.Started, Cwd: st.Cwd, Env: st.Env, Status: int32(st.Status),
			Frontier: st.Frontier, Closing: st.Closing, Sigints: st.Sigints, Synced: st.Synced,
			ControlFields: st.ControlFields, ControlPartial: st.ControlPartial,
		}
		fds = append(fds, st.CommandFD, st.ControlFD)
		command := func(c shell.CommandState) *hpb.ShellCommand {
			out := shellCommandToProto(c)
			if c.InputFD != shell.NoFD {
				fds = append(fds, c.InputFD)
			}
			return out
		}
		if st.Running != nil {
			rec.Running = command(*st.Running)
		}
		for _, c := range st.Queued {
			rec.Queued = append(rec.Queued, command(c))
		}
		for _, c := range st.History {
			rec.History = append(rec.History, command(c))
		}
		sessions = append(sessions, rec)
	}
	return sessions, s.Dir, fds
}

func shellCommandToProto(c shell.CommandState) *hpb.ShellCommand {
	out := &hpb.ShellCommand{
		Id: c.ID, Text: c.Text, Seq: c.Seq, Stdin: c.Stdin, TimeoutNs: int64(c.Timeout),
		File: c.File, InputPipe: c.InputPipe, InputLeft: c.InputLeft, InputOpened: c.InputOpened, InputClose: c.InputClose,
		QueuedUnixNano: unixNano(c.QueuedAt), StartedUnixNano: unixNano(c.StartedAt),
		Nonce: c.Nonce, Begun: c.Begun, StartOffset: c.StartOff, GotEnd: c.GotEnd, Status: int32(c.Status),
		Interrupt: uint32(c.Interrupt), InterruptedUnixNano: unixNano(c.Interrupted), Signaled: c.Signaled, Rounds: int32(c.Rounds),
	}
	if c.InputFD != shell.NoFD {
		fd := int32(c.InputFD)
		out.InputFd = &fd
	}
	for _, o := range c.Outputs {
		out.Outputs = append(out.Outputs, &hpb.ShellOutput{Kind: uint32(o.Kind), Found: o.Found, EndOffset: o.EndOff,
			HeldOffset: o.HeldOff, Held: o.Held, Bytes: o.Bytes})
	}
	for _, p := range c.Old {
		out.Old = append(out.Old, &hpb.ShellProc{Pid: int32(p.Pid), Start: p.Start, Comm: p.Comm})
	}
	if e := c.End; e != nil {
		out.End = &hpb.ShellEnd{Reason: uint32(e.Reason), ExitCode: int32(e.ExitCode), Signal: int32(e.Signal),
			Message: e.Message, DurationNs: int64(e.Duration)}
	}
	return out
}

// unixNano is t's UnixNano, 0 for the zero time.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// fromUnixNano is unixNano's inverse.
func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// shellsFromProto is the record's shell sessions in the domain, for
// Manager.PrepareAdopt, which checks the descriptors; an error: a record
// the domain cannot hold (a session whose shell is not a running process
// of the record, an ended command without its end, an output of no kind).
func shellsFromProto(rec *hpb.Handover) (shell.Snapshot, error) {
	s := shell.Snapshot{Dir: rec.GetShellDir()}
	running := map[uint32]bool{}
	for _, p := range rec.GetProcesses() {
		if p.GetReaped() == nil {
			running[p.GetPid()] = true
		}
	}
	for _, r := range rec.GetShells() {
		if !running[r.GetPid()] {
			return shell.Snapshot{}, fmt.Errorf("shell session %s: its shell, pid %d, is not a running process of the record", r.GetId(), r.GetPid())
		}
		u := r.GetUser()
		st := shell.SessionState{
			ID: r.GetId(), Tag: r.GetTag(), PTY: r.GetPty(), Created: fromUnixNano(r.GetCreatedUnixNano()), Pid: r.GetPid(),
			User:      identity.User{Name: u.GetName(), UID: u.GetUid(), GID: u.GetGid(), Groups: u.GetGroups(), Home: u.GetHome(), Shell: u.GetShell()},
			CommandFD: int(r.GetCommandFd()), ControlFD: int(r.GetControlFd()),
			Seq: r.GetSeq(), Started: r.GetStarted(), Cwd: r.GetCwd(), Env: r.GetEnv(), Status: int(r.GetStatus()),
			Frontier: r.GetFrontier(), Closing: r.GetClosing(), Sigints: r.GetSigints(), Synced: r.GetSynced(),
			ControlFields: r.GetControlFields(), ControlPartial: r.GetControlPartial(),
		}
		if c := r.GetRunning(); c != nil {
			cs, err := shellCommandFromProto(c, false)
			if err != nil {
				return shell.Snapshot{}, fmt.Errorf("shell session %s: %w", st.ID, err)
			}
			st.Running = &cs
		}
		for _, c := range r.GetQueued() {
			cs, err := shellCommandFromProto(c, false)
			if err != nil {
				return shell.Snapshot{}, fmt.Errorf("shell session %s: %w", st.ID, err)
			}
			st.Queued = append(st.Queued, cs)
		}
		for _, c := range r.GetHistory() {
			cs, err := shellCommandFromProto(c, true)
			if err != nil {
				return shell.Snapshot{}, fmt.Errorf("shell session %s: %w", st.ID, err)
			}
			st.History = append(st.History, cs)
		}
		s.Sessions = append(s.Sessions, st)
	}
	return s, nil
}

func shellCommandFromProto(c *hpb.ShellCommand, ended bool) (shell.CommandState, error) {
	cs := shell.CommandState{
		ID: c.GetId(), Text: c.GetText(), Seq: c.GetSeq(), Stdin: c.GetStdin(), Timeout: time.Duration(c.GetTimeoutNs()),
		File: c.GetFile(), InputPipe: c.GetInputPipe(), InputFD: shell.NoFD, InputLeft: c.GetInputLeft(),
		InputOpened: c.GetInputOpened(), InputClose: c.GetInputClose(),
		QueuedAt: fromUnixNano(c.GetQueuedUnixNano()), StartedAt: fromUnixNano(c.GetStartedUnixNano()),
		Nonce: c.GetNonce(), Begun: c.GetBegun(), StartOff: c.GetStartOffset(), GotEnd: c.GetGotEnd(), Status: int(c.GetStatus()),
		Interrupt: shell.EndReason(c.GetInterrupt()), Interrupted: fromUnixNano(c.GetInterruptedUnixNano()),
		Signaled: c.GetSignaled(), Rounds: int(c.GetRounds()),
	}
	if c.InputFd != nil {
		cs.InputFD = int(c.GetInputFd())
	}
	for _, o := range c.GetOutputs() {
		if o.GetKind() > 255 {
			return cs, fmt.Errorf("command %s: output kind %d", cs.ID, o.GetKind())
		}
		cs.Outputs = append(cs.Outputs, shell.OutputState{Kind: uint8(o.GetKind()), Found: o.GetFound(), EndOff: o.GetEndOffset(),
			HeldOff: o.GetHeldOffset(), Held: o.GetHeld(), Bytes: o.GetBytes()})
	}
	for _, p := range c.GetOld() {
		cs.Old = append(cs.Old, shell.ProcState{Pid: int(p.GetPid()), Start: p.GetStart(), Comm: p.GetComm()})
	}
	if e := c.GetEnd(); e != nil {
		cs.End = &shell.End{Reason: shell.EndReason(e.GetReason()), ExitCode: int(e.GetExitCode()), Signal: int(e.GetSignal()),
			Message: e.GetMessage(), Duration: time.Duration(e.GetDurationNs())}
	} else if ended {
		return cs, fmt.Errorf("ended command %s without its end", cs.ID)
	}
	return cs, nil
}
