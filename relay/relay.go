// Package relay copies bytes both ways between two connections, the core
// of every forward and tunnel envd serves: a half-close on one side is
// passed on to the other, so that a peer that shuts down its writing side
// still gets its answer; an error on either side (a reset) ends both.
//
// It lives at the module's root rather than under internal/ because envctl's
// forward copies with it too, on the other end of the same tunnels, and
// envctl must not import envd's internals. It depends on the standard
// library alone.
package relay

import (
	"io"
	"net"
	"sync"
)

// closeWriter is a connection that can shut down its writing side alone:
// *net.TCPConn, *net.UnixConn, a vsock connection.
type closeWriter interface {
	CloseWrite() error
}

// Both copies a to b and b to a until both directions have ended, then
// closes both. Where the two are TCP connections the kernel moves the
// bytes (splice). It returns the bytes copied each way.
func Both(a, b net.Conn) (aToB, bToA int64) {
	var wg sync.WaitGroup
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			a.Close()
			b.Close()
		})
	}
	one := func(dst, src net.Conn, n *int64) {
		defer wg.Done()
		var err error
		*n, err = io.Copy(dst, src)
		if err != nil {
			closeBoth()
			return
		}
		cw, ok := dst.(closeWriter)
		if !ok || cw.CloseWrite() != nil {
			closeBoth() // no half-close: the whole connection ends
		}
	}
	wg.Add(2)
	go one(b, a, &aToB)
	one(a, b, &bToA)
	wg.Wait()
	closeBoth()
	return aToB, bToA
}
