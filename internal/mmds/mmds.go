// Package mmds reads the boot metadata a Firecracker host publishes to its
// guest through the MMDS (microVM metadata service), IMDSv2-style: a session
// token from PUT /latest/api/token, then GET / as JSON with that token. The
// metadata names the sandbox and its template, where logs go, and a hash of
// the access token the orchestrator will send to /init.
//
// Every answer is bounded (size and time) and checked: an MMDS that answers
// HTML, an error, too much or too slowly is an error, never a hang.
package mmds

import (
	"bytes"
	"context"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/backoff"
)

// DefaultURL is where a Firecracker guest reaches the MMDS.
const DefaultURL = "http://169.254.169.254"

// Bounds of the MMDS's answers.
const (
	// MaxTokenBytes bounds the session token (Firecracker's are a few dozen
	// bytes).
	MaxTokenBytes = 4 << 10
	// MaxMetadataBytes bounds the metadata document (Firecracker's own data
	// store holds 50 KiB by default).
	MaxMetadataBytes = 64 << 10
	// MaxIDBytes bounds instanceID and envID: they become environment
	// variables and log attributes.
	MaxIDBytes = 256
)

// Metadata is the MMDS's document, with the host's field names on the wire.
type Metadata struct {
	SandboxID  string `json:"instanceID"`
	TemplateID string `json:"envID"`
	// LogsAddress is where the host collects the sandbox's logs.
	LogsAddress string `json:"address"`
	// AccessTokenHash is HashToken of the token /init must carry; empty
	// when the host published none.
	AccessTokenHash string `json:"accessTokenHash"`
}

// Ready tells whether the host has published the sandbox's identity yet:
// an MMDS may answer before its data is in place.
func (m Metadata) Ready() bool { return m.SandboxID != "" }

// HashToken is how the host hashes the access token it publishes as
// accessTokenHash: SHA-512 of the token's bytes, in lowercase hex.
func HashToken(token string) string {
	sum := sha512.Sum512([]byte(token))
	return hex.EncodeToString(sum[:])
}

// ErrBadHash is returned by MatchToken for a published hash that is not a
// SHA-512 hex digest: no token can match it.
var ErrBadHash = errors.New("accessTokenHash is not a SHA-512 digest in hex (128 hex digits)")

// MatchToken tells whether token is the one hash was made from, in time
// independent of where they differ.
func MatchToken(hash, token string) (bool, error) {
	want, err := hex.DecodeString(hash)
	if err != nil || len(want) != sha512.Size {
		return false, ErrBadHash
	}
	got := sha512.Sum512([]byte(token))
	return subtle.ConstantTimeCompare(got[:], want) == 1, nil
}

// Options configures a Client. Zero values pick the defaults.
type Options struct {
	// Timeout bounds each request (the token's and the document's). Zero:
	// 2 s; the MMDS lives in the VMM and answers in microseconds.
	Timeout time.Duration
	// TokenTTL is the session token's lifetime asked for. Zero: 60 s.
	TokenTTL time.Duration
	// Transport sends the requests. Nil: a transport of its own that never
	// uses a proxy (the MMDS is link-local).
	Transport http.RoundTripper
	// Clock times Poll's waits between attempts. Nil: the real clock.
	Clock quartz.Clock
}

// Client reads the MMDS at one base URL. Safe for concurrent use.
type Client struct {
	base  *url.URL
	hc    *http.Client
	ttl   time.Duration
	clock quartz.Clock
}

// New returns a client of the MMDS at baseURL (DefaultURL in a Firecracker
// guest): an http URL with a host and no query.
func New(baseURL string, o Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("MMDS URL %q: %w", baseURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("MMDS URL %q: want http://HOST[:PORT] (for example %s)", baseURL, DefaultURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.TokenTTL <= 0 {
		o.TokenTTL = time.Minute
	}
	if o.Clock == nil {
		o.Clock = quartz.NewReal()
	}
	if o.Transport == nil {
		o.Transport = &http.Transport{
			Proxy:                 nil, // never through a proxy: HTTP_PROXY does not know a link-local address
			MaxIdleConns:          1,
			IdleConnTimeout:       30 * time.Second,
			ResponseHeaderTimeout: o.Timeout,
		}
	}
	hc := &http.Client{
		Transport: o.Transport,
		Timeout:   o.Timeout,
		// The MMDS never redirects; one that does is not the MMDS.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &Client{base: u, hc: hc, ttl: o.TokenTTL, clock: o.Clock}, nil
}

// URL is the base URL the client reads.
func (c *Client) URL() string { return c.base.String() }

// Close releases the client's idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Get reads the metadata once: a session token, then the document.
func (c *Client) Get(ctx context.Context) (Metadata, error) {
	token, err := c.token(ctx)
	if err != nil {
		return Metadata{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base.String()+"/", nil)
	if err != nil {
		return Metadata{}, err
	}
	req.Header.Set("X-metadata-token", token)
	req.Header.Set("Accept", "application/json")
	body, res, err := c.do(req, MaxMetadataBytes, "metadata")
	if err != nil {
		return Metadata{}, err
	}
	return parse(body, res.Header.Get("Content-Type"))
}

// token asks for a session token.
func (c *Client) token(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.base.String()+"/latest/api/token", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("X-metadata-token-ttl-seconds", strconv.Itoa(int(c.ttl/time.Second)))
	body, _, err := c.do(req, MaxTokenBytes, "session token")
	if err != nil {
		return "", err
	}
	token := string(bytes.TrimSpace(body))
	if token == "" {
		return "", errors.New("MMDS session token: empty answer")
	}
	for _, r := range token {
		// It goes back in a header: printable ASCII only.
		if r < 0x21 || r > 0x7e {
			return "", fmt.Errorf("MMDS session token: not a header value (byte %q)", r)
		}
	}
	return token, nil
}

// do sends req and reads at most limit bytes of a 200 answer.
func (c *Client) do(req *http.Request, limit int64, what string) ([]byte, *http.Response, error) {
	res, err := c.hc.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("MMDS %s: %w", what, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		snippet, _ := io.ReadAll(io.LimitReader(res.Body, 200))
		return nil, nil, fmt.Errorf("MMDS %s: %s %s: %s", what, req.Method, req.URL.Path, statusText(res.Status, snippet))
	}
	if res.ContentLength > limit {
		return nil, nil, fmt.Errorf("MMDS %s: answer of %d bytes is over the %d-byte limit", what, res.ContentLength, limit)
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, limit+1))
	if err != nil {
		return nil, nil, fmt.Errorf("MMDS %s: read the answer: %w", what, err)
	}
	if int64(len(body)) > limit {
		return nil, nil, fmt.Errorf("MMDS %s: answer over the %d-byte limit", what, limit)
	}
	return body, res, nil
}

// statusText is a status and the start of its body, printable.
func statusText(status string, body []byte) string {
	s := strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return ' '
	}, strings.ToValidUTF8(string(body), "?"))
	if s = strings.TrimSpace(s); s == "" {
		return status
	}
	return status + " " + strconv.Quote(s)
}

// parse checks and decodes the document.
func parse(body []byte, contentType string) (Metadata, error) {
	if mt, _, err := mime.ParseMediaType(contentType); contentType != "" && (err != nil || mt != "application/json") {
		return Metadata{}, fmt.Errorf("MMDS metadata: Content-Type %q, want application/json", contentType)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return Metadata{}, fmt.Errorf("MMDS metadata: not a JSON object: %w", err)
	}
	var m Metadata
	fields := []struct {
		name string
		dst  *string
		id   bool
	}{
		{"instanceID", &m.SandboxID, true},
		{"envID", &m.TemplateID, true},
		{"address", &m.LogsAddress, false},
		{"accessTokenHash", &m.AccessTokenHash, false},
	}
	for _, f := range fields {
		v, ok := raw[f.name]
		if !ok || string(v) == "null" {
			continue
		}
		if err := json.Unmarshal(v, f.dst); err != nil {
			return Metadata{}, fmt.Errorf("MMDS metadata: %s is not a string", f.name)
		}
		if err := checkValue(*f.dst, f.id); err != nil {
			return Metadata{}, fmt.Errorf("MMDS metadata: %s %w", f.name, err)
		}
	}
	return m, nil
}

// checkValue refuses what cannot be an environment variable's value or a
// log attribute: control characters (a NUL would make every process start
// fail), invalid UTF-8, and ids longer than MaxIDBytes.
func checkValue(s string, id bool) error {
	if id && len(s) > MaxIDBytes {
		return fmt.Errorf("is %d bytes long, over the %d-byte limit", len(s), MaxIDBytes)
	}
	if !utf8.ValidString(s) {
		return errors.New("is not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("holds the control character %q", r)
		}
	}
	return nil
}

// Backoff is the schedule of a poll: the first wait, how much each next
// one grows, and the longest. Poll spreads each wait by a tenth (see
// policy).
type Backoff struct {
	First, Max time.Duration
	Factor     float64
}

// DefaultBackoff starts at 50 ms, as the host expects the guest to poll at
// boot, and backs off to 2 s.
var DefaultBackoff = Backoff{First: 50 * time.Millisecond, Max: 2 * time.Second, Factor: 1.5}

// Next is the wait after one of prev, before its spread; prev 0 is the
// first.
func (b Backoff) Next(prev time.Duration) time.Duration {
	return b.policy().After(prev)
}

// policy is b as a backoff.Policy. Each wait is spread by a tenth, so
// that many guests restored from one snapshot do not poll in step.
func (b Backoff) policy() backoff.Policy {
	return backoff.Policy{Floor: b.First, Cap: b.Max, Factor: b.Factor, Jitter: 0.1}
}

// Poll reads the metadata until it is Ready, waiting between attempts as b
// says, and returns it; or returns ctx's error (with the last attempt's)
// once ctx ends. failed, if set, is told of every failed attempt.
func (c *Client) Poll(ctx context.Context, b Backoff, failed func(attempt int, err error)) (Metadata, error) {
	retry := backoff.New(b.policy(), c.clock, "mmds", "poll")
	var last error
	for attempt := 1; ctx.Err() == nil; attempt++ {
		m, err := c.Get(ctx)
		if err == nil && !m.Ready() {
			err = errors.New("MMDS metadata: no instanceID yet")
		}
		if err == nil {
			return m, nil
		}
		last = err
		if failed != nil && ctx.Err() == nil {
			failed(attempt, err)
		}
		if retry.Wait(ctx) != nil {
			break
		}
	}
	if last != nil {
		return Metadata{}, fmt.Errorf("%w (last attempt: %v)", context.Cause(ctx), last)
	}
	return Metadata{}, context.Cause(ctx)
}
