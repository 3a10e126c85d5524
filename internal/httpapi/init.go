package httpapi

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/backoff"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/mmds"
	"github.com/envd-dev/envd/internal/server"
)

// initRequest is the body of POST /init; every field is optional.
type initRequest struct {
	EnvVars        *map[string]string `json:"envVars"`
	AccessToken    *string            `json:"accessToken"`
	DefaultUser    *string            `json:"defaultUser"`
	DefaultWorkdir *string            `json:"defaultWorkdir"`
	Timestamp      *time.Time         `json:"timestamp"`
	// CABundle is PEM certificates to trust (init_trust.go); "" changes
	// nothing.
	CABundle *string `json:"caBundle"`
	// HyperloopIP is where the sandbox reaches the host's services
	// (init_hosts.go); "" changes nothing.
	HyperloopIP *string `json:"hyperloopIP"`
	// VolumeMounts are NFS mounts, made for LifecycleID
	// (init_volumes.go).
	VolumeMounts *[]volumeMount `json:"volumeMounts"`
	LifecycleID  *string        `json:"lifecycleID"`
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

// BootMetadata is what the host published for this sandbox at boot (the
// MMDS, see internal/mmds).
type BootMetadata interface {
	// AccessTokenHash is the hash (mmds.HashToken) of the token /init must
	// carry, as the host publishes it now; ok is false while the host has
	// published none, and /init then goes by the token envd holds.
	AccessTokenHash(ctx context.Context) (hash string, ok bool)
}

// initPlan is a checked /init: what it changes.
type initPlan struct {
	req        initRequest
	token      string // the token it sets, "" for none
	resetToken bool   // the host's hash authorizes no token: clear it
	certs      []*x509.Certificate
	hyperloop  netip.Addr
	volumes    []volumePlan
	lifecycle  string
}

// handleInit serves POST /init, the orchestrator's call: default env vars,
// access token, default user and working directory, the clock, trusted CA
// certificates, the host's events address and NFS volumes. Every field is
// checked before anything changes; the changes to the machine (trust
// store, hosts file, mounts) come first, each whole or not at all, and
// envd's own settings change only once they all succeeded, so a failed
// /init can be sent again as it was.
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

	plan := initPlan{req: req}
	if status, msg := a.checkInitToken(r.Context(), &plan); status != 0 {
		server.WriteError(w, status, msg)
		return
	}
	// A sandbox resumed from a snapshot taken frozen runs again, whatever
	// else this /init carries.
	if a.o.Resume != nil {
		if err := a.o.Resume(); err != nil {
			server.WriteError(w, http.StatusInternalServerError, "resume: "+err.Error())
			return
		}
	}
	// An /init older than one already applied arrived late: skip it.
	if req.Timestamp != nil && !a.lastInit.IsZero() && !req.Timestamp.After(a.lastInit) {
		a.log.Debug("ignored a stale /init", "timestamp", *req.Timestamp, "last", a.lastInit)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if status, msg := a.checkInit(&plan); status != 0 {
		server.WriteError(w, status, msg)
		return
	}
	if status, msg := a.applySystem(r.Context(), plan); status != 0 {
		server.WriteError(w, status, msg)
		return
	}

	switch {
	case plan.token != "":
		a.o.Token.Set(plan.token)
	case plan.resetToken:
		a.o.Token.Set("")
		a.log.Info("/init cleared the access token, as the host's metadata authorizes")
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
	if plan.hyperloop.IsValid() {
		a.o.Defaults.SetHostVar(eventsAddressVar, eventsAddress(plan.hyperloop))
	}
	if req.Timestamp != nil {
		a.lastInit = *req.Timestamp
		a.syncClock(*req.Timestamp)
	}
	w.WriteHeader(http.StatusNoContent)
}

// checkInitToken decides whether the /init may proceed, and which token it
// sets. Once the host has published a token's hash (the MMDS), only that
// token is accepted, whatever token envd holds: a resumed sandbox gets a
// new one that way. The hash of the empty token authorizes an /init
// without one, which then clears envd's. Without a hash: the first /init
// sets the token, later ones must repeat it. It returns a status and a
// message for a refused /init, 0 otherwise.
func (a *API) checkInitToken(ctx context.Context, p *initPlan) (int, string) {
	if p.req.AccessToken != nil {
		p.token = *p.req.AccessToken
	}
	if a.o.Boot != nil {
		if hash, ok := a.o.Boot.AccessTokenHash(ctx); ok {
			match, err := mmds.MatchToken(hash, p.token)
			switch {
			case err != nil:
				return http.StatusUnauthorized, fmt.Sprintf("access token validation failed: the host's metadata (MMDS) is unusable: %v", err)
			case !match && p.token == "":
				return http.StatusUnauthorized, "access token reset not authorized: the host's metadata (MMDS) names a token and this /init carries none"
			case !match:
				return http.StatusUnauthorized, "access token validation failed: the token is not the one whose hash the host published (MMDS accessTokenHash)"
			}
			p.resetToken = p.token == "" && a.o.Token.IsSet()
			return 0, ""
		}
	}
	if a.o.Token.IsSet() {
		if p.token == "" {
			return http.StatusUnauthorized, "access token reset not authorized"
		}
		if !a.o.Token.Match(p.token) {
			return http.StatusUnauthorized, "access token validation failed"
		}
	}
	return 0, ""
}

// checkInit checks every field but the token, and plans the volumes.
func (a *API) checkInit(p *initPlan) (int, string) {
	req := p.req
	if req.EnvVars != nil {
		if err := checkEnvVars(*req.EnvVars); err != nil {
			return http.StatusBadRequest, err.Error()
		}
	}
	if req.DefaultUser != nil && *req.DefaultUser != "" {
		if _, err := identity.Lookup(*req.DefaultUser); err != nil {
			return http.StatusBadRequest, fmt.Sprintf("defaultUser '%s': %v", *req.DefaultUser, err)
		}
	}
	if req.CABundle != nil && *req.CABundle != "" {
		certs, err := parseCABundle(*req.CABundle)
		if err != nil {
			return http.StatusBadRequest, err.Error()
		}
		p.certs = certs
	}
	if req.HyperloopIP != nil && *req.HyperloopIP != "" {
		ip, err := parseHyperloopIP(*req.HyperloopIP)
		if err != nil {
			return http.StatusBadRequest, err.Error()
		}
		p.hyperloop = ip
	}
	if req.LifecycleID != nil {
		p.lifecycle = *req.LifecycleID
	}
	if req.VolumeMounts == nil {
		if req.LifecycleID != nil {
			if err := checkVolumes(nil, p.lifecycle); err != nil {
				return http.StatusBadRequest, err.Error()
			}
		}
		return 0, ""
	}
	if err := checkVolumes(*req.VolumeMounts, p.lifecycle); err != nil {
		return http.StatusBadRequest, err.Error()
	}
	plans, err := planVolumes(*req.VolumeMounts, p.lifecycle, a.mounts)
	if err != nil {
		if _, ok := errors.AsType[conflictError](err); ok {
			return http.StatusConflict, err.Error()
		}
		return http.StatusInternalServerError, err.Error()
	}
	if len(plans) > 0 {
		if err := a.o.Mounter.Check(); err != nil {
			return http.StatusNotImplemented, "volumeMounts: " + err.Error()
		}
	}
	p.volumes = plans
	return 0, ""
}

// checkEnvVars refuses variables no process could be started with: execve
// takes "NAME=value" strings ending in NUL, so a name cannot be empty or
// hold "=" or NUL, and a value cannot hold NUL. The first bad one, by
// name, is named.
func checkEnvVars(vars map[string]string) error {
	const why = "no process could be started with it"
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		switch {
		case name == "":
			return fmt.Errorf("envVars: a variable has an empty name: %s; name it", why)
		case strings.IndexByte(name, 0) >= 0:
			return fmt.Errorf("envVars: the name %q holds a NUL byte: %s", name, why)
		case strings.IndexByte(name, '=') >= 0:
			return fmt.Errorf("envVars: the name %q holds \"=\": %s; a name ends at its first \"=\"", name, why)
		case strings.IndexByte(vars[name], 0) >= 0:
			return fmt.Errorf("envVars: the value of %q holds a NUL byte: %s", name, why)
		}
	}
	return nil
}

// applySystem makes /init's changes to the machine: the trust store, the
// hosts file, the mounts. It returns a status and a message when one
// failed (those before it stay made: sending the /init again redoes
// nothing that is done), 0 otherwise.
func (a *API) applySystem(ctx context.Context, p initPlan) (int, string) {
	if p.certs != nil {
		if err := installCAs(p.certs, caBundleFile, caLocalDir); err != nil {
			a.log.Error("cannot install /init's caBundle", "error", err)
			return http.StatusInternalServerError, fmt.Sprintf("caBundle: install the certificates: %v", err)
		}
		a.log.Info("trusting /init's CA certificates", "certificates", len(p.certs))
	}
	if p.hyperloop.IsValid() {
		if err := setHosts(hostsFile, p.hyperloop); err != nil {
			a.log.Error("cannot write the hosts entry of /init's hyperloopIP", "error", err)
			return http.StatusInternalServerError, fmt.Sprintf("hyperloopIP: %v", err)
		}
	}
	if len(p.volumes) > 0 {
		// A client that hangs up does not stop mounts half way; each is
		// bounded by mountTimeout.
		made, err := mountVolumes(context.WithoutCancel(ctx), a.o.Mounter, p.volumes, p.lifecycle)
		for path, rec := range made {
			a.mounts[path] = rec
		}
		for _, v := range p.volumes {
			if _, ok := made[v.vol.Path]; !ok && v.unmount {
				delete(a.mounts, v.vol.Path) // unmounted, then failed to mount
			}
		}
		if len(made) > 0 {
			a.log.Info("mounted /init's NFS volumes", "volumes", len(made), "lifecycle_id", p.lifecycle)
		}
		if err != nil {
			a.log.Error("cannot mount /init's NFS volumes", "error", err)
			return http.StatusInternalServerError, fmt.Sprintf("volumeMounts: %v", err)
		}
	}
	return 0, ""
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
		a.log.Warn("cannot set the clock", "offset", off, "error", err)
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
	m, err := a.readMetrics(r.Context())
	if err != nil {
		if r.Context().Err() != nil {
			return // the client is gone
		}
		a.log.Warn("cannot read metrics", "error", err)
		server.WriteError(w, http.StatusInternalServerError, fmt.Sprintf("read metrics: %v", err))
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(m)
}

func (a *API) readMetrics(ctx context.Context) (metricsBody, error) {
	m := metricsBody{TS: time.Now().Unix()}
	var err error
	if m.CPUCount, m.CPUUsedPct, err = a.cpu(ctx); err != nil {
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

// cpuFirstSample is how long cpu samples the CPUs' use when it has no
// earlier sample to compare with.
const cpuFirstSample = 100 * time.Millisecond

// cpu returns the number of CPUs and their use in percent since the
// previous call, rounded to two decimals. With no usable previous sample
// (the first call, or counters that have not moved since) it waits
// cpuFirstSample on the API's clock, and no longer than ctx lasts.
func (a *API) cpu(ctx context.Context) (int, float64, error) {
	a.cpuMu.Lock()
	defer a.cpuMu.Unlock()
	prev := a.lastCPU
	cur, err := readCPU()
	if err != nil {
		return 0, 0, err
	}
	if prev.at.IsZero() || cur.total <= prev.total {
		prev = cur
		if err := backoff.Sleep(ctx, a.o.Clock, cpuFirstSample, "httpapi", "cpu"); err != nil {
			return 0, 0, fmt.Errorf("sample the CPUs' use: %w", err)
		}
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
