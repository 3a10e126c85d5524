package packages

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// An install that fetches from a package index fails fast when no index
// it would use answers: a manager left alone retries for seconds (pip: 8 s
// with its defaults) to minutes (npm: 70 s) before it says so, and then
// in words that do not name the index. So before the manager runs, envd
// asks the manager which indexes it would use (its own configuration, as
// the request's user, with the installer's environment) and tries to
// connect to each, through the proxy the manager would use; when none
// answers, the install fails with "no package index reachable at INDEX:
// WHY" and the manager does not run. An install from a local file needs
// no index up front; when it fails, the indexes are tried then, to say
// whether its dependencies could have been fetched.
//
// Reachable means a TCP connection (or a proxy's CONNECT) within
// reachTimeout: nothing is sent to the index itself, no TLS is spoken
// (the manager's certificates are its own), and any answer at all counts.
// A server that accepts and then is slow is the manager's to wait for.

// index is a package index an install may fetch from.
type index struct {
	url   *url.URL
	proxy *url.URL // the proxy the manager reaches it through; nil: direct
}

// netNeed says whether an install fetches from a package index.
type netNeed int

const (
	// netNone: it uses no index (pip --no-index, a removal).
	netNone netNeed = iota
	// netMaybe: it installs a local file, whose dependencies may come
	// from an index: the indexes are tried only to explain a failure.
	netMaybe
	// netNeeded: it fetches what it names from an index: the indexes are
	// tried before the manager runs.
	netNeeded
)

// Bounds of a reachability check: a first try, a short pause, a second
// try (a network that drops one packet still passes), each within
// reachTimeout. Offline, a name that does not resolve or a refused
// connection fail both tries at once; a network that drops everything
// costs 2 × reachTimeout.
const (
	reachTimeout = 4 * time.Second
	reachTries   = 2
	reachPause   = 500 * time.Millisecond
)

// dialContext dials for reachability checks; tests replace it.
var dialContext = (&net.Dialer{}).DialContext

// unreachable tries every index at once, and returns "" when one answers,
// else why none does: "no package index reachable at URL: WHY" (each
// index's reason, for several).
func unreachable(ctx context.Context, idx []index) string {
	if len(idx) == 0 {
		return ""
	}
	errs := make([]error, len(idx))
	var wg sync.WaitGroup
	for i, ix := range idx {
		wg.Go(func() {
			for try := range reachTries {
				if try > 0 {
					select {
					case <-time.After(reachPause):
					case <-ctx.Done():
						return
					}
				}
				if errs[i] = reach(ctx, ix); errs[i] == nil {
					return
				}
			}
		})
	}
	wg.Wait()
	var why []string
	for i, err := range errs {
		if err == nil {
			return ""
		}
		via := ""
		if idx[i].proxy != nil {
			via = " (through the proxy " + idx[i].proxy.Redacted() + ")"
		}
		why = append(why, idx[i].url.Redacted()+via+": "+netReason(err))
	}
	return "no package index reachable at " + strings.Join(why, "; nor at ")
}

// reach connects to ix's host, or has its proxy connect to it, within
// reachTimeout.
func reach(ctx context.Context, ix index) error {
	ctx, cancel := context.WithTimeout(ctx, reachTimeout)
	defer cancel()
	hostport := hostPort(ix.url)
	if ix.proxy == nil {
		c, err := dialContext(ctx, "tcp", hostport)
		if err != nil {
			return err
		}
		return c.Close()
	}
	c, err := dialContext(ctx, "tcp", hostPort(ix.proxy))
	if err != nil {
		return &proxyError{err: err}
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		c.SetDeadline(d)
	}
	// An https index is reached through a tunnel: the proxy's answer to
	// CONNECT says whether it got through. A plain http one is asked for
	// through the proxy; 502, 503 and 504 are the proxy's own failures.
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: hostport}, Host: hostport, Header: http.Header{}}
	if ix.url.Scheme == "http" {
		req = &http.Request{Method: http.MethodHead, URL: ix.url, Host: ix.url.Host, Header: http.Header{}, Close: true}
	}
	if u := ix.proxy.User; u != nil {
		pw, _ := u.Password()
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+pw)))
	}
	if err := req.WriteProxy(c); err != nil {
		return &proxyError{err: err}
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return &proxyError{err: err}
	}
	resp.Body.Close()
	switch {
	case req.Method == http.MethodConnect && resp.StatusCode/100 != 2,
		resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout:
		return &proxyError{status: resp.Status}
	}
	return nil
}

// proxyError is a failure of the proxy, or its answer.
type proxyError struct {
	err    error
	status string
}

func (e *proxyError) Error() string {
	if e.status != "" {
		return "the proxy answered " + e.status
	}
	return "the proxy: " + netReason(e.err)
}

func (e *proxyError) Unwrap() error { return e.err }

// hostPort is u's host and port, the scheme's port by default.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// netReason says in a few words why a connection failed: the host that
// does not resolve, the refusal, the silence.
func netReason(err error) string {
	var pe *proxyError
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &pe):
		return pe.Error()
	case errors.As(err, &dnsErr):
		if dnsErr.IsNotFound {
			return "the name " + dnsErr.Name + " does not resolve (no such host)"
		}
		why := dnsErr.Err
		if dnsErr.IsTimeout {
			why = "no answer from the DNS server"
		}
		return "the name " + dnsErr.Name + " cannot be resolved: " + why
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ENETUNREACH):
		return "network is unreachable"
	case errors.Is(err, syscall.EHOSTUNREACH):
		return "no route to host"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Sprintf("no connection within %s", reachTimeout)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the connection was closed"
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err.Error()
	}
	return err.Error()
}

// envMap is a process environment as a map (the last value of a name
// wins, as for exec.Cmd).
func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// proxies are the proxies a manager uses, by the scheme of the index.
type proxies struct {
	http, https string
	no          string // hosts reached directly, as NO_PROXY lists them
}

// envProxies are the proxies the environment names, as curl and Python's
// requests read them: the lower-case names first.
func envProxies(env map[string]string) proxies {
	get := func(name string) string {
		if v := env[name]; v != "" {
			return v
		}
		return env[strings.ToUpper(name)]
	}
	all := get("all_proxy")
	p := proxies{http: get("http_proxy"), https: get("https_proxy"), no: get("no_proxy")}
	if p.http == "" {
		p.http = all
	}
	if p.https == "" {
		p.https = all
	}
	return p
}

// errNoProbe: the proxy is one envd cannot speak through (SOCKS): the
// index is not tried, and the manager runs.
var errNoProbe = errors.New("no reachability check through this proxy")

// forURL returns the index u as reached with these proxies.
func (p proxies) forURL(u *url.URL) (index, error) {
	ix := index{url: u}
	raw := p.http
	if u.Scheme == "https" {
		raw = p.https
	}
	if raw == "" || raw == "DIRECT" || bypassProxy(u.Hostname(), u.Port(), p.no) {
		return ix, nil
	}
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	pu, err := url.Parse(raw)
	if err != nil || pu.Host == "" {
		return ix, errNoProbe
	}
	if pu.Scheme != "http" {
		return ix, errNoProbe
	}
	ix.proxy = pu
	return ix, nil
}

// bypassProxy tells whether NO_PROXY's list (comma or space separated:
// "*", host names matching themselves and their subdomains, with or
// without a leading dot, IP addresses, CIDR ranges, optionally :port)
// names host.
func bypassProxy(host, port, noProxy string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	ip, ipErr := netip.ParseAddr(host)
	for _, e := range strings.FieldsFunc(noProxy, func(r rune) bool { return r == ',' || r == ' ' }) {
		e = strings.ToLower(strings.TrimSpace(e))
		if e == "*" {
			return true
		}
		if h, p, err := net.SplitHostPort(e); err == nil && !strings.Contains(e, "/") {
			if p != port {
				continue
			}
			e = h
		}
		if pfx, err := netip.ParsePrefix(e); err == nil {
			if ipErr == nil && pfx.Contains(ip) {
				return true
			}
			continue
		}
		e = strings.TrimPrefix(strings.TrimPrefix(e, "*"), ".")
		if e != "" && (host == e || strings.HasSuffix(host, "."+e)) {
			return true
		}
	}
	return false
}

// isLocal tells whether a source of packages is on this machine: a path,
// or a file: URL.
func isLocal(s string) bool {
	u, err := url.Parse(s)
	return err != nil || u.Scheme == "" || u.Scheme == "file" || len(u.Scheme) == 1 // C:\ style, or a path
}

// remoteIndexes parses index URLs; ok is false when one is local (then
// the install may not need the network at all) or not http(s).
func remoteIndexes(p proxies, raws []string) (idx []index, ok bool) {
	for _, raw := range raws {
		if isLocal(raw) {
			return nil, false
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, false
		}
		ix, err := p.forURL(u)
		if err != nil {
			return nil, false
		}
		idx = append(idx, ix)
	}
	return idx, len(idx) > 0
}
