package relay_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/envd-dev/envd/relay"
)

// pair returns the two ends of a loopback TCP connection.
func pair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestBothHalfClose: a client that sends, then shuts down its writing side,
// still reads the whole answer the far end sends after seeing EOF; the
// byte counts are right.
func TestBothHalfClose(t *testing.T) {
	t.Parallel()
	user, near := pair(t)  // user <-> near side of the relay
	far, target := pair(t) // far side of the relay <-> target
	done := make(chan [2]int64, 1)
	go func() {
		a, b := relay.Both(near, far)
		done <- [2]int64{a, b}
	}()
	req := make([]byte, 1<<20)
	rand.Read(req)
	go func() {
		user.Write(req)
		user.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(target) // EOF only once the half-close came through
	if err != nil || !bytes.Equal(got, req) {
		t.Fatalf("target read %d bytes (%v), want the %d sent", len(got), err, len(req))
	}
	answer := bytes.Repeat([]byte("answer"), 100000)
	target.Write(answer)
	target.Close()
	back, err := io.ReadAll(user)
	if err != nil || !bytes.Equal(back, answer) {
		t.Fatalf("user read %d bytes (%v) after its half-close, want %d", len(back), err, len(answer))
	}
	select {
	case n := <-done:
		if n[0] != int64(len(req)) || n[1] != int64(len(answer)) {
			t.Errorf("counts %v, want [%d %d]", n, len(req), len(answer))
		}
	case <-time.After(time.Minute):
		t.Fatal("Both did not return once both directions ended")
	}
}

// TestBothReset: a side that is reset ends the other at once.
func TestBothReset(t *testing.T) {
	t.Parallel()
	user, near := pair(t)
	far, target := pair(t)
	done := make(chan struct{})
	go func() {
		relay.Both(near, far)
		close(done)
	}()
	target.(*net.TCPConn).SetLinger(0) // Close sends a reset
	target.Close()
	user.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.ReadAll(user); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("user read: %v (want EOF or a reset)", err)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Both did not return after a reset")
	}
}
