// Command tcpfloor copies a file to another over a loopback TCP connection
// as directly as Linux allows (sendfile on the sending side, splice on the
// receiving side) and prints the seconds it took: the floor under any HTTP
// transfer of that file on this machine, for bench/files.sh.
//
//	tcpfloor SRC DST
package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: tcpfloor SRC DST")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "tcpfloor:", err)
		os.Exit(1)
	}
}

func run(src, dst string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()

	start := time.Now()
	sent := make(chan error, 1)
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			sent <- err
			return
		}
		_, err = io.Copy(c, in) // sendfile
		c.Close()
		sent <- err
	}()
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := out.ReadFrom(c); err != nil { // splice
		return err
	}
	if err := <-sent; err != nil {
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	fmt.Printf("%.4f\n", time.Since(start).Seconds())
	return nil
}
