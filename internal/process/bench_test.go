package process_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/gen/process/processconnect"
	"github.com/envd-dev/envd/internal/process/processtest"
	"github.com/envd-dev/envd/internal/reaper"
	"github.com/envd-dev/envd/wirecodec"
)

var streamBytes = flag.Int64("stream-bytes", 1<<30, "bytes of stdout BenchmarkStreamThroughput streams each run")

// BenchmarkStreamThroughput streams `head -c N /dev/zero` through the
// service to a Go client with the binary codec. Its baseline, in the same
// run, is a bare relay: the same command's stdout copied from its pipe into
// a loopback TCP connection and discarded on the other side, in this one
// process (what any agent that forwards output over a socket must do at
// least). A plain pipe read is reported too. Runs alternate. It reports the
// rates and envd's cost over the relay's (relay rate / envd rate: lower is
// better; goal: at most 1.25, that is, at least 0.8 of the relay's rate).
//
//	go test -run '^$' -bench StreamThroughput -benchtime 3x ./internal/process/
//
// The daemon runs in this process, on the same two cores as the client.
func BenchmarkStreamThroughput(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts processtest.ClientOptions
	}{
		// As envd's Go client reads output (client.Process.Wait).
		{"h2c", processtest.ClientOptions{Proto: processtest.H2C, Codec: processtest.Wire}},
		{"http1", processtest.ClientOptions{Proto: processtest.HTTP1, Codec: processtest.Wire}},
		{"h2c-gzip", processtest.ClientOptions{Proto: processtest.H2C, Gzip: true}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			n := *streamBytes
			if tc.opts.Gzip {
				n = min(n, 256<<20) // deflate is slow: keep runs short
			}
			s := processtest.New(b, processtest.Options{})
			c := s.Client(b, tc.opts)
			var viaEnvd, viaRelay, viaPipe time.Duration
			b.SetBytes(n)
			for b.Loop() {
				for _, run := range []struct {
					f   func(int64) (time.Duration, error)
					sum *time.Duration
				}{
					{func(n int64) (time.Duration, error) { return streamOnce(c, n) }, &viaEnvd},
					{relayOnce, &viaRelay},
					{pipeOnce, &viaPipe},
				} {
					d, err := run.f(n)
					if err != nil {
						b.Fatal(err)
					}
					*run.sum += d
				}
			}
			runs := float64(b.N)
			rate := func(d time.Duration) float64 { return float64(n) * runs / d.Seconds() / 1e6 }
			b.ReportMetric(rate(viaEnvd), "envd-MB/s")
			b.ReportMetric(rate(viaRelay), "relay-MB/s")
			b.ReportMetric(rate(viaPipe), "pipe-MB/s")
			b.ReportMetric(viaEnvd.Seconds()/viaRelay.Seconds(), "cost/relay")
		})
	}
}

// streamOnce streams n bytes through the service and counts them.
func streamOnce(c processconnect.ProcessClient, n int64) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	st, err := c.Start(ctx, connect.NewRequest(&pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "head", Args: []string{"-c", strconv.FormatInt(n, 10), "/dev/zero"}},
		Stdin:   ptr(false),
	}))
	if err != nil {
		return 0, err
	}
	defer st.Close()
	var got int64
	var end *pb.ProcessEvent_EndEvent
	for st.Receive() {
		e := st.Msg().GetEvent()
		out := e.GetData().GetStdout()
		got += int64(len(out))
		wirecodec.Release(out)
		if e.GetEnd() != nil {
			end = e.GetEnd()
		}
	}
	d := time.Since(began)
	if err := st.Err(); err != nil {
		return 0, err
	}
	if end == nil || end.GetExitCode() != 0 || got != n {
		return 0, fmt.Errorf("got %d bytes of %d, end %v", got, n, end)
	}
	return d, nil
}

// relayOnce copies n bytes of `head -c n /dev/zero` from its pipe into a
// loopback TCP connection, 32 KiB at a time, and discards them on the other
// end: the bare relay.
func relayOnce(n int64) (time.Duration, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
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
	began := time.Now()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if _, err := copyHead(n, conn); err != nil {
		return 0, fmt.Errorf("relay: %w", err)
	}
	conn.(*net.TCPConn).CloseWrite()
	r := <-sunk
	d := time.Since(began)
	if r.err != nil {
		return 0, r.err
	}
	if r.n != n {
		return 0, fmt.Errorf("relay: got %d bytes of %d", r.n, n)
	}
	return d, nil
}

// pipeOnce reads n bytes of `head -c n /dev/zero` through a local pipe.
func pipeOnce(n int64) (time.Duration, error) {
	began := time.Now()
	got, err := copyHead(n, io.Discard)
	if err != nil {
		return 0, fmt.Errorf("pipe: %w", err)
	}
	d := time.Since(began)
	if got != n {
		return 0, fmt.Errorf("pipe: got %d bytes of %d", got, n)
	}
	return d, nil
}

// copyHead runs `head -c n /dev/zero` and copies its stdout to w with the
// 32 KiB reads envd makes; it returns once head has exited.
func copyHead(n int64, w io.Writer) (int64, error) {
	cmd := exec.Command("head", "-c", strconv.FormatInt(n, 10), "/dev/zero")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	defer out.Close()
	// Every wait goes through the reaper, which TestMain enabled.
	exited, err := reaper.Start(cmd)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, 32<<10)
	var got int64
	for {
		k, err := out.Read(buf)
		if k > 0 {
			if _, werr := w.Write(buf[:k]); werr != nil {
				return got, werr
			}
			got += int64(k)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return got, err
		}
	}
	if ex := <-exited; ex.Code() != 0 {
		return got, fmt.Errorf("head ended with %s", ex)
	}
	return got, nil
}
