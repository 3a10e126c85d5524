package jupyter_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/testutil"
)

// heapPeak samples the Go heap in use until the returned func is called,
// which returns the peak growth over the heap at the start. The tests
// using it do not call t.Parallel, so the heap is theirs alone.
func heapPeak(t *testing.T) func() int64 {
	t.Helper()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := int64(ms.HeapInuse)
	var peak atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Millisecond) // sampling, not synchronisation
		defer tick.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if v := int64(ms.HeapInuse) - base; v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return func() int64 {
		close(done)
		wg.Wait()
		return peak.Load()
	}
}

// drain reads an execution to its end, counting its stdout bytes without
// keeping them, and returns the drop markers it met.
func drain(t *testing.T, ctx context.Context, e *jupyter.Execution, each func(*jupyter.Message, *jupyter.StreamContent)) error {
	t.Helper()
	for {
		m, err := e.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var s jupyter.StreamContent
		if m.Type() == "stream" {
			mustDecode(t, m, &s)
		}
		each(m, &s)
	}
}

// TestHugePrintIsBounded: a 100 MiB print (ENVD_HUGE_PRINT_MIB to change
// it: ipykernel takes about 2 minutes to send 300) in one kernel message
// reaches a reader that keeps up whole, in pieces, while the heap stays
// bounded (before: the frame was read whole, 1 GiB allowed, and decoded in
// copies: +1516 MiB for 300 MiB).
func TestHugePrintIsBounded(t *testing.T) {
	// A reader that keeps up: under -race beside CPU burners this one
	// takes about half a second per MiB, and once went more than the
	// default ReaderGrace (1 s) without taking a message, so the queue
	// dropped output. Dropping is TestStalledReaderIsBounded's subject.
	k, _ := startKernel(t, shared.client, "python3", jupyter.KernelOptions{ReaderGrace: time.Minute})
	ctx := testutil.Context(t, 10*time.Minute)
	mib := 100
	if v := os.Getenv("ENVD_HUGE_PRINT_MIB"); v != "" {
		var err error
		if mib, err = strconv.Atoi(v); err != nil {
			t.Fatalf("ENVD_HUGE_PRINT_MIB=%q", v)
		}
	}
	size := mib << 20
	stop := heapPeak(t)
	e, err := k.Execute(ctx, fmt.Sprintf("print('x' * (%d << 20))", mib), jupyter.ExecuteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var total, messages int
	err = drain(t, ctx, e, func(m *jupyter.Message, s *jupyter.StreamContent) {
		if s.Name == "stdout" {
			messages++
			total += len(s.Text)
			if strings.Count(s.Text, "x") != len(strings.TrimSuffix(s.Text, "\n")) {
				t.Errorf("unexpected text in %q...", short(s.Text))
			}
		}
	})
	peak := stop()
	if err != nil {
		t.Fatalf("execution ended with %v", err)
	}
	t.Logf("%d MiB print: %d bytes in %d messages; heap peak +%d MiB", mib, total, messages, peak>>20)
	if total != size+1 {
		t.Errorf("got %d bytes of stdout, want %d", total, size+1)
	}
	if peak > 128<<20 {
		t.Errorf("heap grew by %d MiB reading a %d MiB print", peak>>20, mib)
	}
}

// TestStalledReaderIsBounded: 200 prints of 1 MiB while the execution's
// reader reads nothing. The queue holds MaxQueuedBytes; after ReaderGrace
// the rest is dropped, and one marker says how much (before: all 200 MiB
// were queued).
func TestStalledReaderIsBounded(t *testing.T) {
	clk := quartz.NewMock(t).WithLogger(quartz.NoOpLogger)
	k, _ := startKernel(t, shared.client, "python3", jupyter.KernelOptions{Clock: clk})
	ctx := testutil.Context(t, 5*time.Minute)
	wait := clk.Trap().NewTimer("jupyter", "reader-grace")
	defer wait.Close()

	stop := heapPeak(t)
	e, err := k.Execute(ctx, "import sys\nfor i in range(200):\n    sys.stdout.write('y' * (1 << 20)); sys.stdout.flush()", jupyter.ExecuteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The queue is full: the kernel's reader waits for ours, then gives up.
	call, err := wait.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	call.MustRelease(ctx)
	clk.Advance(time.Second).MustWait(ctx)
	select {
	case <-e.Done():
	case <-ctx.Done():
		t.Fatal("execution did not end while its reader was stalled")
	}
	peak := stop()

	var kept, markers int
	var dropped int64
	err = drain(t, ctx, e, func(m *jupyter.Message, s *jupyter.StreamContent) {
		switch {
		case s.Name == "stdout":
			kept += len(s.Text)
		case m.Dropped > 0:
			markers++
			dropped += m.Dropped
			if s.Name != "stderr" || !strings.Contains(s.Text, "[envd: "+strconv.FormatInt(m.Dropped, 10)+" bytes of output dropped") {
				t.Errorf("marker %s %q", s.Name, s.Text)
			}
		}
	})
	if err != nil {
		t.Fatalf("execution ended with %v", err)
	}
	t.Logf("200 x 1 MiB, reader stalled: %d MiB kept, %d MiB dropped (%d markers); heap peak +%d MiB", kept>>20, dropped>>20, markers, peak>>20)
	// A marker stands for consecutive drops; the reply, which may come
	// before the last outputs, starts another.
	if int64(kept)+dropped != 200<<20 || markers == 0 {
		t.Errorf("kept %d + dropped %d bytes in %d markers, want 200 MiB", kept, dropped, markers)
	}
	if kept > 33<<20 {
		t.Errorf("%d bytes were queued, more than the 32 MiB cap", kept)
	}
	if peak > 128<<20 {
		t.Errorf("heap grew by %d MiB with a stalled reader", peak>>20)
	}
	// The kernel and the connection are fine afterwards.
	if got := mustOK(t, execute(t, k, "print('after')")).stdout; got != "after\n" {
		t.Errorf("after the drop: %q", got)
	}
}

// TestSixteenMiBMessageArrivesWhole: the biggest message delivered as is.
func TestSixteenMiBMessageArrivesWhole(t *testing.T) {
	t.Parallel()
	// A reader that keeps up (see TestHugePrintIsBounded).
	k, _ := startKernel(t, shared.client, "python3", jupyter.KernelOptions{ReaderGrace: time.Minute})
	r := mustOK(t, execute(t, k, "import sys\nsys.stdout.write('z' * (16 << 20)); sys.stdout.flush()"))
	var streams int
	for _, m := range r.msgs {
		if m.Type() == "stream" {
			streams++
			if m.Dropped != 0 {
				t.Errorf("Dropped = %d", m.Dropped)
			}
		}
	}
	if streams != 1 || r.stdout != strings.Repeat("z", 16<<20) {
		t.Errorf("%d stream messages, %d bytes; want 1 of 16 MiB", streams, len(r.stdout))
	}
}

// TestForgedInputRequestsAreBounded: code in the kernel publishes
// input_request messages on iopub with its own execution as their parent
// (anything running in the kernel can use its session). Control messages
// are never dropped up to twice the cap, but beyond it an input_request is
// not one of those kept: a reader that is behind (an execution paced to a
// slow client) must not let the queue grow with what the code sends.
func TestForgedInputRequestsAreBounded(t *testing.T) {
	const capBytes = 4 << 20
	const n = 64 // 1 MiB each
	k, _ := startKernel(t, shared.client, "python3", jupyter.KernelOptions{MaxQueuedBytes: capBytes})
	ctx := testutil.Context(t, 5*time.Minute)
	stop := heapPeak(t)
	code := fmt.Sprintf(`k = get_ipython().kernel
p = k.get_parent("shell")
big = "x" * (1 << 20)
for i in range(%d):
    k.session.send(k.iopub_socket, "input_request", {"prompt": big, "password": False}, parent=p)
`, n)
	e, err := k.Execute(ctx, code, jupyter.ExecuteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The reader is behind: it reads nothing until the execution ended.
	select {
	case <-e.Done():
	case <-ctx.Done():
		t.Fatal("execution did not end")
	}
	peak := stop()
	var queued, requests int
	for {
		m, err := e.Next(ctx)
		if err != nil {
			break
		}
		if m.Type() == "input_request" {
			requests++
			queued += len(m.Content)
		}
	}
	t.Logf("%d forged input_requests queued, %d MiB; heap peak +%d MiB", requests, queued>>20, peak>>20)
	if queued > 2*capBytes+(1<<20) {
		t.Errorf("%d MiB of forged input_request queued, more than twice the %d MiB cap", queued>>20, capBytes>>20)
	}
}
