package ports

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// procNet lists the listening TCP sockets of envd's network namespace from
// /proc/net/tcp and /proc/net/tcp6: the fallback where sock_diag is
// missing.
func procNet(proc string) ([]Listener, error) {
	var out []Listener
	for _, f := range []struct {
		name   string
		family Family
	}{{"tcp", IPv4}, {"tcp6", IPv6}} {
		file, err := os.Open(proc + "/self/net/" + f.name)
		if os.IsNotExist(err) && f.family == IPv6 {
			continue // a kernel without IPv6
		}
		if err != nil {
			return out, fmt.Errorf("read TCP sockets: %w", err)
		}
		out, err = parseProcNet(file, f.family, out)
		file.Close()
		if err != nil {
			return out, fmt.Errorf("read %s/self/net/%s: %w", proc, f.name, err)
		}
	}
	return out, nil
}

// parseProcNet appends the listeners of one /proc/net/tcp* table to out.
// A line is "sl local rem st queues tr retrnsmt uid timeout inode ...",
// addresses in hex, each 32-bit word in the kernel's byte order.
func parseProcNet(r io.Reader, family Family, out []Listener) ([]Listener, error) {
	sc := bufio.NewScanner(r)
	sc.Scan() // the header
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != "0A" { // 0A: TCP_LISTEN
			continue
		}
		addr, port, ok := strings.Cut(f[1], ":")
		if !ok {
			return out, fmt.Errorf("local address %q: want ADDR:PORT", f[1])
		}
		raw, err := hex.DecodeString(addr)
		if err != nil || (len(raw) != 4 && len(raw) != 16) {
			return out, fmt.Errorf("local address %q: not hex of 4 or 16 bytes", f[1])
		}
		// Each word was printed as a number: put it back in memory order.
		for i := 0; i < len(raw); i += 4 {
			binary.NativeEndian.PutUint32(raw[i:], binary.BigEndian.Uint32(raw[i:]))
		}
		p, err := strconv.ParseUint(port, 16, 16)
		if err != nil {
			return out, fmt.Errorf("local port %q: %w", port, err)
		}
		uid, err := strconv.ParseUint(f[7], 10, 32)
		if err != nil {
			return out, fmt.Errorf("uid %q: %w", f[7], err)
		}
		inode, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			return out, fmt.Errorf("inode %q: %w", f[9], err)
		}
		l := Listener{Family: family, Port: uint16(p), UID: uint32(uid), Inode: inode}
		if len(raw) == 4 {
			l.Addr = netip.AddrFrom4([4]byte(raw))
		} else {
			l.Addr = netip.AddrFrom16([16]byte(raw))
		}
		if len(out) >= maxListeners {
			return out, errTooMany
		}
		out = append(out, l)
	}
	return out, sc.Err()
}
