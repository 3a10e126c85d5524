package interpreter_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/quartz"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/envd-dev/envd/gen/envd/interpreter/v1"
	"github.com/envd-dev/envd/gen/envd/interpreter/v1/interpreterv1connect"
	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/interpreter"
	"github.com/envd-dev/envd/internal/interpreter/codeconnect"
	"github.com/envd-dev/envd/internal/jupyter"
	"github.com/envd-dev/envd/internal/server"
	"github.com/envd-dev/envd/internal/testutil"
)

// serveService serves the Connect service over eng (nil: code execution
// off) as envd does, with envd's handler options, on an httptest server
// closed at cleanup; it returns a generated client.
func serveService(t testing.TB, eng *interpreter.Engine, opts codeconnect.Options) interpreterv1connect.InterpreterServiceClient {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	path, h := codeconnect.New(eng, opts).Handler(server.HandlerOptions(testLogger(), defaults.New("root", nil))...)
	mux := http.NewServeMux()
	mux.Handle(path, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	hc := srv.Client()
	t.Cleanup(hc.CloseIdleConnections)
	return interpreterv1connect.NewInterpreterServiceClient(hc, srv.URL)
}

// svcEngine is the engine of the service tests, on the shared Jupyter
// server: a small event log makes eviction cheap to cause, and a long
// interrupt grace keeps a kernel that is slow to stop on two loaded cores
// from being restarted (its state lost) instead of interrupted.
var svcEngine struct {
	once sync.Once
	eng  *interpreter.Engine
}

func serviceEngine() *interpreter.Engine {
	svcEngine.once.Do(func() {
		svcEngine.eng = interpreter.New(interpreter.Options{
			Supervisor:     shared.sup,
			Logger:         testLogger(),
			LogBytes:       svcLogBytes,
			InterruptGrace: 10 * time.Second,
			ReaderGrace:    5 * time.Second,
			KeepFinished:   time.Minute,
			DefaultCwd:     func() string { return "/tmp" },
		})
	})
	return svcEngine.eng
}

// svcLogBytes is the capacity of each execution's event log in the
// service tests.
const svcLogBytes = 512 << 10

// closeServiceEngine closes the engine of the service tests, if they ran.
func closeServiceEngine() {
	if svcEngine.eng != nil {
		svcEngine.eng.Close()
	}
}

// svc is a client of the service over the service tests' engine.
func svc(t testing.TB) interpreterv1connect.InterpreterServiceClient {
	t.Helper()
	return serveService(t, serviceEngine(), codeconnect.Options{})
}

// rpcContext creates a Python context through the service and removes it
// at cleanup.
func rpcContext(t testing.TB, c interpreterv1connect.InterpreterServiceClient, cwd string) *pb.Context {
	t.Helper()
	resp, err := c.CreateContext(testutil.Context(t, kernelTimeout), connect.NewRequest(&pb.CreateContextRequest{Cwd: cwd}))
	if err != nil {
		t.Fatalf("CreateContext: %v", err)
	}
	ctx := resp.Msg.GetContext()
	t.Cleanup(func() { removeSvcContext(ctx.GetId()) })
	return ctx
}

func removeSvcContext(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = serviceEngine().RemoveContext(ctx, id)
}

// eventStream is what Execute and AttachExecution return.
type eventStream interface {
	Receive() bool
	Err() error
	Close() error
}

// events is what a stream carried.
type events struct {
	evs        []*pb.ExecutionEvent // keepalives and queued notices excepted
	keepalives int
	err        error // the stream's error, nil if it ended well
}

// receive reads n events (keepalives and queued notices not counted), or
// all of them when n is negative.
func receive[T any](t testing.TB, s interface {
	eventStream
	Msg() *T
}, event func(*T) *pb.ExecutionEvent, n int) *events {
	t.Helper()
	out := &events{}
	for n < 0 || len(out.evs) < n {
		if !s.Receive() {
			out.err = s.Err()
			return out
		}
		ev := event(s.Msg())
		if ev.GetKeepalive() != nil {
			out.keepalives++
			continue
		}
		if ev.GetQueued() != nil {
			// Unsequenced, before Started: the execution waits behind
			// another, as in a context other tests share (the default
			// one) it may.
			continue
		}
		out.evs = append(out.evs, ev)
	}
	return out
}

func (e *events) stdout() string {
	var b strings.Builder
	for _, ev := range e.evs {
		b.WriteString(ev.GetStdout().GetText())
	}
	return b.String()
}

func (e *events) end() *pb.End {
	if len(e.evs) == 0 {
		return nil
	}
	return e.evs[len(e.evs)-1].GetEnd()
}

func (e *events) errors() []*pb.Error {
	var out []*pb.Error
	for _, ev := range e.evs {
		if x := ev.GetError(); x != nil {
			out = append(out, x)
		}
	}
	return out
}

func (e *events) results() []*pb.Result {
	var out []*pb.Result
	for _, ev := range e.evs {
		if x := ev.GetResult(); x != nil {
			out = append(out, x)
		}
	}
	return out
}

func (e *events) String() string {
	var kinds []string
	for _, ev := range e.evs {
		k := fmt.Sprintf("%T", ev.GetEvent())
		k = strings.TrimPrefix(k, "*interpreterv1.ExecutionEvent_")
		kinds = append(kinds, fmt.Sprintf("%d:%s", ev.GetSeq(), k))
	}
	return fmt.Sprintf("%v err=%v", kinds, e.err)
}

// checkSeqFrom fails unless the events are numbered from, from+1, ...
func (e *events) checkSeqFrom(t testing.TB, from uint64) {
	t.Helper()
	for i, ev := range e.evs {
		if ev.GetSeq() != from+uint64(i) {
			t.Fatalf("event %d has seq %d, want %d: %v", i, ev.GetSeq(), from+uint64(i), e)
		}
	}
}

// rpcExecute runs req to its end and checks the framing: started first (seq
// 0, with the ids), contiguous seqs, end last.
func rpcExecute(t testing.TB, c interpreterv1connect.InterpreterServiceClient, req *pb.ExecuteRequest) *events {
	t.Helper()
	s, err := c.Execute(testutil.Context(t, execTimeout), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	defer s.Close()
	e := receive(t, s, (*pb.ExecuteResponse).GetEvent, -1)
	if e.err != nil {
		t.Fatalf("Execute %q: %v; events %v", short(req.GetCode()), e.err, e)
	}
	checkFraming(t, e)
	return e
}

func checkFraming(t testing.TB, e *events) {
	t.Helper()
	e.checkSeqFrom(t, 0)
	if len(e.evs) < 2 || e.evs[0].GetStarted() == nil || e.end() == nil {
		t.Fatalf("want started first and end last: %v", e)
	}
	if st := e.evs[0].GetStarted(); st.GetExecutionId() == "" || st.GetContextId() == "" {
		t.Fatalf("started without ids: %v", st)
	}
}

func wantReason(t testing.TB, e *events, want pb.EndReason) {
	t.Helper()
	if got := e.end().GetReason(); got != want {
		t.Fatalf("end %v (%q), want %v; events %v, errors %v", got, e.end().GetMessage(), want, e, e.errors())
	}
}

func TestServiceExecute(t *testing.T) {
	t.Parallel()
	c := svc(t)
	ctx := rpcContext(t, c, "/tmp")
	e := rpcExecute(t, c, &pb.ExecuteRequest{ContextId: ctx.GetId(), Code: `import sys
from IPython.display import HTML
x = 41
print("one")
print("two", file=sys.stderr)
display(HTML("<b>shown</b>"))
'x is ' + str(x)`})
	wantReason(t, e, pb.EndReason_END_REASON_OK)
	st := e.evs[0].GetStarted()
	if st.GetContextId() != ctx.GetId() || st.GetExecutionCount() != 1 {
		t.Errorf("started %v, want context %s and count 1", st, ctx.GetId())
	}
	var kinds []string
	for _, ev := range e.evs {
		kinds = append(kinds, strings.TrimPrefix(fmt.Sprintf("%T", ev.GetEvent()), "*interpreterv1.ExecutionEvent_"))
	}
	if got, want := strings.Join(kinds, " "), "Started Stdout Stderr Result Result End"; got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
	if out := e.evs[1].GetStdout(); out.GetText() != "one\n" || out.GetTimestamp() == nil || time.Since(out.GetTimestamp().AsTime()) > time.Minute {
		t.Errorf("stdout %v", out)
	}
	if e.evs[2].GetStderr().GetText() != "two\n" {
		t.Errorf("stderr %v", e.evs[2])
	}
	display, main := e.results()[0], e.results()[1]
	if display.GetIsMainResult() || string(display.GetData()["text/html"]) != `"<b>shown</b>"` {
		t.Errorf("display: %v", display)
	}
	// text: text/plain without the string repr's quotes; data: raw JSON.
	if !main.GetIsMainResult() || main.GetText() != "x is 41" || string(main.GetData()["text/plain"]) != `"'x is 41'"` {
		t.Errorf("main result: %v", main)
	}

	// State and count carry over; per-execution env vars are set, then
	// restored.
	e = rpcExecute(t, c, &pb.ExecuteRequest{ContextId: ctx.GetId(), Code: "import os\n(x + 1, os.environ['ENVD_RPC'])",
		EnvVars: map[string]string{"ENVD_RPC": "é ok"}})
	wantReason(t, e, pb.EndReason_END_REASON_OK)
	if got := e.results()[0].GetText(); got != "(42, 'é ok')" || e.evs[0].GetStarted().GetExecutionCount() != 2 {
		t.Errorf("second run: %q, started %v", got, e.evs[0].GetStarted())
	}
	e = rpcExecute(t, c, &pb.ExecuteRequest{ContextId: ctx.GetId(), Code: "os.environ.get('ENVD_RPC')"})
	if len(e.results()) != 0 {
		t.Errorf("the env var outlived its execution: %v", e.results())
	}

	// No context: the default Python context, as language python.
	e = rpcExecute(t, c, &pb.ExecuteRequest{Code: "1 + 1"})
	def := e.evs[0].GetStarted().GetContextId()
	e2 := rpcExecute(t, c, &pb.ExecuteRequest{Code: "2 + 2", Language: "python"})
	if def == ctx.GetId() || e2.evs[0].GetStarted().GetContextId() != def || e2.results()[0].GetText() != "4" {
		t.Errorf("default context %s, then %v", def, e2)
	}
}

func TestServiceError(t *testing.T) {
	t.Parallel()
	c := svc(t)
	ctx := rpcContext(t, c, "")
	e := rpcExecute(t, c, &pb.ExecuteRequest{ContextId: ctx.GetId(), Code: "print('before')\n1/0"})
	wantReason(t, e, pb.EndReason_END_REASON_ERROR)
	errs := e.errors()
	if len(errs) != 1 || errs[0].GetName() != "ZeroDivisionError" || errs[0].GetValue() != "division by zero" || !strings.Contains(errs[0].GetTraceback(), "1/0") {
		t.Fatalf("errors %v", errs)
	}
	if e.stdout() != "before\n" || e.end().GetMessage() != "" {
		t.Errorf("stdout %q, end %v", e.stdout(), e.end())
	}
}

func TestServiceInterrupt(t *testing.T) {
	t.Parallel()
	c := svc(t)
	ctx := rpcContext(t, c, "")
	rpcExecute(t, c, &pb.ExecuteRequest{ContextId: ctx.GetId(), Code: "kept = 5"})
	s, err := c.Execute(testutil.Context(t, execTimeout), connect.NewRequest(&pb.ExecuteRequest{ContextId: ctx.GetId(),
		Code: "print('looping', flush=True)\nwhile True: pass"}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first := receive(t, s, (*pb.ExecuteResponse).GetEvent, 2)
	if first.err != nil || first.evs[0].GetStarted() == nil || first.stdout() != "looping\n" {
		t.Fatalf("first events: %v", first)
	}
	// The code runs: interrupt it.
	if _, err := c.Interrupt(testutil.Context(t, time.Minute), connect.NewRequest(&pb.InterruptRequest{ContextId: ctx.GetId()})); err != nil {
		t.Fatal(err)
	}
	rest := receive(t, s, (*pb.ExecuteResponse).GetEvent, -1)
	e := &events{evs: append(first.evs, rest.evs...), err: rest.err}
	if e.err != nil {
		t.Fatal(e)
	}
	checkFraming(t, e)
	wantReason(t, e, pb.EndReason_END_REASON_INTERRUPTED)
	if errs := e.errors(); len(errs) != 1 || errs[0].GetName() != "KeyboardInterrupt" {
		t.Errorf("errors %v", errs)
	}
	// Interrupted, not restarted: the state is kept. Nothing running is
	// not an error.
	if got := rpcExecute(t, c, &pb.ExecuteRequest{ContextId: ctx.GetId(), Code: "kept"}).results()[0].GetText(); got != "5" {
		t.Errorf("after the interrupt: %q", got)
	}
	if _, err := c.Interrupt(testutil.Context(t, time.Minute), connect.NewRequest(&pb.InterruptRequest{ContextId: ctx.GetId()})); err != nil {
		t.Errorf("Interrupt of an idle context: %v", err)
	}
}

func TestServiceTimeout(t *testing.T) {
	t.Parallel()
	c := svc(t)
	ctx := rpcContext(t, c, "")
	e := rpcExecute(t, c, &pb.ExecuteRequest{ContextId: ctx.GetId(), Code: "import time\ntime.sleep(60)", Timeout: durationpb.New(500 * time.Millisecond)})
	wantReason(t, e, pb.EndReason_END_REASON_TIMED_OUT)
	if !strings.Contains(e.end().GetMessage(), "timed out after 500ms") {
		t.Errorf("end message %q", e.end().GetMessage())
	}
	if errs := e.errors(); len(errs) != 2 || errs[0].GetName() != "KeyboardInterrupt" || errs[1].GetName() != "TimeoutError" {
		t.Errorf("errors %v", errs)
	}
}

func TestServiceKernelDied(t *testing.T) {
	t.Parallel()
	c := svc(t)
	ctx := rpcContext(t, c, "/tmp")
	rpcExecute(t, c, &pb.ExecuteRequest{ContextId: ctx.GetId(), Code: "lost = 1"})
	e := rpcExecute(t, c, &pb.ExecuteRequest{ContextId: ctx.GetId(), Code: "import os\nos._exit(1)"})
	wantReason(t, e, pb.EndReason_END_REASON_KERNEL_DIED)
	if !strings.Contains(e.end().GetMessage(), "exited while running the code (exit status 1") {
		t.Errorf("end message %q", e.end().GetMessage())
	}
	// The context works after, with fresh state, in its cwd.
	e = rpcExecute(t, c, &pb.ExecuteRequest{ContextId: ctx.GetId(), Code: "import os\nprint(os.getcwd())\n'lost' in globals()"})
	wantReason(t, e, pb.EndReason_END_REASON_OK)
	if e.stdout() != "/tmp\n" || e.results()[0].GetText() != "False" {
		t.Errorf("after the death: stdout %q, results %v", e.stdout(), e.results())
	}
}

// A client whose stream drops reattaches by id and gets what it missed,
// once each, in order; the code ran on meanwhile.
func TestServiceReattach(t *testing.T) {
	t.Parallel()
	c := svc(t)
	ctx := rpcContext(t, c, "")
	sctx, drop := context.WithCancel(testutil.Context(t, execTimeout))
	s, err := c.Execute(sctx, connect.NewRequest(&pb.ExecuteRequest{ContextId: ctx.GetId(),
		Code: "import time\nfor i in range(40):\n    print(i, flush=True)\n    time.sleep(0.02)"}))
	if err != nil {
		t.Fatal(err)
	}
	first := receive(t, s, (*pb.ExecuteResponse).GetEvent, 4)
	drop()
	s.Close()
	if first.err != nil || len(first.evs) != 4 {
		t.Fatalf("before the drop: %v", first)
	}
	first.checkSeqFrom(t, 0)
	id := first.evs[0].GetStarted().GetExecutionId()
	last := first.evs[3].GetSeq()

	a, err := c.AttachExecution(testutil.Context(t, execTimeout), connect.NewRequest(&pb.AttachExecutionRequest{ExecutionId: id, FromSeq: last + 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rest := receive(t, a, (*pb.AttachExecutionResponse).GetEvent, -1)
	if rest.err != nil {
		t.Fatal(rest)
	}
	rest.checkSeqFrom(t, last+1)
	wantReason(t, rest, pb.EndReason_END_REASON_OK)
	var want strings.Builder
	for i := range 40 {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if got := first.stdout() + rest.stdout(); got != want.String() {
		t.Errorf("stdout across the drop:\n%q\nwant\n%q", got, want.String())
	}

	// From 0, anyone gets the whole execution again, started included.
	a0, err := c.AttachExecution(testutil.Context(t, execTimeout), connect.NewRequest(&pb.AttachExecutionRequest{ExecutionId: id}))
	if err != nil {
		t.Fatal(err)
	}
	defer a0.Close()
	all := receive(t, a0, (*pb.AttachExecutionResponse).GetEvent, -1)
	if all.err != nil {
		t.Fatal(all)
	}
	checkFraming(t, all)
	if all.stdout() != want.String() || all.evs[0].GetStarted().GetExecutionId() != id || len(all.evs) != len(first.evs)+len(rest.evs) {
		t.Errorf("attach from 0: %v", all)
	}
}

// With interrupt_on_disconnect, a dropped stream interrupts the code.
func TestServiceInterruptOnDisconnect(t *testing.T) {
	t.Parallel()
	c := svc(t)
	ctx := rpcContext(t, c, "")
	sctx, drop := context.WithCancel(testutil.Context(t, execTimeout))
	s, err := c.Execute(sctx, connect.NewRequest(&pb.ExecuteRequest{ContextId: ctx.GetId(), Code: "while True: pass", InterruptOnDisconnect: true}))
	if err != nil {
		t.Fatal(err)
	}
	first := receive(t, s, (*pb.ExecuteResponse).GetEvent, 1)
	drop()
	s.Close()
	if first.err != nil {
		t.Fatal(first)
	}
	a, err := c.AttachExecution(testutil.Context(t, execTimeout), connect.NewRequest(&pb.AttachExecutionRequest{ExecutionId: first.evs[0].GetStarted().GetExecutionId()}))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	e := receive(t, a, (*pb.AttachExecutionResponse).GetEvent, -1)
	if e.err != nil {
		t.Fatal(e)
	}
	checkFraming(t, e)
	wantReason(t, e, pb.EndReason_END_REASON_INTERRUPTED)
}

// Attaching to events the execution no longer holds is data_loss, saying
// how many; from a seq still held it works.
func TestServiceAttachEvicted(t *testing.T) {
	t.Parallel()
	c := svc(t)
	ctx := rpcContext(t, c, "")
	// 1.5 MiB of output is stored in 256 KiB events; the log holds 512 KiB.
	e := rpcExecute(t, c, &pb.ExecuteRequest{ContextId: ctx.GetId(), Code: fmt.Sprintf("print('x' * %d)", 3*svcLogBytes)})
	wantReason(t, e, pb.EndReason_END_REASON_OK)
	if n := len(e.stdout()); n != 3*svcLogBytes+1 {
		t.Fatalf("%d bytes of stdout", n)
	}
	id := e.evs[0].GetStarted().GetExecutionId()
	a, err := c.AttachExecution(testutil.Context(t, execTimeout), connect.NewRequest(&pb.AttachExecutionRequest{ExecutionId: id}))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	lost := receive(t, a, (*pb.AttachExecutionResponse).GetEvent, -1)
	if connect.CodeOf(lost.err) != connect.CodeDataLoss || !strings.Contains(lost.err.Error(), "events (seq 1 to") {
		t.Fatalf("attach from 0: %v, want data_loss", lost)
	}
	t.Logf("attach from 0: %v", lost.err)
	endSeq := e.evs[len(e.evs)-1].GetSeq()
	a2, err := c.AttachExecution(testutil.Context(t, execTimeout), connect.NewRequest(&pb.AttachExecutionRequest{ExecutionId: id, FromSeq: endSeq - 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	tail := receive(t, a2, (*pb.AttachExecutionResponse).GetEvent, -1)
	if tail.err != nil || len(tail.evs) != 2 || tail.end() == nil {
		t.Fatalf("attach from %d: %v", endSeq-1, tail)
	}
	tail.checkSeqFrom(t, endSeq-1)
}

// A quiet execution's stream carries keepalives at the client's
// Keepalive-Ping-Interval; a queued one's too, before its started, after a
// queued message naming the execution it waits for.
func TestServiceKeepalive(t *testing.T) {
	t.Parallel()
	ctx := testutil.Context(t, execTimeout)
	clock := quartz.NewMock(t)
	tickers := clock.Trap().NewTicker("keepalive")
	defer tickers.Close()
	c := serveService(t, serviceEngine(), codeconnect.Options{Clock: clock})
	cx := rpcContext(t, c, "")
	flag := filepath.Join(t.TempDir(), "go")
	// A stream's call returns with its first message, which comes after
	// its keepalive ticker is made (trapped): call in the background.
	type opened struct {
		s     *connect.ServerStreamForClient[pb.ExecuteResponse]
		first *pb.ExecutionEvent
		err   error
	}
	open := func(req *connect.Request[pb.ExecuteRequest]) <-chan opened {
		ch := make(chan opened, 1)
		go func() {
			s, err := c.Execute(ctx, req)
			if err != nil {
				ch <- opened{err: err}
				return
			}
			if !s.Receive() {
				ch <- opened{s: s, err: fmt.Errorf("no first message: %w", s.Err())}
				return
			}
			ch <- opened{s: s, first: s.Msg().GetEvent()}
		}()
		return ch
	}
	busyCh := open(connect.NewRequest(&pb.ExecuteRequest{ContextId: cx.GetId(),
		Code: fmt.Sprintf("import os, time\nwhile not os.path.exists(%q):\n    time.sleep(0.01)", flag)}))
	tickers.MustWait(ctx).MustRelease(ctx)
	var o opened
	select {
	case o = <-busyCh:
	case <-ctx.Done():
		t.Fatal("the busy execution did not start")
	}
	if o.err != nil || o.first.GetStarted() == nil {
		t.Fatalf("the busy execution: %v %v", o.first, o.err)
	}
	busy, busyID := o.s, o.first.GetStarted().GetExecutionId()
	defer busy.Close()
	req := connect.NewRequest(&pb.ExecuteRequest{ContextId: cx.GetId(), Code: "'queued'"})
	req.Header().Set("Keepalive-Ping-Interval", "1")
	queuedCh := open(req)
	call := tickers.MustWait(ctx)
	if call.Duration != time.Second {
		t.Errorf("keepalive every %s, want the header's 1 s", call.Duration)
	}
	call.MustRelease(ctx)
	clock.Advance(time.Second).MustWait(ctx)
	select {
	case o = <-queuedCh:
	case <-ctx.Done():
		t.Fatal("the queued execution's stream sent nothing")
	}
	if q := o.first.GetQueued(); o.err != nil || q == nil || o.first.GetSeq() != 0 ||
		q.GetBehindExecutionId() != busyID || q.GetContextId() != cx.GetId() || q.GetExecutionId() == "" {
		t.Fatalf("queued: want a queued message behind %s first, got %v (%v)", busyID, o.first, o.err)
	}
	queued := o.s
	defer queued.Close()
	if !queued.Receive() || queued.Msg().GetEvent().GetKeepalive() == nil || queued.Msg().GetEvent().GetSeq() != 0 {
		t.Fatalf("queued: want a keepalive next, got %v (%v)", queued.Msg().GetEvent(), queued.Err())
	}
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e := receive(t, queued, (*pb.ExecuteResponse).GetEvent, -1)
	if e.err != nil || e.evs[0].GetStarted() == nil || e.evs[0].GetSeq() != 0 || e.results()[0].GetText() != "queued" {
		t.Errorf("the queued execution: %v", e)
	}
	b := receive(t, busy, (*pb.ExecuteResponse).GetEvent, -1)
	if b.err != nil || b.end().GetReason() != pb.EndReason_END_REASON_OK {
		t.Errorf("the busy execution: %v", b)
	}
}

func TestServiceContexts(t *testing.T) {
	t.Parallel()
	c := svc(t)
	dir := t.TempDir()
	resp, err := c.CreateContext(testutil.Context(t, kernelTimeout), connect.NewRequest(&pb.CreateContextRequest{Language: "Python", Cwd: dir}))
	if err != nil {
		t.Fatal(err)
	}
	cc := resp.Msg.GetContext()
	t.Cleanup(func() { removeSvcContext(cc.GetId()) })
	if cc.GetId() == "" || cc.GetLanguage() != "python" || cc.GetCwd() != dir {
		t.Errorf("CreateContext: %v", cc)
	}
	list, err := c.ListContexts(testutil.Context(t, time.Minute), connect.NewRequest(&pb.ListContextsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, x := range list.Msg.GetContexts() {
		found = found || (x.GetId() == cc.GetId() && x.GetCwd() == dir && x.GetLanguage() == "python")
	}
	if !found {
		t.Errorf("ListContexts %v lacks %v", list.Msg.GetContexts(), cc)
	}
	rpcExecute(t, c, &pb.ExecuteRequest{ContextId: cc.GetId(), Code: "state = 1"})
	rr, err := c.RestartContext(testutil.Context(t, kernelTimeout), connect.NewRequest(&pb.RestartContextRequest{ContextId: cc.GetId()}))
	if err != nil {
		t.Fatal(err)
	}
	if rr.Msg.GetContext().GetId() != cc.GetId() || rr.Msg.GetContext().GetCwd() != dir {
		t.Errorf("RestartContext: %v", rr.Msg.GetContext())
	}
	e := rpcExecute(t, c, &pb.ExecuteRequest{ContextId: cc.GetId(), Code: "import os\nprint(os.getcwd())\n'state' in globals()"})
	if e.stdout() != dir+"\n" || e.results()[0].GetText() != "False" {
		t.Errorf("after the restart: %q, %v", e.stdout(), e.results())
	}
	if _, err := c.RemoveContext(testutil.Context(t, time.Minute), connect.NewRequest(&pb.RemoveContextRequest{ContextId: cc.GetId()})); err != nil {
		t.Fatal(err)
	}
	s, err := c.Execute(testutil.Context(t, time.Minute), connect.NewRequest(&pb.ExecuteRequest{ContextId: cc.GetId(), Code: "1"}))
	if err == nil {
		e := receive(t, s, (*pb.ExecuteResponse).GetEvent, -1)
		s.Close()
		err = e.err
	}
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Execute on a removed context: %v", err)
	}
}

// rpcErr is the error of one call (a stream's: of its first receive).
func rpcErr[T any](s interface {
	eventStream
	Msg() *T
}, err error) error {
	if err != nil {
		return err
	}
	defer s.Close()
	for s.Receive() {
	}
	return s.Err()
}

func TestServiceBadInput(t *testing.T) {
	t.Parallel()
	c := svc(t)
	file := t.TempDir() + "/file"
	if err := writeFile(file); err != nil {
		t.Fatal(err)
	}
	ctx := testutil.Context(t, kernelTimeout)
	exec := func(req *pb.ExecuteRequest) func() error {
		return func() error {
			s, err := c.Execute(ctx, connect.NewRequest(req))
			return rpcErr(s, err)
		}
	}
	attach := func(id string, from uint64) func() error {
		return func() error {
			s, err := c.AttachExecution(ctx, connect.NewRequest(&pb.AttachExecutionRequest{ExecutionId: id, FromSeq: from}))
			return rpcErr(s, err)
		}
	}
	// afterEnd attaches to a finished execution, at its end seq plus extra.
	afterEnd := func(extra uint64) func() error {
		return func() error {
			s, err := c.Execute(ctx, connect.NewRequest(&pb.ExecuteRequest{Code: "1"}))
			if err != nil {
				return err
			}
			defer s.Close()
			var id string
			var last uint64
			for s.Receive() {
				if st := s.Msg().GetEvent().GetStarted(); st != nil {
					id = st.GetExecutionId()
				}
				last = s.Msg().GetEvent().GetSeq()
			}
			if s.Err() != nil {
				return s.Err()
			}
			return attach(id, last+extra)()
		}
	}
	for _, tc := range []struct {
		name string
		call func() error
		code connect.Code
		want string
	}{
		{"execute: no code", exec(&pb.ExecuteRequest{}), connect.CodeInvalidArgument, "code is empty"},
		{"execute: context and language", exec(&pb.ExecuteRequest{Code: "1", ContextId: "x", Language: "python"}), connect.CodeInvalidArgument, "at most one of context_id and language"},
		{"execute: empty env name", exec(&pb.ExecuteRequest{Code: "1", EnvVars: map[string]string{"": "x"}}), connect.CodeInvalidArgument, "empty name"},
		{"execute: negative timeout", exec(&pb.ExecuteRequest{Code: "1", Timeout: durationpb.New(-time.Second)}), connect.CodeInvalidArgument, "negative"},
		{"execute: invalid timeout", exec(&pb.ExecuteRequest{Code: "1", Timeout: &durationpb.Duration{Seconds: 1, Nanos: -1}}), connect.CodeInvalidArgument, "timeout"},
		{"execute: unknown context", exec(&pb.ExecuteRequest{Code: "1", ContextId: "nope"}), connect.CodeNotFound, `context "nope" not found`},
		{"execute: unknown language", exec(&pb.ExecuteRequest{Code: "1", Language: "cobol"}), connect.CodeInvalidArgument, `"cobol": no installed kernelspec has that name or language; available languages: python, javascript, typescript, r, bash`},
		{"execute: bash env name", exec(&pb.ExecuteRequest{Code: "1", Language: "bash", EnvVars: map[string]string{"NOT-AN-ID": "x"}}), connect.CodeInvalidArgument, "NOT-AN-ID"},
		{"attach: no id", attach("", 0), connect.CodeInvalidArgument, "execution_id is empty"},
		{"attach: unknown id", attach("nope", 0), connect.CodeNotFound, `execution "nope" not found`},
		{"attach: past the end", afterEnd(1), connect.CodeOutOfRange, "nothing follows it"},
		{"attach: far past the end", afterEnd(1000), connect.CodeOutOfRange, "nothing follows it"},
		{"interrupt: no context", func() error {
			_, err := c.Interrupt(ctx, connect.NewRequest(&pb.InterruptRequest{}))
			return err
		}, connect.CodeInvalidArgument, "context_id is empty"},
		{"interrupt: unknown context", func() error {
			_, err := c.Interrupt(ctx, connect.NewRequest(&pb.InterruptRequest{ContextId: "nope"}))
			return err
		}, connect.CodeNotFound, `context "nope" not found`},
		{"create: unknown language", func() error {
			_, err := c.CreateContext(ctx, connect.NewRequest(&pb.CreateContextRequest{Language: "cobol"}))
			return err
		}, connect.CodeInvalidArgument, `"cobol": no installed kernelspec has that name or language; available languages: python, javascript, typescript, r, bash`},
		{"create: missing cwd", func() error {
			_, err := c.CreateContext(ctx, connect.NewRequest(&pb.CreateContextRequest{Cwd: "/does/not/exist"}))
			return err
		}, connect.CodeInvalidArgument, "/does/not/exist does not exist"},
		{"create: cwd is a file", func() error {
			_, err := c.CreateContext(ctx, connect.NewRequest(&pb.CreateContextRequest{Cwd: file}))
			return err
		}, connect.CodeInvalidArgument, "is not a directory"},
		{"restart: no context", func() error {
			_, err := c.RestartContext(ctx, connect.NewRequest(&pb.RestartContextRequest{}))
			return err
		}, connect.CodeInvalidArgument, "context_id is empty"},
		{"restart: unknown context", func() error {
			_, err := c.RestartContext(ctx, connect.NewRequest(&pb.RestartContextRequest{ContextId: "nope"}))
			return err
		}, connect.CodeNotFound, `context "nope" not found`},
		{"remove: no context", func() error {
			_, err := c.RemoveContext(ctx, connect.NewRequest(&pb.RemoveContextRequest{}))
			return err
		}, connect.CodeInvalidArgument, "context_id is empty"},
		{"remove: unknown context", func() error {
			_, err := c.RemoveContext(ctx, connect.NewRequest(&pb.RemoveContextRequest{ContextId: "nope"}))
			return err
		}, connect.CodeNotFound, `context "nope" not found`},
	} {
		// Not parallel: the calls share ctx, which must not run out while
		// subtests wait for a slot.
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if connect.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v; want %v containing %q", err, tc.code, tc.want)
			}
		})
	}
}

// With -no-jupyter every procedure answers unavailable and says why.
func TestServiceDisabled(t *testing.T) {
	t.Parallel()
	c := serveService(t, nil, codeconnect.Options{})
	ctx := testutil.Context(t, time.Minute)
	calls := map[string]func() error{
		"Execute": func() error {
			s, err := c.Execute(ctx, connect.NewRequest(&pb.ExecuteRequest{Code: "1"}))
			return rpcErr(s, err)
		},
		"AttachExecution": func() error {
			s, err := c.AttachExecution(ctx, connect.NewRequest(&pb.AttachExecutionRequest{ExecutionId: "x"}))
			return rpcErr(s, err)
		},
		"Interrupt": func() error {
			_, err := c.Interrupt(ctx, connect.NewRequest(&pb.InterruptRequest{ContextId: "x"}))
			return err
		},
		"CreateContext": func() error {
			_, err := c.CreateContext(ctx, connect.NewRequest(&pb.CreateContextRequest{}))
			return err
		},
		"ListContexts": func() error {
			_, err := c.ListContexts(ctx, connect.NewRequest(&pb.ListContextsRequest{}))
			return err
		},
		"RestartContext": func() error {
			_, err := c.RestartContext(ctx, connect.NewRequest(&pb.RestartContextRequest{ContextId: "x"}))
			return err
		},
		"RemoveContext": func() error {
			_, err := c.RemoveContext(ctx, connect.NewRequest(&pb.RemoveContextRequest{ContextId: "x"}))
			return err
		},
	}
	for name, call := range calls {
		if err := call(); connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "-no-jupyter") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Before Jupyter is up, a call waits at most ReadyWait, then answers
// unavailable.
func TestServiceNotReady(t *testing.T) {
	t.Parallel()
	sup := jupyter.New(jupyter.Options{Env: shared.layout.Env(), Logger: testLogger()}) // never started
	eng := interpreter.New(interpreter.Options{Supervisor: sup, Logger: testLogger()})
	t.Cleanup(eng.Close)
	c := serveService(t, eng, codeconnect.Options{ReadyWait: 300 * time.Millisecond})
	ctx := testutil.Context(t, time.Minute)
	s, err := c.Execute(ctx, connect.NewRequest(&pb.ExecuteRequest{Code: "1"}))
	err = rpcErr(s, err)
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), phase) || !strings.Contains(err.Error(), "waited up to 300ms; retry later") {
		t.Errorf("Execute: %v", err)
	}
	t.Logf("Execute before Jupyter is up: %v", err)
	_, err = c.CreateContext(ctx, connect.NewRequest(&pb.CreateContextRequest{}))
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), phase) {
		t.Errorf("CreateContext: %v", err)
	}
}
