package ports

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// maxListeners bounds how many listeners one scan keeps: a sandbox has a
// handful; a runaway program must not make envd's memory grow with it.
const maxListeners = 4096

// errTooMany says a scan stopped at maxListeners.
var errTooMany = fmt.Errorf("more than %d listening sockets: the rest are left out", maxListeners)

// The kernel's sock_diag structures (linux/inet_diag.h, linux/netlink.h):
// x/sys/unix has the constants but not these.
const (
	sizeofNlMsghdr     = 16
	sizeofInetDiagReq  = 56 // struct inet_diag_req_v2
	sizeofInetDiagMsg  = 72 // struct inet_diag_msg
	tcpListen          = 10 // TCP_LISTEN in the kernel's tcp_states.h
	diagMsgSportOffset = 4  // inet_diag_msg.id.idiag_sport (big-endian)
	diagMsgSrcOffset   = 8  // inet_diag_msg.id.idiag_src (16 bytes)
	diagMsgUIDOffset   = 64 // inet_diag_msg.idiag_uid
	diagMsgInodeOffset = 68 // inet_diag_msg.idiag_inode
)

// sockDiag lists the listening TCP sockets of envd's network namespace
// with netlink sock_diag (NETLINK_INET_DIAG), both families.
func sockDiag() ([]Listener, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_INET_DIAG)
	if err != nil {
		return nil, fmt.Errorf("open a sock_diag socket: %w", err)
	}
	defer unix.Close(fd)
	// A kernel that never answers must not hang the scan.
	tv := unix.Timeval{Sec: 5}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return nil, fmt.Errorf("sock_diag receive timeout: %w", err)
	}
	var out []Listener
	for i, fam := range []struct {
		af     uint8
		family Family
	}{{unix.AF_INET, IPv4}, {unix.AF_INET6, IPv6}} {
		var err error
		out, err = sockDiagDump(fd, uint32(i+1), fam.af, fam.family, out)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// sockDiagDump asks for af's TCP listeners and appends them to out.
func sockDiagDump(fd int, seq uint32, af uint8, family Family, out []Listener) ([]Listener, error) {
	req := make([]byte, sizeofNlMsghdr+sizeofInetDiagReq)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(req[8:], seq)
	r := req[sizeofNlMsghdr:]
	r[0] = af
	r[1] = unix.IPPROTO_TCP
	ne.PutUint32(r[4:], 1<<tcpListen)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return out, fmt.Errorf("sock_diag request: %w", err)
	}
	buf := make([]byte, 32<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return out, fmt.Errorf("sock_diag answer: %w", err)
		}
		var done bool
		if out, done, err = parseDiag(buf[:n], family, out); done || err != nil {
			return out, err
		}
	}
}

// parseDiag appends the listeners of one sock_diag answer (a datagram of
// netlink messages) to out; done says the dump ended with it.
func parseDiag(msgs []byte, family Family, out []Listener) (_ []Listener, done bool, err error) {
	ne := binary.NativeEndian
	for len(msgs) >= sizeofNlMsghdr {
		l := int(ne.Uint32(msgs[0:]))
		typ := ne.Uint16(msgs[4:])
		if l < sizeofNlMsghdr || l > len(msgs) {
			return out, false, fmt.Errorf("sock_diag answer: a message of %d bytes in %d", l, len(msgs))
		}
		body := msgs[sizeofNlMsghdr:l]
		msgs = msgs[min(nlmAlign(l), len(msgs)):]
		switch typ {
		case unix.NLMSG_DONE:
			return out, true, nil
		case unix.NLMSG_ERROR:
			if len(body) >= 4 {
				if errno := -int32(ne.Uint32(body)); errno != 0 {
					return out, false, fmt.Errorf("sock_diag: %w", unix.Errno(errno))
				}
			}
			continue
		case unix.SOCK_DIAG_BY_FAMILY:
		default:
			continue
		}
		if len(body) < sizeofInetDiagMsg {
			return out, false, fmt.Errorf("sock_diag answer: a socket of %d bytes, want %d", len(body), sizeofInetDiagMsg)
		}
		if len(out) >= maxListeners {
			return out, false, errTooMany
		}
		l4 := Listener{
			Family: family,
			Port:   binary.BigEndian.Uint16(body[diagMsgSportOffset:]),
			UID:    ne.Uint32(body[diagMsgUIDOffset:]),
			Inode:  uint64(ne.Uint32(body[diagMsgInodeOffset:])),
		}
		src := body[diagMsgSrcOffset : diagMsgSrcOffset+16]
		if family == IPv4 {
			l4.Addr = netip.AddrFrom4([4]byte(src[:4]))
		} else {
			l4.Addr = netip.AddrFrom16([16]byte(src))
		}
		out = append(out, l4)
	}
	return out, false, nil
}

func nlmAlign(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }

// sockDiagMissing reports whether err says the kernel has no sock_diag
// for TCP (a kernel built without INET_DIAG): /proc/net is the fallback.
func sockDiagMissing(err error) bool {
	return errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.ENOENT) ||
		errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, os.ErrPermission)
}
