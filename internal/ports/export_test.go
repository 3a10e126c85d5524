package ports

import "strings"

// The two scanners, for the test that compares them.
var (
	SockDiag = sockDiag
	ProcNet  = procNet
)

// ParseEpollInfo returns the inodes and devices of the files an epoll's
// fdinfo lists.
func ParseEpollInfo(s string) (inos []uint64, devs []string) {
	for _, w := range parseEpollInfo(strings.NewReader(s)) {
		inos, devs = append(inos, w.ino), append(devs, w.dev)
	}
	return inos, devs
}
