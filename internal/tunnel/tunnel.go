// Package tunnel serves GET /tunnel: a client's connection to envd becomes
// a TCP connection to a port inside the sandbox (`envctl forward`, the Go
// client's DialPort). The request is an HTTP/1.1 upgrade:
//
//	GET /tunnel?port=8080[&host=127.0.0.1] HTTP/1.1
//	Connection: Upgrade
//	Upgrade: envd-tunnel
//
// envd connects to host:port first; only once that succeeded does it answer
// 101 Switching Protocols, and from then on the bytes of the connection are
// the tunnel's, both ways, half-closes passed on (package relay). Every
// failure before is an ordinary error answer ({"code","message"}): 400 for
// a bad port or host, 403 for a host a strict-mode user may not reach, 426
// without the upgrade (or over HTTP/2), 502 when nothing listens, 504 when
// the connection times out, 503 when too many tunnels are open.
//
// A tunnel works over whatever carries the request: TCP, the unix socket,
// vsock. Tunnels are hijacked connections, which the HTTP server no longer
// tracks: Close ends them all at shutdown.
package tunnel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/envd-dev/envd/internal/auth"
	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/server"
	"github.com/envd-dev/envd/relay"
)

// Protocol is the Upgrade token of a tunnel request.
const Protocol = "envd-tunnel"

// Defaults of Options.
const (
	DefaultMaxTunnels  = 1024
	DefaultDialTimeout = 10 * time.Second
)

// Options configures New.
type Options struct {
	Logger   *slog.Logger // zero: slog.Default()
	Defaults *defaults.Defaults
	// StrictUsers: a user other than root may reach loopback addresses
	// only (the sandbox's own servers), never other hosts through the
	// sandbox's network.
	StrictUsers bool
	// MaxTunnels bounds the tunnels open at once. Zero: DefaultMaxTunnels.
	MaxTunnels int
	// DialTimeout bounds the connection to the target. Zero:
	// DefaultDialTimeout.
	DialTimeout time.Duration
}

// Server serves tunnels.
type Server struct {
	o     Options
	log   *slog.Logger
	slots chan struct{}
	wg    sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // guarded by mu: both ends of every open tunnel
	closed bool                  // guarded by mu
}

// New returns a Server.
func New(o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxTunnels <= 0 {
		o.MaxTunnels = DefaultMaxTunnels
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	return &Server{o: o, log: o.Logger, slots: make(chan struct{}, o.MaxTunnels), conns: map[net.Conn]struct{}{}}
}

// Route is the tunnel's route (token required).
func (s *Server) Route() server.Route {
	return server.Route{Pattern: "GET /tunnel", Handler: http.HandlerFunc(s.serve)}
}

// Close ends every open tunnel (both of its connections) and refuses new
// ones, then waits for their goroutines.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = map[net.Conn]struct{}{}
	s.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	s.wg.Wait()
}

// Open reports how many tunnels are open.
func (s *Server) Open() int { return len(s.slots) }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor != 1 {
		w.Header().Set("Upgrade", Protocol)
		server.WriteError(w, http.StatusUpgradeRequired, fmt.Sprintf("a tunnel needs HTTP/1.1 (this request came over %s): send it on a connection of its own", r.Proto))
		return
	}
	if !headerHas(r.Header, "Connection", "upgrade") || !headerHas(r.Header, "Upgrade", Protocol) {
		w.Header().Set("Upgrade", Protocol)
		w.Header().Set("Connection", "Upgrade")
		server.WriteError(w, http.StatusUpgradeRequired, "a tunnel is an upgrade: send Connection: Upgrade and Upgrade: "+Protocol)
		return
	}
	target, status, msg := s.target(r)
	if status != 0 {
		server.WriteError(w, status, msg)
		return
	}
	select {
	case s.slots <- struct{}{}:
	default:
		server.WriteError(w, http.StatusServiceUnavailable, fmt.Sprintf("%d tunnels are open, the most envd keeps: close one and try again", cap(s.slots)))
		return
	}
	release := func() { <-s.slots }
	// Not the request's context: net/http cancels it when the client
	// half-closes, and a client may send its bytes and shut down its
	// writing side before the answer arrives. DialTimeout bounds it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.o.DialTimeout)
	defer cancel()
	var d net.Dialer
	up, err := d.DialContext(ctx, "tcp", target.String())
	if err != nil {
		release()
		status, msg := dialError(target, err, s.o.DialTimeout)
		server.WriteError(w, status, msg)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		release()
		up.Close()
		server.WriteError(w, http.StatusInternalServerError, fmt.Sprintf("cannot take over the connection for a tunnel: %v", err))
		return
	}
	// The connection is ours from here: no deadline the server set stays.
	_ = conn.SetDeadline(time.Time{})
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: %s\r\nConnection: Upgrade\r\n\r\n", Protocol)
	if err := brw.Flush(); err != nil {
		release()
		conn.Close()
		up.Close()
		return
	}
	// Bytes the client sent right after its request, already read into
	// the server's buffer, go first.
	near := conn
	if n := brw.Reader.Buffered(); n > 0 {
		early, _ := brw.Reader.Peek(n)
		if _, err := up.Write(early); err != nil {
			release()
			conn.Close()
			up.Close()
			return
		}
	}
	if !s.track(near, up) {
		release()
		return
	}
	go func() {
		defer s.wg.Done() // added by track
		defer release()
		defer s.untrack(near, up)
		began := time.Now()
		in, out := relay.Both(near, up)
		s.log.Debug("tunnel closed", "to", target.String(), "sent", in, "received", out, "duration", time.Since(began))
	}()
}

// target is the address a request asks for, checked.
func (s *Server) target(r *http.Request) (netip.AddrPort, int, string) {
	q := r.URL.Query()
	ps := q.Get("port")
	port, err := strconv.ParseUint(ps, 10, 16)
	if ps == "" {
		return netip.AddrPort{}, http.StatusBadRequest, "port is required: /tunnel?port=N (1-65535)"
	}
	if err != nil || port == 0 {
		return netip.AddrPort{}, http.StatusBadRequest, fmt.Sprintf("port %q is not a TCP port (1-65535)", ps)
	}
	host := q.Get("host")
	addr := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	if host != "" {
		if host == "localhost" {
			host = "127.0.0.1"
		}
		a, err := netip.ParseAddr(strings.Trim(host, "[]"))
		if err != nil || a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() {
			return netip.AddrPort{}, http.StatusBadRequest, fmt.Sprintf("host %q is not an address to connect to (an IPv4 or IPv6 address, or localhost)", host)
		}
		addr = a.Unmap()
	}
	if s.o.StrictUsers && !addr.IsLoopback() {
		u, err := s.user(r)
		if err != nil {
			return netip.AddrPort{}, http.StatusUnauthorized, err.Error()
		}
		if u.UID != 0 {
			return netip.AddrPort{}, http.StatusForbidden, fmt.Sprintf("user %s may tunnel to the sandbox's loopback addresses only (127.0.0.1, ::1), not %s: only root may reach other hosts", u.Name, addr)
		}
	}
	return netip.AddrPortFrom(addr, uint16(port)), 0, ""
}

// user is who the request acts as: its basic-auth user, else the default
// user.
func (s *Server) user(r *http.Request) (*identity.User, error) {
	if name, ok := auth.BasicUser(r.Header.Get("Authorization")); ok {
		u, err := identity.Lookup(name)
		if err != nil {
			return nil, fmt.Errorf("invalid username: '%s'", name)
		}
		return u, nil
	}
	u, err := s.o.Defaults.User()
	if err != nil {
		return nil, fmt.Errorf("no user specified, and the default user '%s' cannot be used: %w", s.o.Defaults.UserName(), err)
	}
	return u, nil
}

// track registers a tunnel's connections for Close, and its relay in
// s.wg (the caller calls Done when it ends), unless Close has begun. The
// Add is made under mu, before Close can see closed and Wait: an Add that
// raced Wait at a zero count would be a misuse of the WaitGroup (the race
// detector caught it under load).
func (s *Server) track(conns ...net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		s.conns[c] = struct{}{}
	}
	s.wg.Add(1)
	return true
}

func (s *Server) untrack(conns ...net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range conns {
		delete(s.conns, c)
	}
}

// dialError is the answer to a failed connection to target.
func dialError(target netip.AddrPort, err error, timeout time.Duration) (int, string) {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return http.StatusBadGateway, fmt.Sprintf("nothing listens on %s in the sandbox (connection refused)", target)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT):
		return http.StatusGatewayTimeout, fmt.Sprintf("connect to %s: no answer within %v", target, timeout)
	}
	return http.StatusBadGateway, fmt.Sprintf("connect to %s: %v", target, err)
}

// headerHas reports whether header key lists token (comma-separated,
// case-insensitive).
func headerHas(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for part := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(part), token) {
				return true
			}
		}
	}
	return false
}
