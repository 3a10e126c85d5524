package handover

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/errkind"
	"github.com/envd-dev/envd/internal/reaper"
)

// Kinds of error about a new binary; the daemon maps them to statuses.
var (
	// ErrInvalid: the request itself is wrong (a relative path, a malformed
	// sha256).
	ErrInvalid = errors.New("invalid upgrade request")
	// ErrRefused: the binary may not replace envd (missing, not a regular
	// file, not root's, writable by others, another sha256, not ELF, or it
	// failed its preflight).
	ErrRefused = errors.New("binary refused")
)

// Binary is a new envd binary, opened once and checked: what runs is this
// open file, whatever its path names later.
type Binary struct {
	f      *os.File
	Path   string
	SHA256 string // hex, of the file as it was read
}

// FD is the open binary's descriptor (close-on-exec).
func (b *Binary) FD() int {
	fd := -1
	if rc, err := b.f.SyscallConn(); err == nil {
		rc.Control(func(u uintptr) { fd = int(u) })
	}
	return fd
}

// Close closes the binary.
func (b *Binary) Close() error { return b.f.Close() }

// OpenBinary opens path (absolute; its last component is not followed if it
// is a symbolic link) and checks it can replace envd: a regular ELF file,
// executable, owned by root (by envd's own user when envd is not root) and
// writable by nobody else (neither group nor others), whose sha256 is
// wantSHA when that is not "".
func OpenBinary(path, wantSHA string) (*Binary, error) {
	if path == "" {
		return nil, errkind.Errorf(ErrInvalid, "path is missing: name the new envd binary by its absolute path")
	}
	if !filepath.IsAbs(path) {
		return nil, errkind.Errorf(ErrInvalid, "path %q is relative: give the new envd binary's absolute path", path)
	}
	if strings.ContainsRune(path, 0) {
		return nil, errkind.Errorf(ErrInvalid, "path %q contains a NUL byte", path)
	}
	wantSHA = strings.ToLower(strings.TrimSpace(wantSHA))
	if wantSHA != "" {
		if b, err := hex.DecodeString(wantSHA); err != nil || len(b) != sha256.Size {
			return nil, errkind.Errorf(ErrInvalid, "sha256 %q: want 64 hex digits", wantSHA)
		}
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, errkind.Errorf(ErrRefused, "%s: no such file", path)
	case errors.Is(err, unix.ELOOP):
		return nil, errkind.Errorf(ErrRefused, "%s is a symbolic link: name the binary itself, not a link to it", path)
	case errors.Is(err, unix.ENOTDIR):
		return nil, errkind.Errorf(ErrRefused, "%s: a component of the path is not a directory", path)
	case err != nil:
		return nil, errkind.Errorf(ErrRefused, "open %s: %v", path, err)
	}
	b := &Binary{f: os.NewFile(uintptr(fd), path), Path: path}
	if err := b.check(wantSHA); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

func (b *Binary) check(wantSHA string) error {
	var st unix.Stat_t
	if err := unix.Fstat(b.FD(), &st); err != nil {
		return errkind.Errorf(ErrRefused, "stat %s: %v", b.Path, err)
	}
	mode := st.Mode
	switch {
	case mode&unix.S_IFMT != unix.S_IFREG:
		return errkind.Errorf(ErrRefused, "%s is not a regular file", b.Path)
	case st.Uid != 0 && int(st.Uid) != os.Geteuid():
		return errkind.Errorf(ErrRefused, "%s is owned by uid %d: the new envd must belong to root", b.Path, st.Uid)
	case mode&0o022 != 0:
		return errkind.Errorf(ErrRefused, "%s is writable by its group or by others (mode %04o): only its owner may be able to change envd", b.Path, mode&0o7777)
	case mode&0o100 == 0:
		return errkind.Errorf(ErrRefused, "%s is not executable (mode %04o)", b.Path, mode&0o7777)
	}
	magic := make([]byte, 4)
	if _, err := b.f.ReadAt(magic, 0); err != nil || !bytes.Equal(magic, []byte("\x7fELF")) {
		return errkind.Errorf(ErrRefused, "%s is not an ELF executable (envd is exec'd through its open file, which a script's interpreter cannot read)", b.Path)
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(b.f, 0, st.Size)); err != nil {
		return errkind.Errorf(ErrRefused, "read %s: %v", b.Path, err)
	}
	b.SHA256 = hex.EncodeToString(h.Sum(nil))
	if wantSHA != "" && wantSHA != b.SHA256 {
		return errkind.Errorf(ErrRefused, "%s has sha256 %s, not the %s asked for", b.Path, b.SHA256, wantSHA)
	}
	return nil
}

// CheckFlag is the flag that makes envd print its CheckLine and exit: the
// preflight.
const CheckFlag = "handover-check"

// CheckLine is what envd -handover-check prints: its version and the range
// of handover schemas it reads.
func CheckLine(version string) string {
	lo, hi := Reads()
	return fmt.Sprintf("envd-handover version=%s reads=%d-%d", strconv.Quote(version), lo, hi)
}

var checkLine = regexp.MustCompile(`^envd-handover version=("(?:[^"\\]|\\.)*") reads=(\d+)-(\d+)$`)

// Info is what a new binary's preflight said.
type Info struct {
	Version          string
	ReadsLo, ReadsHi uint32
}

// PreflightTimeout bounds a preflight run.
const PreflightTimeout = 30 * time.Second

// Preflight runs the binary once as a child, with envd's own flags and
// -handover-check: it must parse them, print its CheckLine and exit 0, and
// read the schema this envd writes.
func (b *Binary) Preflight(ctx context.Context, args []string) (Info, error) {
	ctx, cancel := context.WithTimeout(ctx, PreflightTimeout)
	defer cancel()
	outR, outW, err := os.Pipe()
	if err != nil {
		return Info{}, fmt.Errorf("preflight: %w", err)
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return Info{}, fmt.Errorf("preflight: %w", err)
	}
	defer errR.Close()
	cmd := &exec.Cmd{
		Path:        "/proc/self/fd/3",
		Args:        append(append([]string{b.Path}, args...), "-"+CheckFlag),
		Stdout:      outW,
		Stderr:      errW,
		ExtraFiles:  []*os.File{b.f},
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	exitc, err := reaper.Start(cmd)
	outW.Close()
	errW.Close()
	if err != nil {
		return Info{}, errkind.Errorf(ErrRefused, "preflight of %s: cannot run it: %v", b.Path, err)
	}
	outc, errc := readUpTo(outR, 64<<10), readUpTo(errR, 64<<10)
	var ex reaper.Exit
	select {
	case ex = <-exitc:
	case <-ctx.Done():
		reaper.SignalChild(cmd.Process.Pid, syscall.SIGKILL, true) // nothing once it is reaped
		<-exitc
		return Info{}, errkind.Errorf(ErrRefused, "preflight of %s: no answer to -%s within %v", b.Path, CheckFlag, PreflightTimeout)
	}
	out, stderr := <-outc, <-errc
	if ex.Code() != 0 {
		return Info{}, errkind.Errorf(ErrRefused, "preflight of %s: %s -%s ended with %s: %s", b.Path, b.Path, CheckFlag, ex, summary(stderr, out))
	}
	info, ok := parseCheckLine(out)
	if !ok {
		return Info{}, errkind.Errorf(ErrRefused, "preflight of %s: -%s printed %q, not an envd's handover check line: is it envd?", b.Path, CheckFlag, trim(out))
	}
	if Schema < info.ReadsLo || Schema > info.ReadsHi {
		return info, errkind.Errorf(ErrRefused, "preflight of %s: envd %s reads handover schemas %d to %d, and this envd writes schema %d", b.Path, info.Version, info.ReadsLo, info.ReadsHi, Schema)
	}
	return info, nil
}

// parseCheckLine reads what a binary's preflight printed: its CheckLine,
// or ok false.
func parseCheckLine(out []byte) (info Info, ok bool) {
	m := checkLine.FindSubmatch(bytes.TrimSpace(out))
	if m == nil {
		return Info{}, false
	}
	ver, _ := strconv.Unquote(string(m[1]))
	lo, _ := strconv.ParseUint(string(m[2]), 10, 32)
	hi, _ := strconv.ParseUint(string(m[3]), 10, 32)
	return Info{Version: ver, ReadsLo: uint32(lo), ReadsHi: uint32(hi)}, true
}

// readUpTo reads r to its end, keeping the first n bytes.
func readUpTo(r io.Reader, n int64) <-chan []byte {
	c := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(r, n))
		io.Copy(io.Discard, r)
		c <- b
	}()
	return c
}

func summary(stderr, stdout []byte) string {
	if s := trim(stderr); s != "" {
		return s
	}
	if s := trim(stdout); s != "" {
		return s
	}
	return "no output"
}

func trim(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 500 {
		s = s[:500] + "..."
	}
	return s
}
