package ports

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/envd-dev/envd/internal/errkind"
)

// Family is a socket's address family.
type Family uint8

// The families scanned.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string {
	switch f {
	case IPv4:
		return "ipv4"
	case IPv6:
		return "ipv6"
	}
	return fmt.Sprintf("family(%d)", uint8(f))
}

// Listener is one listening TCP socket, as a scan sees it.
type Listener struct {
	Family Family
	Addr   netip.Addr // as bound: unspecified for a wildcard listener
	Port   uint16
	Inode  uint64 // the socket's inode: tells two sockets apart
	UID    uint32 // the socket's owner
}

// AddrPort is where the listener listens.
func (l Listener) AddrPort() netip.AddrPort { return netip.AddrPortFrom(l.Addr, l.Port) }

// Loopback reports whether the listener is bound to a loopback address
// (an IPv4-mapped one included).
func (l Listener) Loopback() bool { return l.Addr.Unmap().IsLoopback() }

// Wildcard reports whether the listener is bound to every address.
func (l Listener) Wildcard() bool { return l.Addr.Unmap().IsUnspecified() }

// Private says whose a private listener is: envd never forwards one.
// The rule is private.go's.
type Private uint8

// The private listeners' owners.
const (
	NotPrivate     Private = iota // the workload's
	PrivateEnvd                   // envd's own: its API and code ports
	PrivateJupyter                // envd's Jupyter server's: any it listens on
	PrivateKernel                 // a kernel's line to the Jupyter server: its channels, ipykernel's IOPub pipe
)

func (p Private) String() string {
	switch p {
	case NotPrivate:
		return ""
	case PrivateEnvd:
		return "envd"
	case PrivateJupyter:
		return "jupyter"
	case PrivateKernel:
		return "kernel"
	}
	return fmt.Sprintf("private(%d)", uint8(p))
}

// Port is a listener and what envd knows and does about it.
type Port struct {
	Listener
	// PID is a process holding the socket (the lowest found), Process its
	// name; 0 and "" when none was found.
	PID     int
	Process string
	// Private says whose the socket is when it is not the workload's:
	// such a socket is never forwarded.
	Private Private
	// ForwardedFrom are the external addresses forwarded to this listener,
	// sorted.
	ForwardedFrom []netip.AddrPort
	// Failures are the external addresses that could not be forwarded to
	// it (taken), sorted by address.
	Failures []Failure
}

// Forwarded reports whether at least one address is forwarded to p.
func (p Port) Forwarded() bool { return len(p.ForwardedFrom) > 0 }

// key identifies p across scans: the same socket keeps it.
func (p Port) key() portKey {
	return portKey{p.Family, p.Addr, p.Port, p.Inode}
}

type portKey struct {
	family Family
	addr   netip.Addr
	port   uint16
	inode  uint64
}

// Failure is an external address that could not be forwarded.
type Failure struct {
	From netip.AddrPort
	Err  string
}

// ErrInvalid is the kind of bad input (errkind): a filter that selects
// nothing sensible.
var ErrInvalid = errors.New("invalid argument")

// Filter selects ports; the zero Filter selects every one.
type Filter struct {
	Ports         []uint16 // empty: every port
	PID           int      // 0: any
	Family        Family   // 0: both
	ForwardedOnly bool
}

// Validate checks f.
func (f Filter) Validate() error {
	for i, p := range f.Ports {
		if p == 0 {
			return errkind.New(ErrInvalid, nil, "ports[%d] is 0: a port is 1-65535", i)
		}
	}
	if f.PID < 0 {
		return errkind.New(ErrInvalid, nil, "pid %d is negative", f.PID)
	}
	if f.Family != 0 && f.Family != IPv4 && f.Family != IPv6 {
		return errkind.New(ErrInvalid, nil, "%v is unknown: give ipv4, ipv6 or neither", f.Family)
	}
	return nil
}

// Match reports whether f selects p.
func (f Filter) Match(p Port) bool {
	if len(f.Ports) > 0 {
		found := false
		for _, n := range f.Ports {
			found = found || n == p.Port
		}
		if !found {
			return false
		}
	}
	switch {
	case f.PID != 0 && p.PID != f.PID:
		return false
	case f.Family != 0 && p.Family != f.Family:
		return false
	case f.ForwardedOnly && !p.Forwarded():
		return false
	}
	return true
}
