package ports

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Fuzz targets for the parsers of what the kernel says of sockets: the
// /proc/net/tcp tables, sock_diag's netlink answers and an epoll's fdinfo.
// The addresses, ports and owners in them are the sandbox code's choice.
// Each parses what it wrote back as the kernel writes it the same.

// procNetLine is l as a line of /proc/net/tcp or tcp6: each 32-bit word of
// the address printed as a number, in the kernel's byte order.
func procNetLine(i int, l Listener) string {
	raw := l.Addr.AsSlice()
	var addr strings.Builder
	for j := 0; j < len(raw); j += 4 {
		fmt.Fprintf(&addr, "%08X", binary.NativeEndian.Uint32(raw[j:]))
	}
	return fmt.Sprintf("%4d: %s:%04X 00000000:0000 0A 00000000:00000000 00:00000000 00000000 %5d        0 %d 1 0000000000000000 100 0 0 10 0\n",
		i, addr.String(), l.Port, l.UID, l.Inode)
}

const procNetHeader = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"

// FuzzParseProcNet: any table is parsed or refused without a panic, never
// into more than maxListeners listeners (errTooMany says it stopped
// there), and the listeners written back parse the same.
func FuzzParseProcNet(f *testing.F) {
	for _, name := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b, strings.HasSuffix(name, "6"))
		}
	}
	f.Add([]byte(procNetHeader+
		procNetLine(0, Listener{Addr: netip.MustParseAddr("127.0.0.1"), Port: 8080, UID: 1000, Inode: 42})+
		procNetLine(1, Listener{Addr: netip.MustParseAddr("::ffff:10.0.0.1"), Port: 49983, Inode: 1<<40 + 1})+
		"   2: 00000000:0016 00000000:0000 01 00000000:00000000 00:00000000 00000000     0        0 7 1\n"+
		"   3: 0100007F 00000000:0000 0A 0 0 0 0 0 0 0\n"), false)
	f.Add([]byte(procNetHeader+"   0: 0100007G:0050 00000000:0000 0A 0 0 0 -1 0 9 1\n"), false)
	f.Add([]byte(procNetHeader+"   0: 0100007F:10000 00000000:0000 0A 0 0 0 0 0 99999999999999999999 1\n"), true)
	f.Fuzz(func(t *testing.T, data []byte, v6 bool) {
		family := IPv4
		if v6 {
			family = IPv6
		}
		ls, err := parseProcNet(bytes.NewReader(data), family, nil)
		if len(ls) > maxListeners || errors.Is(err, errTooMany) != (len(ls) == maxListeners && err != nil) {
			t.Fatalf("%d listeners, %v", len(ls), err)
		}
		if len(ls) == 0 {
			return
		}
		var again strings.Builder
		again.WriteString(procNetHeader)
		for i, l := range ls {
			if l.Family != family || !l.Addr.IsValid() {
				t.Fatalf("listener %+v of a %v table", l, family)
			}
			again.WriteString(procNetLine(i, l))
		}
		back, err := parseProcNet(strings.NewReader(again.String()), family, nil)
		if err != nil || !reflect.DeepEqual(back, ls) {
			t.Fatalf("parsed %+v\nwritten again and parsed %+v, %v\n%s", ls, back, err, again.String())
		}
	})
}

// diagMsg is a netlink message of type typ holding body, padded.
func diagMsg(typ uint16, body []byte) []byte {
	b := make([]byte, sizeofNlMsghdr, sizeofNlMsghdr+len(body)+unix.NLMSG_ALIGNTO)
	binary.NativeEndian.PutUint32(b[0:], uint32(sizeofNlMsghdr+len(body)))
	binary.NativeEndian.PutUint16(b[4:], typ)
	b = append(b, body...)
	return append(b, make([]byte, nlmAlign(len(b))-len(b))...)
}

// diagSocket is l as the kernel's struct inet_diag_msg.
func diagSocket(l Listener) []byte {
	b := make([]byte, sizeofInetDiagMsg)
	b[0] = unix.AF_INET
	if l.Family == IPv6 {
		b[0] = unix.AF_INET6
	}
	b[1] = tcpListen
	binary.BigEndian.PutUint16(b[diagMsgSportOffset:], l.Port)
	copy(b[diagMsgSrcOffset:], l.Addr.AsSlice())
	binary.NativeEndian.PutUint32(b[diagMsgUIDOffset:], l.UID)
	binary.NativeEndian.PutUint32(b[diagMsgInodeOffset:], uint32(l.Inode))
	return b
}

func diagErr(errno int32) []byte {
	b := make([]byte, 4+sizeofNlMsghdr)
	binary.NativeEndian.PutUint32(b, uint32(-errno))
	return diagMsg(unix.NLMSG_ERROR, b)
}

// FuzzParseDiag: any datagram of a sock_diag dump is parsed or refused
// without a panic, its listeners within maxListeners and no more than
// the sockets it can hold; the listeners, sent again as the kernel sends
// them, parse the same.
func FuzzParseDiag(f *testing.F) {
	v4 := Listener{Family: IPv4, Addr: netip.MustParseAddr("127.0.0.1"), Port: 8080, UID: 1000, Inode: 4242}
	v6 := Listener{Family: IPv6, Addr: netip.MustParseAddr("::"), Port: 49983, Inode: 7}
	f.Add(append(diagMsg(unix.SOCK_DIAG_BY_FAMILY, diagSocket(v4)), diagMsg(unix.NLMSG_DONE, make([]byte, 4))...), false)
	f.Add(append(append(diagMsg(unix.SOCK_DIAG_BY_FAMILY, diagSocket(v6)), diagMsg(unix.SOCK_DIAG_BY_FAMILY, diagSocket(v6))...), diagMsg(unix.NLMSG_NOOP, nil)...), true)
	f.Add(diagErr(int32(unix.EPROTONOSUPPORT)), false)
	f.Add(append(diagErr(0), diagMsg(unix.SOCK_DIAG_BY_FAMILY, make([]byte, 10))...), true)
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, false)
	f.Add(diagMsg(unix.NLMSG_DONE, nil)[:sizeofNlMsghdr-1], false)
	f.Fuzz(func(t *testing.T, data []byte, v6 bool) {
		family := IPv4
		if v6 {
			family = IPv6
		}
		ls, done, err := parseDiag(data, family, nil)
		if done && err != nil {
			t.Fatalf("done, and %v", err)
		}
		if len(ls) > maxListeners || len(ls) > len(data)/(sizeofNlMsghdr+sizeofInetDiagMsg) {
			t.Fatalf("%d listeners from %d bytes", len(ls), len(data))
		}
		var again []byte
		for _, l := range ls {
			if l.Family != family || (family == IPv4) != l.Addr.Is4() || l.Inode > 1<<32-1 {
				t.Fatalf("listener %+v of a %v dump", l, family)
			}
			again = append(again, diagMsg(unix.SOCK_DIAG_BY_FAMILY, diagSocket(l))...)
		}
		again = append(again, diagMsg(unix.NLMSG_DONE, make([]byte, 4))...)
		back, done, err := parseDiag(again, family, nil)
		if err != nil || !done || !reflect.DeepEqual(back, ls) {
			t.Fatalf("parsed %+v\nsent again and parsed %+v, %v, %v", ls, back, done, err)
		}
	})
}

// FuzzParseEpollInfo: any fdinfo is parsed without a panic into no more
// files than it has tfd lines, and written back as the kernel writes it
// parses the same.
func FuzzParseEpollInfo(f *testing.F) {
	f.Add([]byte("pos:\t0\nflags:\t02\nmnt_id:\t15\nino:\t1057\ntfd:        5 events:       19 data:                5  pos:0 ino:1c3a sdev:8\ntfd:        7 events:       19 data:                7  pos:0 ino:8d3 sdev:9\n"))
	f.Add([]byte("tfd: 1 ino:zz sdev:1\ntfd: 2 sdev:3 ino:ffffffffffffffff\ntfd: ino:10000000000000000\ntfd:ino:1\n tfd: 3 ino:4\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ws := parseEpollInfo(bytes.NewReader(data))
		if n := bytes.Count(data, []byte("tfd:")); len(ws) > n {
			t.Fatalf("%d files from %d tfd lines", len(ws), n)
		}
		var again strings.Builder
		for i, w := range ws {
			if strings.ContainsAny(w.dev, " \t\n") {
				t.Fatalf("device %q", w.dev)
			}
			fmt.Fprintf(&again, "tfd: %8d events: %8x data: %16x  pos:0 ino:%x sdev:%s\n", i, 19, i, w.ino, w.dev)
		}
		if back := parseEpollInfo(strings.NewReader(again.String())); !reflect.DeepEqual(back, ws) {
			t.Fatalf("parsed %+v\nwritten again and parsed %+v", ws, back)
		}
	})
}
