package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/gen/process/processconnect"
	"github.com/envd-dev/envd/internal/process/processtest"
	"github.com/envd-dev/envd/internal/server"
)

func TestKeepaliveInterval(t *testing.T) {
	t.Parallel()
	tests := []struct {
		header string
		want   time.Duration
	}{
		{"", server.DefaultKeepalive},
		{"abc", server.DefaultKeepalive},
		{"1.5", server.DefaultKeepalive},
		{"0", server.DefaultKeepalive},
		{"-5", server.DefaultKeepalive},
		{"-99999999999999999999999", server.DefaultKeepalive},
		{"1", time.Second},
		{" 30 ", 30 * time.Second},
		{"3600", time.Hour},
		{"3601", server.MaxKeepalive},
		// Times time.Second, these overflowed: a negative interval (a panic
		// in time.NewTicker) and a wrap to 0.29 s.
		{"9223372037", server.MaxKeepalive},
		{"18446744074", server.MaxKeepalive},
		{"99999999999999999999999", server.MaxKeepalive},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.header != "" {
			h.Set("Keepalive-Ping-Interval", tt.header)
		}
		if got := server.KeepaliveInterval(h); got != tt.want {
			t.Errorf("Keepalive-Ping-Interval %q: %v, want %v", tt.header, got, tt.want)
		}
	}
}

// A Keepalive-Ping-Interval that overflowed a time.Duration panicked the
// Start procedure after its process had started: the client saw an internal
// error for a process that ran anyway. Clamped, the call goes as any other,
// with one process.
func TestStartWithHugeKeepalive(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"9223372037", "18446744074"} {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			s := processtest.New(t, processtest.Options{})
			c := s.Client(t, processtest.ClientOptions{Header: http.Header{"Keepalive-Ping-Interval": {v}}})
			// Each process that runs adds a line to runs.
			runs := filepath.Join(t.TempDir(), "runs")
			stream, err := c.Start(processtest.Context(t, processtest.WaitShort), connect.NewRequest(&pb.StartRequest{
				Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", `echo ran >> "$0"; echo started`, runs}},
			}))
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			var out strings.Builder
			var end *pb.ProcessEvent_EndEvent
			starts := 0
			for stream.Receive() {
				ev := stream.Msg().GetEvent()
				switch {
				case ev.GetStart() != nil:
					starts++
				case ev.GetData() != nil:
					out.Write(ev.GetData().GetStdout())
				case ev.GetEnd() != nil:
					end = ev.GetEnd()
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("stream failed: %v", err)
			}
			if starts != 1 || out.String() != "started\n" || end == nil || end.GetExitCode() != 0 {
				t.Errorf("%d start events, output %q, end %v; want 1, \"started\\n\", exit 0", starts, out.String(), end)
			}
			if b, err := os.ReadFile(runs); err != nil || string(b) != "ran\n" {
				t.Errorf("runs: %q %v; want one process", b, err)
			}
		})
	}
}

// filler is n bytes of 'a', made on the fly so the client holds none of them.
type filler struct{ n int64 }

func (f *filler) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), f.n)]
	for i := range p {
		p[i] = 'a'
	}
	f.n -= int64(len(p))
	return len(p), nil
}

// A 64 MiB unary body is refused with resource_exhausted once
// server.MaxMessageBytes was read, and the daemon never holds it: what it
// allocates while answering (16 MiB: Connect's buffer growing to hold the
// 6 MiB it reads; 32 MiB under -race, which allocates each growth twice)
// stays below the body's size. Not parallel:
// the heap is measured while no other test runs.
func TestUnaryBodyOverLimit(t *testing.T) {
	s := processtest.New(t, processtest.Options{})
	hc := processtest.HTTPClient(t, processtest.HTTP1, "", nil)
	const size = 64 << 20

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	req, err := http.NewRequestWithContext(processtest.Context(t, processtest.WaitLong), "POST", s.URL+"/process.Process/List", &filler{n: size})
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/json")
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	runtime.ReadMemStats(&after)

	var e struct{ Code, Message string }
	json.Unmarshal(body, &e)
	if res.StatusCode != http.StatusTooManyRequests || e.Code != "resource_exhausted" || !strings.Contains(e.Message, "larger than configured max 6291456") {
		t.Errorf("%d %s; want 429 resource_exhausted, larger than configured max 6291456", res.StatusCode, body)
	}
	if !res.Close {
		t.Error("the connection stays open: the rest of the body is read")
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %.1f MiB while refusing a %d MiB body", float64(alloc)/(1<<20), size>>20)
	if alloc >= size { // before the cap: more than twice the body (a growing buffer)
		t.Errorf("allocated %.1f MiB while refusing a %d MiB body: it was buffered", float64(alloc)/(1<<20), size>>20)
	}
	// The daemon serves on.
	if _, err := s.Client(t, processtest.ClientOptions{}).List(processtest.Context(t, processtest.WaitShort), connect.NewRequest(&pb.ListRequest{})); err != nil {
		t.Errorf("List after the refused body: %v", err)
	}
}

// Input up to the cap reaches the process: 4 MiB in one message, over the
// binary and the JSON codec (base64: 5.4 MiB). A larger message, unary or
// in a stream, is refused with resource_exhausted and writes nothing.
func TestInputMessageLimit(t *testing.T) {
	t.Parallel()
	s := processtest.New(t, processtest.Options{})
	c := s.Client(t, processtest.ClientOptions{})
	cj := s.Client(t, processtest.ClientOptions{Codec: processtest.JSON})
	ctx := processtest.Context(t, processtest.WaitLong)
	stdin := true
	stream, err := c.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "wc", Args: []string{"-c"}}, Stdin: &stdin}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("no start event: %v", stream.Err())
	}
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: stream.Msg().GetEvent().GetStart().GetPid()}}
	input := func(n int) *pb.ProcessInput {
		return &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: bytes.Repeat([]byte("x"), n)}}
	}

	const fits = 4 << 20
	for name, c := range map[string]processconnect.ProcessClient{"binary": c, "json": cj} {
		if _, err := c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: input(fits)})); err != nil {
			t.Fatalf("SendInput of %d bytes over %s: %v", fits, name, err)
		}
	}
	_, err = c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: input(server.MaxMessageBytes)}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("SendInput of %d bytes: %v, want resource_exhausted", server.MaxMessageBytes, err)
	}
	in := c.StreamInput(ctx)
	in.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: sel}}})
	in.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: input(server.MaxMessageBytes)}}})
	if _, err := in.CloseAndReceive(); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("StreamInput of a %d-byte chunk: %v, want resource_exhausted", server.MaxMessageBytes, err)
	}
	if _, err := c.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: sel})); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for stream.Receive() {
		out.Write(stream.Msg().GetEvent().GetData().GetStdout())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(out.String()), strconv.Itoa(2*fits); got != want {
		t.Errorf("the process read %s bytes, want %s: only the input that fits", got, want)
	}
}

// What follows the first MaxMessageBytes of a unary body is never read, not
// even as the next request on the connection: envd answers, then closes it.
func TestUnaryBodyOverLimitIsNotParsed(t *testing.T) {
	t.Parallel()
	s := processtest.New(t, processtest.Options{})
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(processtest.WaitLong))
	smuggled := "POST /process.Process/List HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
	body := strings.Repeat(" ", server.MaxMessageBytes+(1<<20)) + smuggled
	go func() {
		// Fails once envd closed the connection: not a failure.
		fmt.Fprintf(conn, "POST /process.Process/List HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}()
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests || !res.Close {
		t.Errorf("%d %s, Connection: close %v; want 429, closed", res.StatusCode, b, res.Close)
	}
	if rest, _ := io.ReadAll(br); len(rest) > 0 {
		t.Errorf("after the answer, envd sent %q: it read the rest of the body as a request", rest)
	}
}
