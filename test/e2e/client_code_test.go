package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/envd-dev/envd/client"
	ipb "github.com/envd-dev/envd/gen/envd/interpreter/v1"
	"github.com/envd-dev/envd/gen/envd/interpreter/v1/interpreterv1connect"
)

// FAKE. fakeInterpreter is an in-test stand-in for envd's native
// code-execution service (envd.interpreter.v1), which envd does not serve
// yet: it tests the client's and envctl's side of the protocol (contexts,
// the event stream, reattach by seq, interrupt, typed end reasons, the
// server-side timeout) until these tests can run against the real service.
//
// Its "language" is tiny; one statement per line:
//
//	x = 5          set a variable (state survives across executions)
//	x              a result: the variable's value (the last line's is main)
//	print x        the value on stdout; print "text" prints text
//	warn text      text on stderr
//	sleep 2s       sleep (interruptible)
//	raise Name: v  an error, ending the execution with reason ERROR
type fakeInterpreter struct {
	interpreterv1connect.UnimplementedInterpreterServiceHandler

	mu       sync.Mutex
	nextID   int
	contexts map[string]*fakeContext // guarded by mu
	execs    map[string]*fakeExec    // guarded by mu
	// dropAfter, when positive, makes the next Execute stream break
	// (unavailable) after that many events, as a dropped connection would.
	dropAfter int // guarded by mu
	attaches  int // guarded by mu: AttachExecution calls
}

type fakeContext struct {
	id, lang, cwd string
	vars          map[string]string
	run           sync.Mutex // one execution at a time
	count         int64
	interrupt     chan struct{} // of the running execution
}

type fakeExec struct {
	mu     sync.Mutex
	events []*ipb.ExecutionEvent // guarded by mu
	done   bool                  // guarded by mu
	notify chan struct{}         // closed and replaced on each event
}

func newFakeInterpreter() *fakeInterpreter {
	return &fakeInterpreter{contexts: map[string]*fakeContext{}, execs: map[string]*fakeExec{}}
}

// serveFake serves f on a free port (HTTP/1.1 and h2c) until the test ends.
func serveFake(t *testing.T, f *fakeInterpreter) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(interpreterv1connect.NewInterpreterServiceHandler(f))
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: &p}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

func (f *fakeInterpreter) id(prefix string) string {
	f.nextID++
	return prefix + strconv.Itoa(f.nextID)
}

func (f *fakeInterpreter) newContext(lang, cwd string) *fakeContext {
	if lang == "" {
		lang = "python"
	}
	if cwd == "" {
		cwd = "/home/user"
	}
	c := &fakeContext{id: f.id("ctx-"), lang: lang, cwd: cwd, vars: map[string]string{}}
	f.contexts[c.id] = c
	return c
}

func (c *fakeContext) proto() *ipb.Context {
	return &ipb.Context{Id: c.id, Language: c.lang, Cwd: c.cwd}
}

func (f *fakeInterpreter) CreateContext(_ context.Context, req *connect.Request[ipb.CreateContextRequest]) (*connect.Response[ipb.CreateContextResponse], error) {
	switch req.Msg.GetLanguage() {
	case "", "python", "javascript", "r":
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("unsupported language %q", req.Msg.GetLanguage()))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return connect.NewResponse(&ipb.CreateContextResponse{Context: f.newContext(req.Msg.GetLanguage(), req.Msg.GetCwd()).proto()}), nil
}

func (f *fakeInterpreter) ListContexts(context.Context, *connect.Request[ipb.ListContextsRequest]) (*connect.Response[ipb.ListContextsResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &ipb.ListContextsResponse{}
	for i := 1; i <= f.nextID; i++ {
		if c, ok := f.contexts["ctx-"+strconv.Itoa(i)]; ok {
			out.Contexts = append(out.Contexts, c.proto())
		}
	}
	return connect.NewResponse(out), nil
}

func (f *fakeInterpreter) context(id string) (*fakeContext, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.contexts[id]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("context %q not found", id))
	}
	return c, nil
}

func (f *fakeInterpreter) RestartContext(_ context.Context, req *connect.Request[ipb.RestartContextRequest]) (*connect.Response[ipb.RestartContextResponse], error) {
	c, err := f.context(req.Msg.GetContextId())
	if err != nil {
		return nil, err
	}
	c.run.Lock()
	c.vars = map[string]string{}
	c.run.Unlock()
	return connect.NewResponse(&ipb.RestartContextResponse{Context: c.proto()}), nil
}

func (f *fakeInterpreter) RemoveContext(_ context.Context, req *connect.Request[ipb.RemoveContextRequest]) (*connect.Response[ipb.RemoveContextResponse], error) {
	if _, err := f.context(req.Msg.GetContextId()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	delete(f.contexts, req.Msg.GetContextId())
	f.mu.Unlock()
	return connect.NewResponse(&ipb.RemoveContextResponse{}), nil
}

func (f *fakeInterpreter) Interrupt(_ context.Context, req *connect.Request[ipb.InterruptRequest]) (*connect.Response[ipb.InterruptResponse], error) {
	c, err := f.context(req.Msg.GetContextId())
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	if c.interrupt != nil {
		close(c.interrupt)
		c.interrupt = nil
	}
	f.mu.Unlock()
	return connect.NewResponse(&ipb.InterruptResponse{}), nil
}

func (x *fakeExec) add(ev *ipb.ExecutionEvent) {
	x.mu.Lock()
	defer x.mu.Unlock()
	ev.Seq = uint64(len(x.events))
	x.events = append(x.events, ev)
	if ev.GetEnd() != nil {
		x.done = true
	}
	close(x.notify)
	x.notify = make(chan struct{})
}

func (f *fakeInterpreter) Execute(ctx context.Context, req *connect.Request[ipb.ExecuteRequest], stream *connect.ServerStream[ipb.ExecuteResponse]) error {
	m := req.Msg
	if m.GetContextId() != "" && m.GetLanguage() != "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("give context_id or language, not both"))
	}
	var c *fakeContext
	if m.GetContextId() != "" {
		var err error
		if c, err = f.context(m.GetContextId()); err != nil {
			return err
		}
	} else {
		// The language's default context, created on first use.
		lang := m.GetLanguage()
		if lang == "" {
			lang = "python"
		}
		f.mu.Lock()
		c = f.contexts["default-"+lang]
		if c == nil {
			c = &fakeContext{id: "default-" + lang, lang: lang, cwd: "/home/user", vars: map[string]string{}}
			f.contexts[c.id] = c
		}
		f.mu.Unlock()
	}
	f.mu.Lock()
	id := f.id("exec-")
	x := &fakeExec{notify: make(chan struct{})}
	f.execs[id] = x
	drop := f.dropAfter
	f.dropAfter = 0
	f.mu.Unlock()
	go f.run(c, x, id, m)
	sent := 0
	return follow(ctx, x, 0, func(ev *ipb.ExecutionEvent) error {
		if drop > 0 && sent == drop {
			return connect.NewError(connect.CodeUnavailable, errors.New("connection dropped (fake)"))
		}
		sent++
		return stream.Send(&ipb.ExecuteResponse{Event: ev})
	})
}

func (f *fakeInterpreter) AttachExecution(ctx context.Context, req *connect.Request[ipb.AttachExecutionRequest], stream *connect.ServerStream[ipb.AttachExecutionResponse]) error {
	f.mu.Lock()
	x, ok := f.execs[req.Msg.GetExecutionId()]
	f.attaches++
	f.mu.Unlock()
	if !ok {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("execution %q not found", req.Msg.GetExecutionId()))
	}
	return follow(ctx, x, req.Msg.GetFromSeq(), func(ev *ipb.ExecutionEvent) error {
		return stream.Send(&ipb.AttachExecutionResponse{Event: ev})
	})
}

// follow sends x's events from seq on, until the end.
func follow(ctx context.Context, x *fakeExec, seq uint64, send func(*ipb.ExecutionEvent) error) error {
	for {
		x.mu.Lock()
		evs, done, notify := x.events[min(int(seq), len(x.events)):], x.done, x.notify
		x.mu.Unlock()
		for _, ev := range evs {
			if err := send(ev); err != nil {
				return err
			}
			seq++
		}
		if done && len(evs) == 0 {
			return nil
		}
		select {
		case <-notify:
		case <-time.After(200 * time.Millisecond):
			if err := send(&ipb.ExecutionEvent{Event: &ipb.ExecutionEvent_Keepalive{Keepalive: &ipb.Keepalive{}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// run executes m on c, recording events in x.
func (f *fakeInterpreter) run(c *fakeContext, x *fakeExec, id string, m *ipb.ExecuteRequest) {
	c.run.Lock()
	defer c.run.Unlock()
	c.count++
	interrupt := make(chan struct{})
	f.mu.Lock()
	c.interrupt = interrupt
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		if c.interrupt == interrupt {
			c.interrupt = nil
		}
		f.mu.Unlock()
	}()
	var timeout <-chan time.Time
	if d := m.GetTimeout().AsDuration(); d > 0 {
		timeout = time.After(d)
	}
	x.add(&ipb.ExecutionEvent{Event: &ipb.ExecutionEvent_Started{Started: &ipb.Started{ExecutionId: id, ContextId: c.id, ExecutionCount: c.count}}})
	end := func(r ipb.EndReason, msg string) {
		x.add(&ipb.ExecutionEvent{Event: &ipb.ExecutionEvent_End{End: &ipb.End{Reason: r, Message: msg}}})
	}
	out := func(text string, stderr bool) {
		o := &ipb.Output{Text: text, Timestamp: timestamppb.Now()}
		if stderr {
			x.add(&ipb.ExecutionEvent{Event: &ipb.ExecutionEvent_Stderr{Stderr: o}})
		} else {
			x.add(&ipb.ExecutionEvent{Event: &ipb.ExecutionEvent_Stdout{Stdout: o}})
		}
	}
	value := func(expr string) (string, bool) {
		if v, ok := m.GetEnvVars()[strings.TrimPrefix(expr, "$")]; ok && strings.HasPrefix(expr, "$") {
			return v, true
		}
		if strings.HasPrefix(expr, `"`) && strings.HasSuffix(expr, `"`) && len(expr) >= 2 {
			return expr[1 : len(expr)-1], true
		}
		v, ok := c.vars[expr]
		return v, ok
	}
	lines := strings.Split(strings.TrimSpace(m.GetCode()), "\n")
	for i, line := range lines {
		line = strings.TrimSpace(line)
		fail := func(name, v string) {
			x.add(&ipb.ExecutionEvent{Event: &ipb.ExecutionEvent_Error{Error: &ipb.Error{Name: name, Value: v, Traceback: fmt.Sprintf("Traceback (line %d):\n%s: %s", i+1, name, v)}}})
			end(ipb.EndReason_END_REASON_ERROR, "")
		}
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.Contains(line, " = "):
			k, v, _ := strings.Cut(line, " = ")
			if val, ok := value(v); ok {
				v = val
			}
			c.vars[k] = v
		case strings.HasPrefix(line, "print "):
			v, ok := value(strings.TrimPrefix(line, "print "))
			if !ok {
				fail("NameError", fmt.Sprintf("name '%s' is not defined", strings.TrimPrefix(line, "print ")))
				return
			}
			out(v+"\n", false)
		case strings.HasPrefix(line, "warn "):
			out(strings.TrimPrefix(line, "warn ")+"\n", true)
		case strings.HasPrefix(line, "sleep "):
			d, err := time.ParseDuration(strings.TrimPrefix(line, "sleep "))
			if err != nil {
				fail("ValueError", err.Error())
				return
			}
			select {
			case <-time.After(d):
			case <-interrupt:
				fail("KeyboardInterrupt", "")
				x.mu.Lock()
				x.events = x.events[:len(x.events)-1] // the error stays; the end is INTERRUPTED
				x.done = false
				x.mu.Unlock()
				end(ipb.EndReason_END_REASON_INTERRUPTED, "interrupted")
				return
			case <-timeout:
				end(ipb.EndReason_END_REASON_TIMED_OUT, fmt.Sprintf("ran longer than its timeout of %v", m.GetTimeout().AsDuration()))
				return
			}
		case strings.HasPrefix(line, "raise "):
			name, v, _ := strings.Cut(strings.TrimPrefix(line, "raise "), ": ")
			fail(name, v)
			return
		default:
			v, ok := value(line)
			if !ok {
				fail("NameError", fmt.Sprintf("name '%s' is not defined", line))
				return
			}
			x.add(&ipb.ExecutionEvent{Event: &ipb.ExecutionEvent_Result{Result: &ipb.Result{
				IsMainResult: i == len(lines)-1, Text: v,
				Data: map[string][]byte{"text/plain": []byte(strconv.Quote(v))},
			}}})
		}
	}
	end(ipb.EndReason_END_REASON_OK, "")
}

// TestClientCode drives the code API of the client against the fake (see
// fakeInterpreter).
func TestClientCode(t *testing.T) {
	t.Parallel()
	f := newFakeInterpreter()
	c := client.New(client.Options{Addr: serveFake(t, f)})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()

	cc, err := c.CreateContext(ctx, client.ContextOptions{Language: "python", Dir: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	if cc.ID == "" || cc.Language != "python" || cc.Dir != "/tmp" {
		t.Errorf("CreateContext: %+v", cc)
	}
	if _, err := c.CreateContext(ctx, client.ContextOptions{Language: "cobol"}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("CreateContext cobol: %v", err)
	}

	t.Run("state and callbacks", func(t *testing.T) {
		run, err := c.Execute(ctx, "x = 41\nprint x", client.ExecOptions{ContextID: cc.ID})
		if err != nil {
			t.Fatal(err)
		}
		if run.ID() == "" || run.ContextID() != cc.ID {
			t.Errorf("Execute: id %q, context %q", run.ID(), run.ContextID())
		}
		res, err := run.Wait()
		if err != nil || res.Reason != client.EndOK || res.Stdout != "41\n" || res.Count != 1 {
			t.Fatalf("first: %+v, %v", res, err)
		}
		var stdout, stderr []string
		var results []client.Result
		run, err = c.Execute(ctx, "warn careful\nprint x\nx", client.ExecOptions{
			ContextID: cc.ID,
			OnStdout:  func(o client.Output) { stdout = append(stdout, o.Text) },
			OnStderr:  func(o client.Output) { stderr = append(stderr, o.Text) },
			OnResult:  func(r client.Result) { results = append(results, r) },
		})
		if err != nil {
			t.Fatal(err)
		}
		res, err = run.Wait()
		if err != nil || res.Reason != client.EndOK || res.Count != 2 {
			t.Fatalf("second: %+v, %v", res, err)
		}
		if strings.Join(stdout, "") != "41\n" || strings.Join(stderr, "") != "careful\n" || len(results) != 1 || !results[0].Main || results[0].Text != "41" || string(results[0].Data["text/plain"]) != `"41"` {
			t.Errorf("callbacks: stdout %q, stderr %q, results %+v", stdout, stderr, results)
		}
		if len(res.Results) != 1 || res.Stderr != "careful\n" {
			t.Errorf("outcome: %+v", res)
		}
	})
	t.Run("iterator and env", func(t *testing.T) {
		run, err := c.Execute(ctx, "print $GREETING\nprint \"done\"", client.ExecOptions{Env: map[string]string{"GREETING": "hi"}})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for ev, err := range run.Events() {
			if err != nil {
				t.Fatal(err)
			}
			if ev.Stdout != nil {
				got = append(got, ev.Stdout.Text)
			}
		}
		res, err := run.Wait()
		if strings.Join(got, "") != "hi\ndone\n" || err != nil || res.Reason != client.EndOK || res.ContextID != "default-python" {
			t.Errorf("events %q, outcome %+v, %v", got, res, err)
		}
	})
	t.Run("error", func(t *testing.T) {
		var cerr client.CodeError
		run, err := c.Execute(ctx, "print x\nraise ValueError: bad value\nprint x", client.ExecOptions{ContextID: cc.ID, OnError: func(e client.CodeError) { cerr = e }})
		if err != nil {
			t.Fatal(err)
		}
		res, err := run.Wait()
		if err != nil || res.Reason != client.EndError || res.Error == nil || res.Error.Name != "ValueError" || cerr.Value != "bad value" || res.Stdout != "41\n" {
			t.Errorf("%+v, %v", res, err)
		}
		if res.String() != "error: ValueError: bad value" {
			t.Errorf("String() = %q", res.String())
		}
	})
	t.Run("timeout", func(t *testing.T) {
		run, err := c.Execute(ctx, "sleep 10s", client.ExecOptions{ContextID: cc.ID, Timeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		res, err := run.Wait()
		if err != nil || res.Reason != client.EndTimedOut || !strings.Contains(res.Message, "timeout") {
			t.Errorf("%+v, %v", res, err)
		}
	})
	t.Run("interrupt", func(t *testing.T) {
		run, err := c.Execute(ctx, "print \"going\"\nsleep 10s", client.ExecOptions{ContextID: cc.ID})
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(200*time.Millisecond, func() { c.Interrupt(context.Background(), cc.ID) })
		res, err := run.Wait()
		if err != nil || res.Reason != client.EndInterrupted || res.Error == nil || res.Error.Name != "KeyboardInterrupt" {
			t.Errorf("%+v, %v", res, err)
		}
		if err := c.Interrupt(ctx, "no-such-context"); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("Interrupt of a missing context: %v", err)
		}
	})
	t.Run("reattach after a dropped stream", func(t *testing.T) {
		f.mu.Lock()
		f.dropAfter = 2 // started and the first print
		attaches := f.attaches
		f.mu.Unlock()
		run, err := c.Execute(ctx, "print \"one\"\nsleep 300ms\nprint \"two\"\nprint \"three\"", client.ExecOptions{ContextID: cc.ID})
		if err != nil {
			t.Fatal(err)
		}
		res, err := run.Wait()
		if err != nil || res.Reason != client.EndOK || res.Stdout != "one\ntwo\nthree\n" {
			t.Errorf("after the drop: %+v, %v; want every line once", res, err)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.attaches != attaches+1 {
			t.Errorf("%d reattaches, want 1", f.attaches-attaches)
		}
	})
	t.Run("attach", func(t *testing.T) {
		run, err := c.Execute(ctx, "print \"a\"\nsleep 300ms\nprint \"b\"", client.ExecOptions{ContextID: cc.ID})
		if err != nil {
			t.Fatal(err)
		}
		run.Close() // another client follows it
		other := client.New(client.Options{Addr: serveFakeAddr(c)})
		defer other.Close()
		for _, from := range []uint64{0, 2} {
			att, err := other.Attach(ctx, run.ID(), from, client.ExecOptions{})
			if err != nil {
				t.Fatal(err)
			}
			res, err := att.Wait()
			want := "a\nb\n"
			if from == 2 {
				want = "b\n"
			}
			if err != nil || res.Reason != client.EndOK || res.Stdout != want {
				t.Errorf("Attach from %d: %+v, %v; want %q", from, res, err, want)
			}
		}
		// The error of an Attach comes with its first event.
		att, err := other.Attach(ctx, "no-such-execution", 0, client.ExecOptions{})
		if err == nil {
			_, err = att.Wait()
		}
		if !errors.Is(err, client.ErrNotFound) {
			t.Errorf("Attach to a missing execution: %v, want not found", err)
		}
	})
	t.Run("contexts", func(t *testing.T) {
		list, err := c.ListContexts(ctx)
		if err != nil || len(list) != 1 || list[0].ID != cc.ID {
			t.Errorf("ListContexts: %+v, %v", list, err)
		}
		if _, err := c.RestartContext(ctx, cc.ID); err != nil {
			t.Fatal(err)
		}
		run, err := c.Execute(ctx, "print x", client.ExecOptions{ContextID: cc.ID})
		if err != nil {
			t.Fatal(err)
		}
		if res, err := run.Wait(); err != nil || res.Reason != client.EndError || res.Error.Name != "NameError" {
			t.Errorf("after RestartContext the state is gone: %+v, %v", res, err)
		}
		if err := c.RemoveContext(ctx, cc.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Execute(ctx, "x", client.ExecOptions{ContextID: cc.ID}); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("Execute on a removed context: %v, want not found", err)
		}
		if err := c.RemoveContext(ctx, cc.ID); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("RemoveContext twice: %v, want not found", err)
		}
	})
}

// serveFakeAddr is the address c talks to (its target, as a URL).
func serveFakeAddr(c *client.Client) string {
	return "http://" + strings.TrimPrefix(c.Target(), "tcp ")
}

// TestClientCodeAgainstEnvd: envd does not serve the native code service
// yet; the client says so with a clear error rather than hanging.
func TestClientCodeAgainstEnvd(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{})
	c := client.New(client.Options{Addr: e.url})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	_, err := c.Execute(ctx, "1", client.ExecOptions{})
	if err == nil {
		t.Skip("envd serves the code service now: switch TestClientCode to it")
	}
	var ce *client.Error
	if !errors.As(err, &ce) || strings.Contains(err.Error(), "\n") {
		t.Errorf("Execute: %#v, want a one-line *client.Error", err)
	}
	t.Logf("Execute against envd: %v", err)
}
