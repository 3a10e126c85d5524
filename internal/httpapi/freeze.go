package httpapi

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/cgroup"
	"github.com/envd-dev/envd/internal/server"
)

// HooksOptions configures the orchestrator's snapshot hooks.
type HooksOptions struct {
	Logger *slog.Logger // zero: slog.Default()
	// Cgroups freezes the workload. Nil (cgroups unavailable): /freeze and
	// /unfreeze answer 501.
	Cgroups *cgroup.Manager
	// FSPath is the filesystem /fsfreeze freezes (any path on it). Zero:
	// "/", the root filesystem.
	FSPath string
	// FSWatchdog bounds how long a filesystem stays frozen: a frozen root
	// filesystem deadlocks a live VM if nothing thaws it. Zero: 30 s.
	FSWatchdog time.Duration
}

// Limits of the /freeze query.
const (
	maxMaxCgroups = 1 << 20
	maxMaxWaitMs  = 60_000
)

// Hooks serves /freeze, /unfreeze, /fsfreeze, /fsthaw and /collapse. One
// lock serves them all: a call while another holds it answers 503.
type Hooks struct {
	o   HooksOptions
	log *slog.Logger
	mu  sync.Mutex // the one lock; taken with TryLock

	fsMu     sync.Mutex
	fsFrozen *os.File    // guarded by fsMu: the frozen filesystem, open
	watchdog *time.Timer // guarded by fsMu
}

// NewHooks returns the snapshot hooks.
func NewHooks(o HooksOptions) *Hooks {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.FSPath == "" {
		o.FSPath = "/"
	}
	if o.FSWatchdog <= 0 {
		o.FSWatchdog = 30 * time.Second
	}
	return &Hooks{o: o, log: o.Logger}
}

// Routes are the hooks' part of envd's route table (token required).
func (h *Hooks) Routes() []server.Route {
	return []server.Route{
		{Pattern: "POST /freeze", Handler: h.locked(h.freeze)},
		{Pattern: "POST /unfreeze", Handler: h.locked(h.unfreeze)},
		{Pattern: "POST /fsfreeze", Handler: h.locked(h.fsfreeze)},
		{Pattern: "POST /fsthaw", Handler: h.locked(h.fsthaw)},
		{Pattern: "POST /collapse", Handler: h.locked(h.collapse)},
	}
}

// locked runs f under the one lock, or answers 503 while another hook
// holds it.
func (h *Hooks) locked(f http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.mu.TryLock() {
			w.Header().Set("Retry-After", "1")
			server.WriteError(w, http.StatusServiceUnavailable, "another freeze, thaw or collapse, or a live upgrade, is in progress: retry when it ends")
			return
		}
		defer h.mu.Unlock()
		f(w, r)
	})
}

// freezeQuery parses /freeze's query; the error names the bad parameter.
func freezeQuery(r *http.Request) (cgroup.FreezeOptions, bool, error) {
	q := r.URL.Query()
	var o cgroup.FreezeOptions
	switch m := q.Get("mode"); m {
	case "", "legacy":
	case "hierarchy":
		o.Hierarchy = true
	default:
		return o, false, fmt.Errorf("mode %q: want legacy (envd's own cgroups, the default) or hierarchy (every cgroup but envd's ancestors)", m)
	}
	if s := q.Get("maxCgroups"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxMaxCgroups {
			return o, false, fmt.Errorf("maxCgroups %q: want a whole number from 1 to %d", s, maxMaxCgroups)
		}
		o.MaxCgroups = n
	}
	wait := q.Has("maxWaitMs")
	if wait {
		s := q.Get("maxWaitMs")
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > maxMaxWaitMs {
			return o, false, fmt.Errorf("maxWaitMs %q: want a whole number of milliseconds from 0 to %d", s, maxMaxWaitMs)
		}
		o.Observe = true
		o.Wait = time.Duration(n) * time.Millisecond
	}
	return o, wait, nil
}

// freeze serves POST /freeze: 204 once the freeze is requested; with
// maxWaitMs, 200 and what was observed once every cgroup read back frozen
// or the wait ended.
func (h *Hooks) freeze(w http.ResponseWriter, r *http.Request) {
	o, wait, err := freezeQuery(r)
	if err != nil {
		server.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if h.o.Cgroups == nil {
		server.WriteError(w, http.StatusNotImplemented, "cgroups are unavailable on this machine (see envd's startup log): nothing to freeze")
		return
	}
	res, err := h.o.Cgroups.Freeze(r.Context(), o)
	if err != nil {
		server.WriteError(w, http.StatusInternalServerError, err.Error()+" (nothing was left frozen)")
		return
	}
	h.log.Info("workload frozen", "mode", res.Mode, "requested", res.Requested, "pre_frozen", res.PreFrozen, "failed", res.Failed, "not_frozen", res.NotFrozen)
	if !wait {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, res)
}

// unfreeze serves POST /unfreeze: thaw what /freeze froze.
func (h *Hooks) unfreeze(w http.ResponseWriter, r *http.Request) {
	if h.o.Cgroups == nil {
		server.WriteError(w, http.StatusNotImplemented, "cgroups are unavailable on this machine (see envd's startup log): nothing to thaw")
		return
	}
	n, err := h.o.Cgroups.Thaw()
	if err != nil {
		server.WriteError(w, http.StatusInternalServerError, fmt.Sprintf("thawed %d cgroups: %v", n, err))
		return
	}
	h.log.Info("workload thawed", "cgroups", n)
	w.WriteHeader(http.StatusNoContent)
}

// FIFREEZE and FITHAW, _IOWR('X', 119, int) and _IOWR('X', 120, int).
const (
	fiFreeze = 0xc0045877
	fiThaw   = 0xc0045878
)

// fsfreeze serves POST /fsfreeze: freeze the filesystem (idempotent), and
// arm the watchdog that thaws it if nothing does.
func (h *Hooks) fsfreeze(w http.ResponseWriter, r *http.Request) {
	if err := h.freezeFS(); err != nil {
		server.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Hooks) freezeFS() error {
	h.fsMu.Lock()
	defer h.fsMu.Unlock()
	if h.fsFrozen != nil {
		return nil
	}
	f, err := os.Open(h.o.FSPath)
	if err != nil {
		return fmt.Errorf("fsfreeze: open %s: %w", h.o.FSPath, err)
	}
	if err := ioctl(f, fiFreeze); err != nil && !errors.Is(err, syscall.EBUSY) {
		f.Close()
		return fmt.Errorf("fsfreeze %s: %w", h.o.FSPath, err)
	}
	h.fsFrozen = f
	h.watchdog = time.AfterFunc(h.o.FSWatchdog, func() {
		h.log.Warn("filesystem left frozen past the watchdog's bound: thawing it", "path", h.o.FSPath, "bound", h.o.FSWatchdog)
		if err := h.thawFS(); err != nil {
			h.log.Error("watchdog cannot thaw the filesystem", "path", h.o.FSPath, "error", err)
		}
	})
	h.log.Info("filesystem frozen", "path", h.o.FSPath, "watchdog", h.o.FSWatchdog)
	return nil
}

// fsthaw serves POST /fsthaw (idempotent).
func (h *Hooks) fsthaw(w http.ResponseWriter, r *http.Request) {
	if err := h.thawFS(); err != nil {
		server.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// thawFS thaws the filesystem. A filesystem not frozen (or thawed by
// someone else) is fine.
func (h *Hooks) thawFS() error {
	h.fsMu.Lock()
	defer h.fsMu.Unlock()
	if h.watchdog != nil {
		h.watchdog.Stop()
		h.watchdog = nil
	}
	f := h.fsFrozen
	if f == nil {
		var err error
		if f, err = os.Open(h.o.FSPath); err != nil {
			return fmt.Errorf("fsthaw: open %s: %w", h.o.FSPath, err)
		}
	}
	err := ioctl(f, fiThaw)
	f.Close()
	h.fsFrozen = nil
	if err != nil && !errors.Is(err, syscall.EINVAL) { // EINVAL: not frozen
		return fmt.Errorf("fsthaw %s: %w", h.o.FSPath, err)
	}
	return nil
}

// Resume thaws what the hooks froze, the root filesystem and the cgroups
// /freeze froze (never what the guest froze itself): /init calls it, as
// upstream's resume does, for a sandbox restored from a snapshot taken
// frozen. It waits for a hook call in progress (they are bounded) rather
// than refusing, and does nothing when nothing is frozen.
func (h *Hooks) Resume() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	h.fsMu.Lock()
	fsFrozen := h.fsFrozen != nil
	h.fsMu.Unlock()
	if fsFrozen {
		if err := h.thawFS(); err != nil {
			errs = append(errs, err)
		} else {
			h.log.Info("filesystem thawed by /init")
		}
	}
	if h.o.Cgroups != nil {
		n, err := h.o.Cgroups.Thaw()
		if err != nil {
			errs = append(errs, fmt.Errorf("thaw the workload: %w", err))
		}
		if n > 0 {
			h.log.Info("workload thawed by /init", "cgroups", n)
		}
	}
	return errors.Join(errs...)
}

// Close thaws a filesystem envd left frozen (shutdown).
func (h *Hooks) Close() error {
	h.fsMu.Lock()
	frozen := h.fsFrozen != nil
	h.fsMu.Unlock()
	if frozen {
		return h.thawFS()
	}
	return nil
}

func ioctl(f *os.File, req uint) error {
	var err error
	rc, cerr := f.SyscallConn()
	if cerr != nil {
		return cerr
	}
	if cerr := rc.Control(func(fd uintptr) {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, uintptr(req), 0)
		if errno != 0 {
			err = errno
		}
	}); cerr != nil {
		return cerr
	}
	return err
}

// CollapseResult is what /collapse did.
type CollapseResult struct {
	Regions     int   `json:"regions"`     // anonymous regions of envd's memory looked at
	Chunks      int   `json:"chunks"`      // 2 MiB aligned chunks in them
	Collapsed   int   `json:"collapsed"`   // chunks now backed by a huge page
	AlreadyHuge int   `json:"alreadyHuge"` // chunks that were before
	Skipped     int   `json:"skipped"`     // chunks the kernel would not collapse (EINVAL: a kernel without MADV_COLLAPSE)
	ElapsedMs   int64 `json:"elapsedMs"`
}

const hugePage = 2 << 20

// madvCollapse is MADV_COLLAPSE (Linux 6.1).
const madvCollapse = 25

// collapse serves POST /collapse: best effort, MADV_COLLAPSE over envd's
// anonymous read-write regions, 2 MiB at a time.
func (h *Hooks) collapse(w http.ResponseWriter, r *http.Request) {
	began := time.Now()
	regions, err := anonRegions()
	if err != nil {
		server.WriteError(w, http.StatusInternalServerError, "collapse: "+err.Error())
		return
	}
	var res CollapseResult
	for _, rg := range regions {
		res.Regions++
		res.AlreadyHuge += int(rg.huge / hugePage)
		for a := (rg.start + hugePage - 1) &^ (hugePage - 1); a+hugePage <= rg.end; a += hugePage {
			if r.Context().Err() != nil {
				break
			}
			res.Chunks++
			_, _, errno := unix.Syscall(unix.SYS_MADVISE, a, hugePage, madvCollapse)
			if errno != 0 {
				res.Skipped++
				continue
			}
			res.Collapsed++
		}
	}
	res.ElapsedMs = time.Since(began).Milliseconds()
	writeJSON(w, res)
}

type region struct {
	start, end uintptr
	huge       uintptr // AnonHugePages, bytes
}

// anonRegions lists envd's anonymous private read-write mappings (its Go
// heap among them) from /proc/self/smaps.
func anonRegions() ([]region, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []region
	cur := -1
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fs := strings.Fields(line)
		if len(fs) == 0 {
			continue
		}
		if strings.Contains(fs[0], "-") && len(fs) >= 5 && !strings.HasSuffix(fs[0], ":") {
			cur = -1
			anon := len(fs) == 5 || fs[5] == "[heap]"
			if !anon || fs[1] != "rw-p" {
				continue
			}
			lo, hi, _ := strings.Cut(fs[0], "-")
			s, err1 := strconv.ParseUint(lo, 16, 64)
			e, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 != nil || err2 != nil {
				continue
			}
			out = append(out, region{start: uintptr(s), end: uintptr(e)})
			cur = len(out) - 1
			continue
		}
		if cur >= 0 && fs[0] == "AnonHugePages:" && len(fs) >= 2 {
			if kb, err := strconv.ParseUint(fs[1], 10, 64); err == nil {
				out[cur].huge = uintptr(kb << 10)
			}
		}
	}
	return out, sc.Err()
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		server.WriteError(w, http.StatusInternalServerError, "encode result: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}
