package client

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"connectrpc.com/connect"
)

// Health checks that envd answers. It needs no token.
func (c *Client) Health(ctx context.Context) error {
	c.init()
	resp, err := c.get(ctx, "/health")
	if err != nil {
		return transportError("health", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		return httpError("health", resp)
	}
	return nil
}

func (c *Client) get(ctx context.Context, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, err
	}
	c.setToken(req.Header)
	return c.bulkHC.Do(req)
}

// Metrics is a snapshot of the sandbox's resources.
type Metrics struct {
	Time           time.Time
	CPUCount       int
	CPUUsedPercent float64
	MemTotal       uint64 // bytes
	MemUsed        uint64 // bytes
	MemCache       uint64 // bytes
	DiskTotal      uint64 // bytes, of /
	DiskUsed       uint64 // bytes, of /
}

// Metrics reads the sandbox's CPU, memory and disk use.
func (c *Client) Metrics(ctx context.Context) (*Metrics, error) {
	c.init()
	var m struct {
		TS         int64   `json:"ts"`
		CPUCount   int     `json:"cpu_count"`
		CPUUsedPct float64 `json:"cpu_used_pct"`
		MemTotal   uint64  `json:"mem_total"`
		MemUsed    uint64  `json:"mem_used"`
		MemCache   uint64  `json:"mem_cache"`
		DiskUsed   uint64  `json:"disk_used"`
		DiskTotal  uint64  `json:"disk_total"`
	}
	if err := c.getJSON(ctx, "metrics", "/metrics", &m); err != nil {
		return nil, err
	}
	return &Metrics{
		Time: time.Unix(m.TS, 0), CPUCount: m.CPUCount, CPUUsedPercent: m.CPUUsedPct,
		MemTotal: m.MemTotal, MemUsed: m.MemUsed, MemCache: m.MemCache,
		DiskTotal: m.DiskTotal, DiskUsed: m.DiskUsed,
	}, nil
}

// Envs returns the environment variables envd gives every process (those
// set by /init included).
func (c *Client) Envs(ctx context.Context) (map[string]string, error) {
	c.init()
	var m map[string]string
	if err := c.getJSON(ctx, "envs", "/envs", &m); err != nil {
		return nil, err
	}
	return m, nil
}

func (c *Client) getJSON(ctx context.Context, op, path string, v any) error {
	resp, err := c.get(ctx, path)
	if err != nil {
		return transportError(op, err)
	}
	if resp.StatusCode != http.StatusOK {
		return httpError(op, resp)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v); err != nil {
		return &Error{Op: op, Code: connect.CodeInternal, Message: "invalid answer: " + err.Error(), Err: err}
	}
	return nil
}

// InitOptions is what the orchestrator sets up a sandbox with. Zero fields
// are left as they are.
type InitOptions struct {
	// EnvVars replaces the environment variables envd gives every process
	// (nil: unchanged; empty: none).
	EnvVars map[string]string
	// AccessToken sets the token every later request must carry. The
	// client sends it from then on.
	AccessToken string
	// DefaultUser is who requests that name nobody run as.
	DefaultUser string
	// DefaultWorkdir is where processes start, and what an empty path means.
	DefaultWorkdir string
	// Timestamp is the orchestrator's clock, for an envd run with
	// -sync-clock. An /init older than one already applied is ignored.
	Timestamp time.Time
}

// Init sets up envd (POST /init), as the orchestrator does when a sandbox
// starts or resumes.
func (c *Client) Init(ctx context.Context, o InitOptions) error {
	c.init()
	body := map[string]any{}
	if o.EnvVars != nil {
		body["envVars"] = o.EnvVars
	}
	if o.AccessToken != "" {
		body["accessToken"] = o.AccessToken
	}
	if o.DefaultUser != "" {
		body["defaultUser"] = o.DefaultUser
	}
	if o.DefaultWorkdir != "" {
		body["defaultWorkdir"] = o.DefaultWorkdir
	}
	if !o.Timestamp.IsZero() {
		body["timestamp"] = o.Timestamp.UTC().Format(time.RFC3339Nano)
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/init", bytes.NewReader(b))
	if err != nil {
		return &Error{Op: "init", Code: connect.CodeInvalidArgument, Message: err.Error(), Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	c.setToken(req.Header)
	resp, err := c.bulkHC.Do(req)
	if err != nil {
		return transportError("init", err)
	}
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		return httpError("init", resp)
	}
	resp.Body.Close()
	if o.AccessToken != "" {
		tok := o.AccessToken
		c.token.Store(&tok)
	}
	return nil
}
