// Package httpapi is envd's plain-HTTP API, wire-compatible with E2B's envd:
// GET and POST /files (download and upload), POST /init, GET /envs and
// GET /metrics. Errors are {"code":<status>,"message":...} (server.WriteError).
//
// /files and /init are public routes that check the access token themselves:
// /files also accepts signed URLs, /init validates the token it is given.
package httpapi

import (
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/internal/auth"
	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/server"
)

// Options configures New. Files, Defaults and Token are required.
type Options struct {
	Logger   *slog.Logger // zero: slog.Default()
	Files    *filesystem.Files
	Defaults *defaults.Defaults
	Token    *auth.Token
	// Version is sent in X-Envd-Version on every /init response.
	Version string
	// SetClock, when set, is how /init brings the machine's clock to the
	// timestamp it carries. Nil (the default, without -sync-clock): the clock
	// is never touched.
	SetClock func(time.Time) error
	// Now is the clock used for signature expiry. Zero: time.Now.
	Now func() time.Time
	// Clock times the wait between the two CPU samples of the first GET
	// /metrics. Zero: the real clock.
	Clock quartz.Clock
	// Boot is the host's boot metadata: once it has an access token's
	// hash, /init accepts that token only. Nil: none (not a Firecracker
	// guest, or -mmds-url off).
	Boot BootMetadata
	// Mounter makes /init's NFS volume mounts. Nil: NFSMounter (mount(8)
	// with mount.nfs).
	Mounter Mounter
	// Resume, if set, is called by every authorized /init first: it thaws
	// what the snapshot hooks froze (Hooks.Resume), as a sandbox resumed
	// from a snapshot must run again.
	Resume func() error
}

// API serves the HTTP API.
type API struct {
	o   Options
	log *slog.Logger

	initMu   sync.Mutex
	lastInit time.Time              // guarded by initMu: the newest /init timestamp applied
	mounts   map[string]mountRecord // guarded by initMu: the NFS mounts /init made, by path

	cpuMu   sync.Mutex
	lastCPU cpuSample // guarded by cpuMu
}

// New returns the API.
func New(o Options) *API {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Clock == nil {
		o.Clock = quartz.NewReal()
	}
	if o.Mounter == nil {
		o.Mounter = NFSMounter{}
	}
	return &API{o: o, log: o.Logger, mounts: map[string]mountRecord{}}
}

// Routes is the API's part of envd's route table.
func (a *API) Routes() []server.Route {
	return []server.Route{
		{Pattern: "GET /files", Handler: http.HandlerFunc(a.download), Public: true},
		{Pattern: "POST /files", Handler: http.HandlerFunc(a.upload), Public: true},
		{Pattern: "POST /files/compose", Handler: http.HandlerFunc(a.compose)},
		{Pattern: "POST /init", Handler: http.HandlerFunc(a.handleInit), Public: true},
		{Pattern: "GET /envs", Handler: http.HandlerFunc(a.envs)},
		{Pattern: "GET /metrics", Handler: http.HandlerFunc(a.metrics)},
	}
}

// status maps a domain error to the HTTP status of its kind.
func status(err error) int {
	switch {
	case errors.Is(err, filesystem.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, filesystem.ErrInvalid), errors.Is(err, filesystem.ErrLoop), errors.Is(err, identity.ErrBadPath),
		errors.Is(err, filesystem.ErrArchive):
		return http.StatusBadRequest
	case errors.Is(err, filesystem.ErrPermission):
		return http.StatusForbidden
	case errors.Is(err, filesystem.ErrExists):
		return http.StatusConflict
	case errors.Is(err, filesystem.ErrNoSpace):
		return http.StatusInsufficientStorage
	}
	return http.StatusInternalServerError
}

func writeErr(w http.ResponseWriter, err error) {
	server.WriteError(w, status(err), err.Error())
}
