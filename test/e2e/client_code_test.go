package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envd-dev/envd/client"
)

// codeTimeout bounds a test's code calls: the first waits for envd's
// Jupyter server and default kernel to come up.
const codeTimeout = 3 * time.Minute

// dropProxy forwards TCP connections to envd, and cuts them all on demand:
// a connection that breaks mid-stream, for real, without a fake server.
type dropProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu       sync.Mutex
	conns    map[net.Conn]struct{} // guarded by mu: both ends of each pair
	accepted int                   // guarded by mu
}

func newDropProxy(t *testing.T, target string) *dropProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.drop()
		p.wg.Wait()
	})
	return p
}

func (p *dropProxy) addr() string { return "http://" + p.ln.Addr().String() }

func (p *dropProxy) serve() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.accepted++
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			io.Copy(dst, src)
			dst.Close()
			src.Close()
		}
		go pipe(out, in)
		go pipe(in, out)
	}
}

// drop closes every connection open now.
func (p *dropProxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *dropProxy) connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// TestClientCode drives the client's code API against a real envd running
// Jupyter: contexts, state, callbacks and the iterator, env vars, errors,
// the server-side timeout, interrupts, reattaching after a connection
// that really broke, and attaching from another client.
func TestClientCode(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{jupyter: true})
	c := client.New(client.Options{Addr: e.url})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), codeTimeout)
	defer cancel()

	cc, err := c.CreateContext(ctx, client.ContextOptions{Language: "python", Dir: "/tmp"})
	if err != nil {
		t.Fatalf("CreateContext: %v\n%s", err, e.stderr)
	}
	if cc.ID == "" || cc.Language != "python" || cc.Dir != "/tmp" {
		t.Errorf("CreateContext: %+v", cc)
	}
	if _, err := c.CreateContext(ctx, client.ContextOptions{Language: "cobol"}); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "available languages: python") {
		t.Errorf("CreateContext cobol: %v", err)
	}
	if _, err := c.CreateContext(ctx, client.ContextOptions{Dir: "/does/not/exist"}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("CreateContext in a missing directory: %v", err)
	}

	t.Run("state and callbacks", func(t *testing.T) {
		run, err := c.Execute(ctx, "x = 41\nprint(x)", client.ExecOptions{ContextID: cc.ID})
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
		run, err = c.Execute(ctx, "import sys\nprint('careful', file=sys.stderr)\nprint(x)\nstr(x)", client.ExecOptions{
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
		if strings.Join(stdout, "") != "41\n" || strings.Join(stderr, "") != "careful\n" || len(results) != 1 ||
			!results[0].Main || results[0].Text != "41" || string(results[0].Data["text/plain"]) != `"'41'"` {
			t.Errorf("callbacks: stdout %q, stderr %q, results %+v", stdout, stderr, results)
		}
		if len(res.Results) != 1 || res.Stderr != "careful\n" {
			t.Errorf("outcome: %+v", res)
		}
	})
	t.Run("iterator and env", func(t *testing.T) {
		run, err := c.Execute(ctx, "import os\nprint(os.environ['GREETING'])\nprint('done')", client.ExecOptions{Env: map[string]string{"GREETING": "hi"}})
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
		if strings.Join(got, "") != "hi\ndone\n" || err != nil || res.Reason != client.EndOK || res.ContextID == "" || res.ContextID == cc.ID {
			t.Errorf("events %q, outcome %+v, %v; want the default context", got, res, err)
		}
	})
	t.Run("error", func(t *testing.T) {
		var cerr client.CodeError
		run, err := c.Execute(ctx, "print(x)\nraise ValueError('bad value')\nprint(x)", client.ExecOptions{ContextID: cc.ID, OnError: func(e client.CodeError) { cerr = e }})
		if err != nil {
			t.Fatal(err)
		}
		res, err := run.Wait()
		if err != nil || res.Reason != client.EndError || res.Error == nil || res.Error.Name != "ValueError" || cerr.Value != "bad value" || res.Stdout != "41\n" ||
			!strings.Contains(res.Error.Traceback, "raise ValueError") {
			t.Errorf("%+v, %v", res, err)
		}
		if res.String() != "error: ValueError: bad value" {
			t.Errorf("String() = %q", res.String())
		}
	})
	t.Run("timeout", func(t *testing.T) {
		run, err := c.Execute(ctx, "import time\ntime.sleep(30)", client.ExecOptions{ContextID: cc.ID, Timeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		res, err := run.Wait()
		if err != nil || res.Reason != client.EndTimedOut || !strings.Contains(res.Message, "timed out after 500ms") {
			t.Errorf("%+v, %v", res, err)
		}
	})
	t.Run("interrupt", func(t *testing.T) {
		var once sync.Once
		run, err := c.Execute(ctx, "print('going', flush=True)\nimport time\ntime.sleep(30)", client.ExecOptions{
			ContextID: cc.ID,
			OnStdout: func(client.Output) {
				once.Do(func() {
					if err := c.Interrupt(ctx, cc.ID); err != nil {
						t.Errorf("Interrupt: %v", err)
					}
				})
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		res, err := run.Wait()
		if err != nil || res.Reason != client.EndInterrupted || res.Error == nil || res.Error.Name != "KeyboardInterrupt" || res.Stdout != "going\n" {
			t.Errorf("%+v, %v", res, err)
		}
		if err := c.Interrupt(ctx, "no-such-context"); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("Interrupt of a missing context: %v", err)
		}
	})
	t.Run("reattach after a dropped connection", func(t *testing.T) {
		p := newDropProxy(t, strings.TrimPrefix(e.url, "http://"))
		pc := client.New(client.Options{Addr: p.addr()})
		defer pc.Close()
		var once sync.Once
		run, err := pc.Execute(ctx, "import time\nfor i in range(20):\n    print(i, flush=True)\n    time.sleep(0.05)", client.ExecOptions{
			ContextID: cc.ID,
			// The connection breaks once the first line came.
			OnStdout: func(client.Output) { once.Do(p.drop) },
		})
		if err != nil {
			t.Fatal(err)
		}
		res, err := run.Wait()
		var want strings.Builder
		for i := range 20 {
			fmt.Fprintf(&want, "%d\n", i)
		}
		if err != nil || res.Reason != client.EndOK || res.Stdout != want.String() {
			t.Errorf("after the drop: %+v, %v; want every line once, in order", res, err)
		}
		if n := p.connections(); n != 2 {
			t.Errorf("%d connections, want 2: the first, and the reattach's", n)
		}
	})
	t.Run("attach", func(t *testing.T) {
		run, err := c.Execute(ctx, "import time\nprint('a', flush=True)\ntime.sleep(0.3)\nprint('b')", client.ExecOptions{ContextID: cc.ID})
		if err != nil {
			t.Fatal(err)
		}
		run.Close() // another client follows it; the code runs on
		other := client.New(client.Options{Addr: e.url})
		defer other.Close()
		// All of it, and the seq of the event that brought "b": the kernel
		// may cut its output into more or fewer messages than prints.
		att, err := other.Attach(ctx, run.ID(), 0, client.ExecOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var all, fromB strings.Builder
		bSeq, found := uint64(0), false
		for ev, err := range att.Events() {
			if err != nil {
				t.Fatalf("Attach from 0: %v", err)
			}
			if ev.Stdout != nil {
				if !found && strings.Contains(ev.Stdout.Text, "b") {
					bSeq, found = ev.Seq, true
				}
				all.WriteString(ev.Stdout.Text)
				if found {
					fromB.WriteString(ev.Stdout.Text)
				}
			}
		}
		if all.String() != "a\nb\n" || !found {
			t.Fatalf("Attach from 0: stdout %q; want \"a\\nb\\n\"", all.String())
		}
		att, err = other.Attach(ctx, run.ID(), bSeq, client.ExecOptions{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := att.Wait()
		if err != nil || res.Reason != client.EndOK || res.Stdout != fromB.String() {
			t.Errorf("Attach from %d: %+v, %v; want %q", bSeq, res, err, fromB.String())
		}
		// The error of an Attach comes with its first event.
		att, err = other.Attach(ctx, "no-such-execution", 0, client.ExecOptions{})
		if err == nil {
			_, err = att.Wait()
		}
		if !errors.Is(err, client.ErrNotFound) {
			t.Errorf("Attach to a missing execution: %v, want not found", err)
		}
	})
	t.Run("contexts", func(t *testing.T) {
		list, err := c.ListContexts(ctx)
		found, js := false, false
		for _, x := range list {
			found = found || x == *cc
			js = js || x.Language == "javascript"
		}
		if err != nil || !found || !js || len(list) != 3 {
			t.Errorf("ListContexts: %+v, %v; want the python and javascript defaults and %+v", list, err, cc)
		}
		if _, err := c.RestartContext(ctx, cc.ID); err != nil {
			t.Fatal(err)
		}
		run, err := c.Execute(ctx, "print(x)", client.ExecOptions{ContextID: cc.ID})
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

// Without Jupyter, every code call fails at once with a one-line error
// that says why.
func TestClientCodeWithoutJupyter(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{})
	c := client.New(client.Options{Addr: e.url})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	_, err := c.Execute(ctx, "1", client.ExecOptions{})
	if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "-no-jupyter") || strings.Contains(err.Error(), "\n") {
		t.Errorf("Execute: %v, want a one-line unavailable error naming -no-jupyter", err)
	}
	if _, err := c.ListContexts(ctx); !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("ListContexts: %v", err)
	}
}
