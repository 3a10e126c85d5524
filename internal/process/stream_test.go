package process_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/quartz"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/internal/outbuf"
	"github.com/envd-dev/envd/internal/process"
	"github.com/envd-dev/envd/internal/process/processtest"
)

// newManager is a Manager for tests of the domain API; every process it
// started is killed at cleanup.
func newManager(t *testing.T, o process.Options) *process.Manager {
	t.Helper()
	o.Logger = processtest.Logger()
	m := process.NewManager(o)
	t.Cleanup(func() { processtest.KillAll(t, m) })
	return m
}

// domainOptions runs cmd as root in /, with stdin: startDomain's and
// startFollowed's start.
func domainOptions(t *testing.T, cmd string, args []string) process.StartOptions {
	t.Helper()
	return process.StartOptions{
		Config: process.Config{Cmd: cmd, Args: args},
		User:   lookup(t, "root"),
		Dir:    "/",
		Stdin:  true,
	}
}

func startDomain(t *testing.T, m *process.Manager, cmd string, args ...string) *process.Process {
	t.Helper()
	p, err := m.Start(domainOptions(t, cmd, args))
	if err != nil {
		t.Fatalf("Start %s: %v", cmd, err)
	}
	return p
}

// follow reads r until EOF in the test's goroutine, checking that records
// follow each other without a gap; it returns the byte count.
func follow(t *testing.T, p *process.Process, r *process.Reader) int64 {
	t.Helper()
	var next int64
	deadline := time.After(waitLong)
	for {
		recs, err := r.Read()
		if errors.Is(err, io.EOF) {
			return next
		}
		if err != nil {
			t.Fatalf("fast reader: %v (after %d bytes)", err, next)
		}
		for _, rec := range recs {
			if rec.Off != next {
				t.Fatalf("record at offset %d, want %d", rec.Off, next)
			}
			next += int64(len(rec.Data))
		}
		if len(recs) > 0 {
			continue
		}
		select {
		case <-r.Wait():
		case <-deadline:
			t.Fatalf("process %d: output not over after %v (%d bytes read)", p.Pid(), waitLong, next)
		}
	}
}

// waitDone waits for a process to end.
func waitDone(t *testing.T, p *process.Process, d time.Duration) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(d):
		t.Fatalf("process %d still running after %v", p.Pid(), d)
	}
}

// TestSlowReader: a reader that never reads does not stall the process or
// a reader that keeps up (it may hold them up for ReaderGrace, once); the
// one that keeps up gets every byte, the stuck one learns exactly how much
// it lost.
func TestSlowReader(t *testing.T) {
	t.Parallel()
	const logSize = 64 << 10
	const total = 16 << 20
	m := newManager(t, process.Options{LogSize: logSize, ReaderGrace: time.Second})
	p := startDomain(t, m, "head", "-c", strconv.Itoa(total), "/dev/zero")
	fast, stuck := p.Follow(), p.Follow()
	defer fast.Close()
	defer stuck.Close()
	unwaited := p.Output() // a plain cursor: never waited for
	if got := follow(t, p, fast); got != total {
		t.Errorf("the reader that kept up got %d bytes, want %d", got, total)
	}
	waitDone(t, p, waitShort)
	if ex, _ := p.Exit(); ex.Code != 0 {
		t.Errorf("exit %+v", ex)
	}
	for name, read := range map[string]func() ([]outbuf.Record, error){"stuck reader": stuck.Read, "plain cursor": unwaited.Read} {
		_, err := read()
		lost, ok := errors.AsType[*outbuf.LostError](err)
		if !ok {
			t.Errorf("%s: Read = %v, want a *outbuf.LostError", name, err)
			continue
		}
		// What was lost and what is still retained add up to everything.
		var rest int64
		for {
			recs, err := read()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Errorf("%s after the loss: %v", name, err)
				}
				break
			}
			for _, r := range recs {
				rest += int64(len(r.Data))
			}
		}
		if lost.From != 0 || lost.Lost()+rest != total || rest > logSize {
			t.Errorf("%s: lost %d bytes from %d, then read %d: want all %d from 0, at most %d retained", name, lost.Lost(), lost.From, rest, total, logSize)
		}
	}
}

// TestPacedReaders: with the program paced by its input, a reader that
// keeps up gets every byte while a stuck one is left behind and the program
// is never blocked on it for good.
func TestPacedReaders(t *testing.T) {
	t.Parallel()
	const logSize = 64 << 10
	m := newManager(t, process.Options{LogSize: logSize, ReaderGrace: time.Second})
	p := startDomain(t, m, "cat")
	fast, stuck := p.Follow(), p.Follow()
	defer fast.Close()
	defer stuck.Close()
	chunk := make([]byte, 8<<10)
	var read int64
	for i := range 128 { // 1 MiB: 16 times the log
		for j := range chunk {
			chunk[j] = byte(i)
		}
		if err := p.WriteStdin(context.Background(), chunk); err != nil {
			t.Fatalf("WriteStdin #%d: %v", i, err)
		}
		deadline := time.After(waitShort)
		for read < int64(i+1)*int64(len(chunk)) {
			recs, err := fast.Read()
			if err != nil {
				t.Fatalf("fast reader: %v", err)
			}
			for _, r := range recs {
				for k, b := range r.Data {
					if want := byte((r.Off + int64(k)) / int64(len(chunk))); b != want {
						t.Fatalf("byte at %d = %d, want %d", r.Off+int64(k), b, want)
					}
				}
				read += int64(len(r.Data))
			}
			if len(recs) == 0 {
				select {
				case <-fast.Wait():
				case <-deadline:
					t.Fatalf("chunk %d not echoed after %v", i, waitShort)
				}
			}
		}
	}
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	waitDone(t, p, waitShort)
	_, err := stuck.Read()
	if lost, ok := errors.AsType[*outbuf.LostError](err); !ok || lost.Lost() < 1<<20-logSize {
		t.Errorf("stuck reader: %v, want a loss of at least %d bytes", err, 1<<20-logSize)
	}
}

// TestDataLoss: through the service, a client that stops reading is ended
// with data_loss saying how much it lost, while a client that reads gets
// every byte and the end.
func TestDataLoss(t *testing.T) {
	t.Parallel()
	// Well past what HTTP and TCP buffer for a stuck client.
	const total = 64 << 20
	// The default ReaderGrace: the stuck clients hold the process 2 s.
	s := processtest.New(t, processtest.Options{LogSize: 256 << 10})
	fastClient := s.Client(t, processtest.ClientOptions{})
	ctx := processtest.Context(t, waitLong)
	// Two stuck clients, one per HTTP version: a Start stream and a Connect
	// stream, read only after the exit. The process waits for input so
	// that everyone attaches before it prints.
	c1 := s.Client(t, processtest.ClientOptions{Proto: processtest.H2C})
	c2 := s.Client(t, processtest.ClientOptions{Proto: processtest.HTTP1})
	st1, err := c1.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: processtest.Sh(fmt.Sprintf("read x; head -c %d /dev/zero", total))}))
	if err != nil {
		t.Fatal(err)
	}
	defer st1.Close()
	if !st1.Receive() || st1.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("no start event: %v", st1.Err())
	}
	pid := st1.Msg().GetEvent().GetStart().GetPid()
	st2, err := c2.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: processtest.PidSel(pid)}))
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	if !st2.Receive() || st2.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("no start event: %v", st2.Err())
	}
	stuck := []stream{
		{st1.Receive, func() *pb.ProcessEvent { return st1.Msg().GetEvent() }, st1.Err},
		{st2.Receive, func() *pb.ProcessEvent { return st2.Msg().GetEvent() }, st2.Err},
	}
	fast := processtest.Connect(t, fastClient, processtest.PidSel(pid), processtest.WatchOptions{Count: true})
	fast.Pid(t)
	if _, err := fastClient.SendInput(bounded(t), connect.NewRequest(&pb.SendInputRequest{Process: processtest.PidSel(pid), Input: processtest.StdinInput("go\n")})); err != nil {
		t.Fatal(err)
	}
	st := fast.End(t, waitLong)
	checkEnd(t, st, exit0)
	if st.DataBytes != total {
		t.Errorf("the reading client got %d bytes, want %d", st.DataBytes, total)
	}
	for i, stream := range stuck {
		var got int64
		for stream.receive() {
			if e := stream.event(); e.GetEnd() != nil {
				t.Fatalf("stuck client %d got the end after %d bytes, want data_loss", i, got)
			}
			got += int64(len(stream.event().GetData().GetStdout()))
		}
		err := stream.err()
		wantErr(t, err, connect.CodeDataLoss, "bytes lost", "fell behind")
		m := regexp.MustCompile(`: (\d+) bytes lost`).FindStringSubmatch(err.Error())
		if m == nil {
			t.Fatalf("no byte count in %q", err)
		}
		if lost, _ := strconv.ParseInt(m[1], 10, 64); lost <= 0 || got+lost > total {
			t.Errorf("stuck client %d got %d bytes, then lost %d: the count is wrong for a %d-byte output", i, got, lost, total)
		}
	}
	// Still serving.
	if s := start(t, fastClient, &pb.StartRequest{Process: processtest.Sh("echo alive")}).End(t, waitShort); s.Stdout != "alive\n" {
		t.Fatalf("after data loss: stdout = %q", s.Stdout)
	}
}

// stream is a Start or Connect stream as a client reads it.
type stream struct {
	receive func() bool
	event   func() *pb.ProcessEvent
	err     func() error
}

// TestBigStream streams `head -c 2G /dev/zero` to a client with the binary
// codec: every byte arrives, and the heap of this process, daemon and client
// together, stays small. With -short, or under the race detector (which
// would take minutes over 2 GiB on two cores), it streams 256 MiB.
func TestBigStream(t *testing.T) {
	t.Parallel()
	total := int64(2 << 30)
	if testing.Short() || raceEnabled {
		total = 256 << 20
	}
	const heapLimit = 200 << 20
	// A clock that never moves: the client is never left behind (after
	// ReaderGrace of it), however long a loaded machine starves it.
	s := processtest.New(t, processtest.Options{Clock: quartz.NewMock(t).WithLogger(quietLogger{})})
	c := s.Client(t, processtest.ClientOptions{Codec: processtest.Binary})
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	began := time.Now()
	w := processtest.Start(t, c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "head", Args: []string{"-c", strconv.FormatInt(total, 10), "/dev/zero"}}}, processtest.WatchOptions{Count: true})
	st := w.End(t, waitLong)
	close(stop)
	wg.Wait()
	elapsed := time.Since(began)
	checkEnd(t, st, exit0)
	if st.DataBytes != total {
		t.Errorf("got %d bytes, want %d", st.DataBytes, total)
	}
	t.Logf("%d MiB in %v (%.0f MB/s), peak heap in use %d MiB", total>>20, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds()/1e6, peak.Load()>>20)
	if p := peak.Load(); p > heapLimit {
		t.Errorf("peak heap in use %d MiB, want under %d MiB", p>>20, heapLimit>>20)
	}
}
