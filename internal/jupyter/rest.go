package jupyter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/backoff"
)

// ClientOptions configures a Client made with NewClient.
type ClientOptions struct {
	// Logger receives debug logs. Zero: slog.Default().
	Logger *slog.Logger
	// DisableQuickAck turns off the TCP_QUICKACK read wrapper on the
	// client's connections. Zero: enabled. Only useful to measure it.
	DisableQuickAck bool
	// ConnectionDir is where the server writes its kernels' connection
	// files: kernels connected with KernelOptions.Direct then take the
	// direct path (direct.go). Zero: none.
	ConnectionDir string
	// Clock times the retries of a request the server answered 5xx
	// (doRetrying). Zero: the real clock.
	Clock quartz.Clock
}

// Client talks to one Jupyter server: its REST API, and kernel channels
// through Connect. It is safe for concurrent use.
//
// A Client obtained from Supervisor.Client is bound to one run of the
// server: once that server has exited, every call fails with
// ErrServerRestarted (or ErrStopped) instead of reaching its successor.
type Client struct {
	base      *url.URL // http://host:port, no trailing slash
	token     string
	transport *http.Transport
	http      *http.Client
	log       *slog.Logger
	// stale reports why this client's server is gone, or nil while it is
	// alive. nil func: never stale (a client made with NewClient).
	stale   func() error
	conns   kernelConns // open kernel connections (kernel.go)
	connDir string      // ClientOptions.ConnectionDir
	clock   quartz.Clock
	// starting is held shared by kernel starts and exclusively by listing:
	// jupyter_server 1.x puts a new kernel in its map before giving it a
	// last_activity, and GET /api/kernels answers 500 (AttributeError) for
	// the whole time a kernel takes to become ready.
	starting sync.RWMutex
}

// NewClient returns a client for the server at baseURL (e.g.
// "http://127.0.0.1:8888") authenticating with token. Close it when done.
func NewClient(baseURL, token string, opts ClientOptions) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("jupyter: bad server url %q", baseURL)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	clock := opts.Clock
	if clock == nil {
		clock = quartz.NewReal()
	}
	d := &net.Dialer{Timeout: 10 * time.Second}
	quickAck := !opts.DisableQuickAck
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil || !quickAck {
				return c, err
			}
			return withQuickAck(c), nil
		},
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     90 * time.Second,
		// The server is local: no proxy, even if the environment sets one.
		Proxy: nil,
	}
	return &Client{
		base:      u,
		token:     token,
		transport: tr,
		http:      &http.Client{Transport: tr},
		log:       log,
		connDir:   opts.ConnectionDir,
		clock:     clock,
	}, nil
}

// URL returns the server's base URL.
func (c *Client) URL() string { return c.base.String() }

// Close releases idle connections. Kernels connected through the client
// must be closed separately.
func (c *Client) Close() { c.transport.CloseIdleConnections() }

// KernelSpec describes one installed kernel.
type KernelSpec struct {
	Name          string            `json:"-"`
	DisplayName   string            `json:"display_name"`
	Language      string            `json:"language"`
	Argv          []string          `json:"argv"`
	Env           map[string]string `json:"env"`
	InterruptMode string            `json:"interrupt_mode"` // "signal" or "message"
}

// KernelSpecs is the server's list of kernelspecs.
type KernelSpecs struct {
	Default string
	Specs   map[string]KernelSpec // by name
}

// KernelModel is the REST view of a running kernel. Its ExecutionState is
// unreliable around deaths and restarts; use the kernel channel instead.
type KernelModel struct {
	ID             string    `json:"id"`
	Name           string    `json:"name"`
	LastActivity   time.Time `json:"last_activity"`
	ExecutionState string    `json:"execution_state"`
	Connections    int       `json:"connections"`
}

// KernelSpecs lists the installed kernels.
func (c *Client) KernelSpecs(ctx context.Context) (*KernelSpecs, error) {
	var wire struct {
		Default     string `json:"default"`
		KernelSpecs map[string]struct {
			Name string     `json:"name"`
			Spec KernelSpec `json:"spec"`
		} `json:"kernelspecs"`
	}
	if err := c.do(ctx, "list kernelspecs", http.MethodGet, "/api/kernelspecs", nil, http.StatusOK, &wire); err != nil {
		return nil, err
	}
	out := &KernelSpecs{Default: wire.Default, Specs: make(map[string]KernelSpec, len(wire.KernelSpecs))}
	for name, s := range wire.KernelSpecs {
		s.Spec.Name = name
		out.Specs[name] = s.Spec
	}
	return out, nil
}

// StartKernel starts a kernel from the named kernelspec with its working
// directory at dir, an absolute path. The server must run with root_dir "/"
// (the supervisor's does). Create dir first: Jupyter silently falls back to
// the nearest existing ancestor.
//
// The kernel is not ready when this returns; Connect waits for it.
func (c *Client) StartKernel(ctx context.Context, name, dir string) (*KernelModel, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("jupyter: kernel directory %q is not absolute", dir)
	}
	// Cleaning removes any "..": Jupyter does not sanitise them itself. The
	// API path is relative to root_dir, hence no leading slash.
	body := map[string]string{"name": name, "path": strings.TrimPrefix(filepath.Clean(dir), "/")}
	c.starting.RLock()
	defer c.starting.RUnlock()
	var m KernelModel
	if err := c.do(ctx, "start kernel", http.MethodPost, "/api/kernels", body, http.StatusCreated, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// Kernels lists the running kernels. It waits for kernels this client is
// starting to be ready (see Client.starting).
func (c *Client) Kernels(ctx context.Context) ([]KernelModel, error) {
	c.starting.Lock()
	defer c.starting.Unlock()
	var ms []KernelModel
	// jupyter_server 1.23 answers 500 (AttributeError: no last_activity)
	// when a kernel it is starting is listed before its first activity.
	if err := c.doRetrying(ctx, "list kernels", http.MethodGet, "/api/kernels", http.StatusOK, &ms); err != nil {
		return nil, err
	}
	return ms, nil
}

// Kernel returns one kernel's model.
func (c *Client) Kernel(ctx context.Context, id string) (*KernelModel, error) {
	var m KernelModel
	if err := c.do(ctx, "get kernel", http.MethodGet, kernelPath(id), nil, http.StatusOK, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// DeleteKernel shuts a kernel down. The server does not close the kernel's
// WebSockets: the Kernels connected to it through this client end at once
// with ErrKernelDied (close them when done).
//
// A kernel the server is restarting (its auto-restart after the kernel
// died) cannot be shut down until the new process is up: jupyter_server
// 1.23 answers 500 (InvalidStateError, its "ready" future still pending)
// for a second or two; see doRetrying.
func (c *Client) DeleteKernel(ctx context.Context, id string) error {
	if err := c.doRetrying(ctx, "delete kernel", http.MethodDelete, kernelPath(id), http.StatusNoContent, nil); err != nil {
		return err
	}
	c.conns.deleted(id)
	return nil
}

// retryFor bounds how long doRetrying tries again after the server's 5xx:
// what it waits out (a kernel's restart, its start) takes seconds on a
// loaded machine.
const retryFor = 30 * time.Second

// retryBackoff spaces doRetrying's attempts.
var retryBackoff = backoff.Policy{Floor: 50 * time.Millisecond, Cap: time.Second}

// doRetrying is do for a request without a body that jupyter_server
// answers 5xx while a kernel is between states (its races, not a
// failure of the request): tried again with backoff, for at most
// retryFor, until ctx ends. It returns the last attempt's error.
func (c *Client) doRetrying(ctx context.Context, op, method, path string, want int, out any) error {
	retry := backoff.New(retryBackoff, c.clock, "jupyter", "retry")
	var until time.Time
	for {
		err := c.do(ctx, op, method, path, nil, want, out)
		var herr *HTTPError
		if !errors.As(err, &herr) || herr.Status < 500 {
			return err
		}
		if until.IsZero() {
			until = c.clock.Now().Add(retryFor)
		}
		if c.clock.Now().Add(retry.Delay()).After(until) {
			return err
		}
		if retry.Wait(ctx) != nil {
			return err
		}
	}
}

// InterruptKernel sends the kernel SIGINT (or an interrupt_request,
// depending on its spec). Effects vary by kernel: ipykernel raises
// KeyboardInterrupt, IRkernel aborts, ijavascript loses its state, Deno
// ignores it.
func (c *Client) InterruptKernel(ctx context.Context, id string) error {
	return c.do(ctx, "interrupt kernel", http.MethodPost, kernelPath(id)+"/interrupt", nil, http.StatusNoContent, nil)
}

// RestartKernel restarts a kernel in place (same id, fresh state). It
// returns once the new kernel answered kernel_info. A Kernel connected to it
// must be told, or its next request may lose iopub messages: prefer
// Kernel.Restart.
func (c *Client) RestartKernel(ctx context.Context, id string) (*KernelModel, error) {
	var m KernelModel
	if err := c.do(ctx, "restart kernel", http.MethodPost, kernelPath(id)+"/restart", nil, http.StatusOK, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// health checks that the server answers: /api without auth (is it up?),
// then /api/status with the token (is it ours, and does the token work?).
func (c *Client) health(ctx context.Context) error {
	if err := c.do(ctx, "probe", http.MethodGet, "/api", nil, http.StatusOK, nil); err != nil {
		return err
	}
	return c.do(ctx, "status", http.MethodGet, "/api/status", nil, http.StatusOK, nil)
}

func kernelPath(id string) string { return "/api/kernels/" + url.PathEscape(id) }

// maxErrorBody bounds how much of an error response is read: enough to see
// the exception name at the end of Jupyter's tracebacks (~3 KiB).
const maxErrorBody = 64 << 10

// do performs one REST call and decodes a JSON answer into out (if non-nil).
func (c *Client) do(ctx context.Context, op, method, path string, in any, want int, out any) error {
	if err := c.staleErr(); err != nil {
		return err
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("jupyter: %s: %w", op, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, body)
	if err != nil {
		return fmt.Errorf("jupyter: %s: %w", op, err)
	}
	req.Header.Set("Authorization", "token "+c.token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if serr := c.staleErr(); serr != nil {
			return serr
		}
		return fmt.Errorf("jupyter: %s: %w", op, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return classify(op, resp.StatusCode, b)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body) // let the connection be reused
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("jupyter: %s: decode response: %w", op, err)
	}
	return nil
}

// classify maps an unexpected status to a sentinel where Jupyter's answer
// allows it. Jupyter 1.23 reports some of them as 500 with the exception in
// the body: NoSuchKernel for an unknown kernelspec name, and an HTTPError
// 404 "Kernel does not exist" for a restart of an unknown id.
func classify(op string, status int, body []byte) error {
	switch {
	case status == http.StatusNotFound:
		return fmt.Errorf("%s: %w", op, ErrKernelNotFound)
	case bytes.Contains(body, []byte("NoSuchKernel")),
		status == http.StatusNotImplemented: // newer servers answer 501 for an unknown name
		return fmt.Errorf("%s: %w", op, ErrNoSuchKernelSpec)
	case bytes.Contains(body, []byte("Kernel does not exist")):
		return fmt.Errorf("%s: %w", op, ErrKernelNotFound)
	}
	if len(body) > 4096 {
		body = body[:4096]
	}
	return &HTTPError{Op: op, Status: status, Body: string(body)}
}

// Err reports why the client's server is gone: ErrServerRestarted once the
// supervisor runs a newer generation, ErrStopped once it was stopped; nil
// while the server is the live one (and always for a client from NewClient).
// A Kernel connected through a stale client can never work again.
func (c *Client) Err() error { return c.staleErr() }

func (c *Client) staleErr() error {
	if c.stale == nil {
		return nil
	}
	return c.stale()
}
