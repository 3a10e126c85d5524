// Package handover passes envd's state to the envd binary it execs in its
// own pid (a live upgrade: POST /upgrade, SIGUSR2), and checks that binary
// before anything changes. See docs/upgrade.md.
//
// The record (proto envd.handover.v1) goes through a memfd: no path that
// sandbox code could create, replace or read. Its number is in the
// environment variable EnvFD, with the old binary's in EnvExe; the new envd
// reads them at the very start (Take), unsets the variables so no child
// inherits them, and marks every descriptor the record names close-on-exec
// again. Until it commits (Pending.Commit), a failure of any kind execs the
// old binary back with the same record (Pending.Rollback), so the workload
// outlives a binary that cannot adopt it.
//
// The package knows nothing of HTTP: the daemon maps its errors.
package handover

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	hpb "github.com/envd-dev/envd/gen/envd/handover/v1"
)

// Schema is the record format this envd writes. It counts incompatible
// changes (see handover.proto); a reader refuses a record newer than it
// knows.
const Schema = 1

// minSchema is the oldest record format this envd reads.
const minSchema = 1

// Environment variables that carry the handover to the new envd. The new
// envd unsets all three as it reads them.
const (
	// EnvFD is the memfd holding the record.
	EnvFD = "ENVD_HANDOVER_FD"
	// EnvExe is an O_RDONLY descriptor of the binary that wrote the record
	// (also in the record, but a record that cannot be read still needs it).
	EnvExe = "ENVD_HANDOVER_EXE_FD"
	// EnvRollback, when set, says this envd is the old binary exec'd back
	// after the new one failed, and why: it must not roll back again.
	EnvRollback = "ENVD_HANDOVER_ROLLBACK"
)

// maxRecord bounds what a reader reads: every process's retained output is
// in the record, which is memory anyway.
const maxRecord = 1 << 30

// SchemaError is a record whose schema this envd cannot read.
type SchemaError struct {
	Got, Min, Max uint32
}

func (e *SchemaError) Error() string {
	if e.Got > e.Max {
		return fmt.Sprintf("handover record schema %d is newer than schema %d, the newest this envd (%s) reads: the envd that wrote it knows state this one would lose", e.Got, e.Max, thisVersion())
	}
	return fmt.Sprintf("handover record schema %d is older than schema %d, the oldest this envd (%s) reads", e.Got, e.Min, thisVersion())
}

// versionForErrors names this envd in errors; the daemon sets it
// (SetVersion), on each Run: tests run daemons side by side.
var versionForErrors atomic.Pointer[string]

// SetVersion names this envd's version in the errors the package makes.
func SetVersion(v string) {
	s := "version " + v
	versionForErrors.Store(&s)
}

func thisVersion() string {
	if s := versionForErrors.Load(); s != nil {
		return *s
	}
	return "this version"
}

// FD is f's descriptor number, for a record or the exec's list of
// descriptors to keep. Unlike File.Fd it leaves the descriptor's mode
// alone (Fd makes it blocking; the new envd reads it through its poller).
// -1 if f is closed.
func FD(f *os.File) int {
	fd := -1
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(u uintptr) { fd = int(u) })
	}
	return fd
}

// Write puts rec in a new memfd, sealed against changes, and returns it
// (close-on-exec: the caller clears the flag right before the exec).
func Write(rec *hpb.Handover) (*os.File, error) {
	b, err := proto.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encode handover record: %w", err)
	}
	fd, err := unix.MemfdCreate("envd-handover", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("create the handover memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "envd-handover")
	for len(b) > 0 {
		n, err := f.Write(b)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("write the handover record: %w", err)
		}
		b = b[n:]
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE|unix.F_SEAL_SEAL); err != nil {
		f.Close()
		return nil, fmt.Errorf("seal the handover record: %w", err)
	}
	return f, nil
}

// Read reads and checks the record in fd, from its start; fd stays open.
func Read(fd int) (*hpb.Handover, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("handover record (fd %d): %w", fd, err)
	}
	if st.Size > maxRecord {
		return nil, fmt.Errorf("handover record (fd %d) is %d bytes: more than %d", fd, st.Size, maxRecord)
	}
	b := make([]byte, st.Size)
	for off := 0; off < len(b); {
		n, err := unix.Pread(fd, b[off:], int64(off))
		if err != nil {
			return nil, fmt.Errorf("read handover record (fd %d): %w", fd, err)
		}
		if n == 0 {
			return nil, fmt.Errorf("read handover record (fd %d): %w", fd, io.ErrUnexpectedEOF)
		}
		off += n
	}
	rec := &hpb.Handover{}
	if err := proto.Unmarshal(b, rec); err != nil {
		return nil, fmt.Errorf("decode handover record: %w", err)
	}
	lo, hi := Reads()
	if rec.GetSchema() < lo || rec.GetSchema() > hi {
		return nil, &SchemaError{Got: rec.GetSchema(), Min: lo, Max: hi}
	}
	return rec, nil
}

// Reads is the range of record schemas this envd reads.
func Reads() (lo, hi uint32) {
	if lo, hi, ok := testReads(); ok {
		return lo, hi
	}
	return minSchema, Schema
}

// FDs lists every descriptor rec names (the old binary's included).
func FDs(rec *hpb.Handover) []int {
	var fds []int
	if rec.GetOldExecutableFd() > 0 {
		fds = append(fds, int(rec.GetOldExecutableFd()))
	}
	for _, l := range rec.GetListeners() {
		fds = append(fds, int(l.GetFd()))
	}
	for _, p := range rec.GetProcesses() {
		for _, fd := range []*int32{p.StdoutFd, p.StderrFd, p.StdinFd, p.PtyFd} {
			if fd != nil {
				fds = append(fds, int(*fd))
			}
		}
	}
	if s := rec.GetJupyter().GetServer(); s != nil {
		fds = append(fds, int(s.GetRuntimeDirFd()), int(s.GetConfigDirFd()), int(s.GetOutputFd()))
	}
	for _, s := range rec.GetShells() {
		fds = append(fds, int(s.GetCommandFd()), int(s.GetControlFd()))
		for _, c := range append(append([]*hpb.ShellCommand{s.GetRunning()}, s.GetQueued()...), s.GetHistory()...) {
			if c != nil && c.InputFd != nil {
				fds = append(fds, int(c.GetInputFd()))
			}
		}
	}
	return fds
}

// SetInherit clears (inherit) or sets FD_CLOEXEC on each fd.
func SetInherit(fds []int, inherit bool) error {
	var errs []error
	for _, fd := range fds {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err == nil {
			if inherit {
				flags &^= unix.FD_CLOEXEC
			} else {
				flags |= unix.FD_CLOEXEC
			}
			_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("fd %d: %w", fd, err))
		}
	}
	return errors.Join(errs...)
}

// Pending is a handover this envd received and has not committed yet.
type Pending struct {
	// Record is the record; nil when it could not be read (Err says why).
	Record *hpb.Handover
	// RolledBack is, in an old envd exec'd back, why the new one failed;
	// "" otherwise.
	RolledBack string
	fd, exe    int
	committed  bool
}

// Take takes the handover this envd was exec'd with: nil, nil when there is
// none. It unsets the variables. A record it cannot read still comes back
// (with Record nil, and the error), so that the caller can roll back.
func Take() (*Pending, error) {
	v, ok := os.LookupEnv(EnvFD)
	if !ok {
		return nil, nil
	}
	exeVar := os.Getenv(EnvExe)
	rolled := os.Getenv(EnvRollback)
	os.Unsetenv(EnvFD)
	os.Unsetenv(EnvExe)
	os.Unsetenv(EnvRollback)
	p := &Pending{fd: -1, exe: -1, RolledBack: rolled}
	if fd, err := strconv.Atoi(exeVar); err == nil && fd > 2 {
		p.exe = fd
		SetInherit([]int{fd}, false)
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return p, fmt.Errorf("%s=%q: want a file descriptor number above 2", EnvFD, v)
	}
	p.fd = fd
	SetInherit([]int{fd}, false)
	rec, err := Read(fd)
	if err != nil {
		return p, err
	}
	p.Record = rec
	if p.exe < 0 {
		p.exe = int(rec.GetOldExecutableFd())
	}
	if err := SetInherit(FDs(rec), false); err != nil {
		return p, fmt.Errorf("handover record names descriptors that are not open: %w", err)
	}
	return p, nil
}

// Commit ends the handover: the record and the old binary's descriptor are
// closed, and Rollback is no longer possible. The descriptors of listeners
// and processes belong to whoever adopted them.
func (p *Pending) Commit() {
	if p == nil || p.committed {
		return
	}
	p.committed = true
	if p.fd >= 0 {
		unix.Close(p.fd)
	}
	if p.exe >= 0 {
		unix.Close(p.exe)
	}
}

// Committed tells whether Commit was called.
func (p *Pending) Committed() bool { return p != nil && p.committed }

// Rollback execs the binary that wrote the record back, with the same
// record and why as EnvRollback. It returns only if that is impossible:
// this envd is already the rolled-back one (it must not loop), the old
// binary's descriptor is unknown, or the exec failed.
func (p *Pending) Rollback(why error) error {
	if p.committed {
		return fmt.Errorf("handover: cannot roll back after commit: %w", why)
	}
	if p.RolledBack != "" {
		return fmt.Errorf("the envd rolled back to could not adopt the workload either (%w); the new envd had failed with: %s", why, p.RolledBack)
	}
	if p.exe < 0 || p.fd < 0 {
		return fmt.Errorf("cannot roll back to the old envd, its descriptor is unknown: %w", why)
	}
	fds := []int{p.fd, p.exe}
	if p.Record != nil {
		fds = append(fds, FDs(p.Record)...)
	}
	if err := SetInherit(fds, true); err != nil {
		return fmt.Errorf("roll back: %v (after: %w)", err, why)
	}
	reason := why.Error()
	if len(reason) > 2000 {
		reason = reason[:2000] + "..."
	}
	env := Env(os.Environ(), p.fd, p.exe)
	env = append(env, EnvRollback+"="+strings.ReplaceAll(reason, "\x00", " "))
	fmt.Fprintf(os.Stderr, "envd: cannot adopt the handover (%v): exec'ing the old envd back\n", why)
	err := Exec(p.exe, os.Args, env)
	SetInherit(fds, false)
	return fmt.Errorf("roll back to the old envd: %v (after: %w)", err, why)
}

// Env is environ with the handover's variables set to fd and exe (and
// EnvRollback removed).
func Env(environ []string, fd, exe int) []string {
	out := make([]string, 0, len(environ)+2)
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if k == EnvFD || k == EnvExe || k == EnvRollback {
			continue
		}
		out = append(out, kv)
	}
	return append(out, EnvFD+"="+strconv.Itoa(fd), EnvExe+"="+strconv.Itoa(exe))
}

// Exec execs the binary open at fd (through /proc/self/fd: what runs is the
// file that was opened and checked, whatever its path names now). It
// returns only on failure.
func Exec(fd int, argv, env []string) error {
	path := "/proc/self/fd/" + strconv.Itoa(fd)
	err := unix.Exec(path, argv, env)
	return fmt.Errorf("exec %s: %w", path, err)
}
