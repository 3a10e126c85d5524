// Command relayfloor is the bare relay under any agent that forwards a
// command's stdout over a socket, for bench/stream.sh to time `envctl run`
// against: it runs `head -c BYTES /dev/zero`, copies its stdout from the
// pipe into a loopback TCP connection with 32 KiB reads (as envd reads),
// and discards the bytes on the other end, all in this one process; it
// exits once head has exited and every byte has arrived. (The same relay as
// internal/process's BenchmarkStreamThroughput baseline, as a program.)
//
//	relayfloor BYTES
package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: relayfloor BYTES")
		os.Exit(2)
	}
	n, err := strconv.ParseInt(os.Args[1], 10, 64)
	if err == nil {
		err = relay(n)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "relayfloor:", err)
		os.Exit(1)
	}
}

func relay(n int64) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	type result struct {
		n   int64
		err error
	}
	sunk := make(chan result, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			sunk <- result{err: err}
			return
		}
		defer conn.Close()
		k, err := io.CopyBuffer(io.Discard, conn, make([]byte, 32<<10))
		sunk <- result{k, err}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return err
	}
	defer conn.Close()

	cmd := exec.Command("head", "-c", strconv.FormatInt(n, 10), "/dev/zero")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	buf := make([]byte, 32<<10)
	for {
		k, rerr := out.Read(buf)
		if k > 0 {
			if _, err := conn.Write(buf[:k]); err != nil {
				return err
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("head: %w", err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		return err
	}
	r := <-sunk
	if r.err != nil {
		return r.err
	}
	if r.n != n {
		return fmt.Errorf("got %d bytes of %d", r.n, n)
	}
	return nil
}
