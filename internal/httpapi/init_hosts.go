package httpapi

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// hostsFile is where /init's hyperloopIP gets its name.
const hostsFile = "/etc/hosts"

// eventsHost is the name sandbox code reaches the host's services by at
// hyperloopIP, as in upstream's sandboxes.
const eventsHost = "events.e2b.local"

// eventsAddressVar is the variable every process gets with hyperloopIP's
// URL.
const eventsAddressVar = "E2B_EVENTS_ADDRESS"

// parseHyperloopIP checks /init's hyperloopIP: an IPv4 or IPv6 address a
// hosts file can hold (no zone), not unspecified nor multicast.
func parseHyperloopIP(s string) (netip.Addr, error) {
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("hyperloopIP %q is not an IP address", s)
	}
	switch {
	case ip.Zone() != "":
		return netip.Addr{}, fmt.Errorf("hyperloopIP %q has a zone, which a hosts file cannot hold", s)
	case ip.IsUnspecified(), ip.IsMulticast():
		return netip.Addr{}, fmt.Errorf("hyperloopIP %q is not an address a host can be reached at", s)
	}
	return ip.Unmap(), nil
}

// eventsAddress is E2B_EVENTS_ADDRESS for ip: an http URL.
func eventsAddress(ip netip.Addr) string {
	if ip.Is6() {
		return "http://[" + ip.String() + "]"
	}
	return "http://" + ip.String()
}

// editHosts returns a hosts file's text with eventsHost at ip, on a line
// of its own at the end, and on no other line: other names on a line that
// had it keep their line. Applied to its own result it changes nothing.
func editHosts(data []byte, ip netip.Addr) []byte {
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), len(data)+1)
	for sc.Scan() {
		line := sc.Text()
		entry, comment, hasComment := strings.Cut(line, "#")
		fields := strings.Fields(entry)
		if len(fields) < 2 || !slices.Contains(fields[1:], eventsHost) {
			out.WriteString(line)
			out.WriteByte('\n')
			continue
		}
		names := slices.DeleteFunc(fields[1:], func(n string) bool { return n == eventsHost })
		if len(names) == 0 {
			continue
		}
		out.WriteString(fields[0] + "\t" + strings.Join(names, " "))
		if hasComment {
			out.WriteString(" #" + comment)
		}
		out.WriteByte('\n')
	}
	out.WriteString(ip.String() + "\t" + eventsHost + "\n")
	return out.Bytes()
}

// setHosts points eventsHost at ip in the hosts file at path; it writes
// only when that changes the file.
func setHosts(path string, ip netip.Addr) error {
	data, mode, err := readFileMode(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	edited := editHosts(data, ip)
	if bytes.Equal(edited, data) {
		return nil
	}
	if err := writeFileAtomic(path, edited, mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
