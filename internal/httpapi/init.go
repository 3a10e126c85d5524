package httpapi

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/server"
)

// initRequest is the body of POST /init; every field is optional. Fields
// upstream also takes (caBundle, hyperloopIP, volumeMounts, lifecycleID)
// are accepted and ignored.
type initRequest struct {
	EnvVars        *map[string]string `json:"envVars"`
	AccessToken    *string            `json:"accessToken"`
	DefaultUser    *string            `json:"defaultUser"`
	DefaultWorkdir *string            `json:"defaultWorkdir"`
	Timestamp      *time.Time         `json:"timestamp"`
}

// maxInitBody bounds the body of POST /init, which is read whole: its env
// vars must fit in a process's environment anyway (2 MiB of execve
// arguments and environment with the usual stack limit, shared with the
// command line), so half of that leaves room for the rest.
const maxInitBody = 1 << 20

// Clock skew /init tolerates before it sets the clock (with SetClock): the
// machine may be this much behind the orchestrator, or this much ahead.
const (
	maxClockBehind = 50 * time.Millisecond
	maxClockAhead  = 5 * time.Second
)

// handleInit serves POST /init, the orchestrator's call: default env vars, access
// token, default user and working directory, and the clock. Nothing is
// changed unless every field is valid.
func (a *API) handleInit(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Envd-Version", a.o.Version)
	w.Header().Set("Cache-Control", "no-store")
	var req initRequest
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxInitBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			server.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("/init body larger than %d bytes: send fewer or shorter envVars", maxInitBody))
			return
		}
		server.WriteError(w, http.StatusBadRequest, fmt.Sprintf("read /init body: %v", err))
		return
	}
	if len(strings.TrimSpace(string(b))) > 0 {
		if err := json.Unmarshal(b, &req); err != nil {
			server.WriteError(w, http.StatusBadRequest, fmt.Sprintf("invalid /init body: %v", err))
			return
		}
	}
	a.initMu.Lock()
	defer a.initMu.Unlock()

	// Once a token is set, only a request that carries it may re-initialize:
	// the first /init sets it, later ones must repeat it.
	token := ""
	if req.AccessToken != nil {
		token = *req.AccessToken
	}
	if a.o.Token.IsSet() {
		if token == "" {
			server.WriteError(w, http.StatusUnauthorized, "access token reset not authorized")
			return
		}
		if !a.o.Token.Match(token) {
			server.WriteError(w, http.StatusUnauthorized, "access token validation failed")
			return
		}
	}
	// An /init older than one already applied arrived late: skip it.
	if req.Timestamp != nil && !a.lastInit.IsZero() && !req.Timestamp.After(a.lastInit) {
		a.log.Debug("ignored a stale /init", "timestamp", *req.Timestamp, "last", a.lastInit)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if req.DefaultUser != nil && *req.DefaultUser != "" {
		if _, err := identity.Lookup(*req.DefaultUser); err != nil {
			server.WriteError(w, http.StatusBadRequest, fmt.Sprintf("defaultUser '%s': %v", *req.DefaultUser, err))
			return
		}
	}

	if token != "" {
		a.o.Token.Set(token)
	}
	if req.EnvVars != nil {
		a.o.Defaults.SetEnv(*req.EnvVars)
	}
	if req.DefaultUser != nil {
		a.o.Defaults.SetUser(*req.DefaultUser)
	}
	if req.DefaultWorkdir != nil {
		a.o.Defaults.SetWorkdir(*req.DefaultWorkdir)
	}
	if req.Timestamp != nil {
		a.lastInit = *req.Timestamp
		a.syncClock(*req.Timestamp)
	}
	w.WriteHeader(http.StatusNoContent)
}

// syncClock sets the clock to ts when it is off by more than the tolerated
// skew, and only when envd was started with -sync-clock (SetClock set).
func (a *API) syncClock(ts time.Time) {
	now := time.Now()
	off := ts.Sub(now)
	if off <= maxClockBehind && -off <= maxClockAhead {
		return
	}
	if a.o.SetClock == nil {
		a.log.Info("clock differs from the orchestrator's; not syncing it without -sync-clock", "offset", off)
		return
	}
	if err := a.o.SetClock(ts); err != nil {
		a.log.Warn("cannot set the clock", "offset", off, "err", err)
		return
	}
	a.log.Info("set the clock from /init", "offset", off)
}

// SetSystemClock sets the machine's real-time clock: the SetClock of a
// daemon started with -sync-clock.
func SetSystemClock(t time.Time) error {
	ts := unix.NsecToTimespec(t.UnixNano())
	return unix.ClockSettime(unix.CLOCK_REALTIME, &ts)
}

// envs serves GET /envs: the environment every process gets from the daemon.
func (a *API) envs(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(a.o.Defaults.Env())
}

// metricsBody is GET /metrics' answer, with upstream's field names.
type metricsBody struct {
	TS          int64   `json:"ts"`
	CPUCount    int     `json:"cpu_count"`
	CPUUsedPct  float64 `json:"cpu_used_pct"`
	MemTotalMiB uint64  `json:"mem_total_mib"`
	MemUsedMiB  uint64  `json:"mem_used_mib"`
	MemTotal    uint64  `json:"mem_total"`
	MemUsed     uint64  `json:"mem_used"`
	MemCache    uint64  `json:"mem_cache"`
	DiskUsed    uint64  `json:"disk_used"`
	DiskTotal   uint64  `json:"disk_total"`
}

// metrics serves GET /metrics from /proc/stat, /proc/meminfo and statfs(/).
func (a *API) metrics(w http.ResponseWriter, r *http.Request) {
	m, err := a.readMetrics()
	if err != nil {
		a.log.Warn("cannot read metrics", "err", err)
		server.WriteError(w, http.StatusInternalServerError, fmt.Sprintf("read metrics: %v", err))
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(m)
}

func (a *API) readMetrics() (metricsBody, error) {
	m := metricsBody{TS: time.Now().Unix()}
	var err error
	if m.CPUCount, m.CPUUsedPct, err = a.cpu(); err != nil {
		return m, err
	}
	mem, err := meminfo()
	if err != nil {
		return m, err
	}
	m.MemTotal = mem["MemTotal"]
	m.MemCache = mem["Cached"] + mem["SReclaimable"]
	used := m.MemTotal - mem["MemFree"] - mem["Buffers"] - m.MemCache
	if used > m.MemTotal { // the counters are not read atomically
		used = m.MemTotal - mem["MemAvailable"]
	}
	m.MemUsed = used
	m.MemTotalMiB, m.MemUsedMiB = m.MemTotal>>20, m.MemUsed>>20
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err != nil {
		return m, fmt.Errorf("statfs /: %w", err)
	}
	m.DiskTotal = st.Blocks * uint64(st.Bsize)
	m.DiskUsed = (st.Blocks - st.Bavail) * uint64(st.Bsize)
	return m, nil
}

// cpuSample is the aggregate line of /proc/stat: busy and total jiffies.
type cpuSample struct {
	at          time.Time
	busy, total uint64
	count       int
}

// cpu returns the number of CPUs and their use in percent since the
// previous call (over a tenth of a second on the first call), rounded to
// two decimals.
func (a *API) cpu() (int, float64, error) {
	a.cpuMu.Lock()
	defer a.cpuMu.Unlock()
	prev := a.lastCPU
	cur, err := readCPU()
	if err != nil {
		return 0, 0, err
	}
	if prev.at.IsZero() || cur.total <= prev.total {
		prev = cur
		time.Sleep(100 * time.Millisecond)
		if cur, err = readCPU(); err != nil {
			return 0, 0, err
		}
	}
	a.lastCPU = cur
	pct := 0.0
	if dt := cur.total - prev.total; dt > 0 {
		pct = float64(cur.busy-prev.busy) / float64(dt) * 100
	}
	return cur.count, math.Round(pct*100) / 100, nil
}

func readCPU() (cpuSample, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuSample{}, err
	}
	defer f.Close()
	s := cpuSample{at: time.Now()}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || !strings.HasPrefix(fields[0], "cpu") {
			continue
		}
		if fields[0] != "cpu" {
			s.count++
			continue
		}
		for i, v := range fields[1:] {
			n, _ := strconv.ParseUint(v, 10, 64)
			// user nice system idle iowait irq softirq steal; guest time is
			// already counted in user and nice.
			if i >= 8 {
				break
			}
			s.total += n
			if i != 3 && i != 4 {
				s.busy += n
			}
		}
	}
	if err := sc.Err(); err != nil {
		return cpuSample{}, err
	}
	if s.total == 0 {
		return cpuSample{}, errors.New("no cpu line in /proc/stat")
	}
	if s.count == 0 {
		s.count = runtime.NumCPU()
	}
	return s, nil
}

// meminfo reads /proc/meminfo in bytes.
func meminfo() (map[string]uint64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		n, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			continue
		}
		if len(fields) > 1 && fields[1] == "kB" {
			n *= 1024
		}
		out[k] = n
	}
	if out["MemTotal"] == 0 {
		return nil, errors.New("no MemTotal in /proc/meminfo")
	}
	return out, sc.Err()
}
