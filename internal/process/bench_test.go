package process_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/gen/process/processconnect"
	"github.com/envd-dev/envd/internal/process/processtest"
	"github.com/envd-dev/envd/internal/reaper"
)

var streamBytes = flag.Int64("stream-bytes", 1<<30, "bytes of stdout BenchmarkStreamThroughput streams each run")

// BenchmarkStreamThroughput streams `head -c N /dev/zero` through the
// service to a Go client with the binary codec, and, as the baseline in the
// same run, reads the same bytes from the same command through a local pipe
// with the same 32 KiB reads envd makes. Runs of the two alternate. It
// reports both rates and their ratio (goal: at least 0.5).
//
//	go test -run '^$' -bench StreamThroughput -benchtime 3x ./internal/process/
//
// The daemon runs in this process, on the same two cores as the client.
func BenchmarkStreamThroughput(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts processtest.ClientOptions
	}{
		{"h2c", processtest.ClientOptions{Proto: processtest.H2C}},
		{"http1", processtest.ClientOptions{Proto: processtest.HTTP1}},
		{"h2c-gzip", processtest.ClientOptions{Proto: processtest.H2C, Gzip: true}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			n := *streamBytes
			if tc.opts.Gzip {
				n = min(n, 256<<20) // deflate is slow: keep runs short
			}
			s := processtest.New(b, processtest.Options{})
			c := s.Client(b, tc.opts)
			var viaEnvd, viaPipe time.Duration
			b.SetBytes(n)
			for b.Loop() {
				d, err := streamOnce(c, n)
				if err != nil {
					b.Fatal(err)
				}
				viaEnvd += d
				d, err = pipeOnce(n)
				if err != nil {
					b.Fatal(err)
				}
				viaPipe += d
			}
			runs := float64(b.N)
			envdRate := float64(n) * runs / viaEnvd.Seconds() / 1e6
			pipeRate := float64(n) * runs / viaPipe.Seconds() / 1e6
			b.ReportMetric(envdRate, "envd-MB/s")
			b.ReportMetric(pipeRate, "pipe-MB/s")
			b.ReportMetric(envdRate/pipeRate, "ratio")
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
		got += int64(len(e.GetData().GetStdout()))
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

// pipeOnce reads n bytes of `head -c n /dev/zero` through a local pipe.
func pipeOnce(n int64) (time.Duration, error) {
	began := time.Now()
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
		got += int64(k)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	if ex := <-exited; ex.Code() != 0 {
		return 0, fmt.Errorf("pipe: head ended with %s", ex)
	}
	d := time.Since(began)
	if got != n {
		return 0, fmt.Errorf("pipe: got %d bytes of %d", got, n)
	}
	return d, nil
}
