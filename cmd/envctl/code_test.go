package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"connectrpc.com/connect"
	"golang.org/x/term"

	"github.com/envd-dev/envd/client"
	ipb "github.com/envd-dev/envd/gen/envd/interpreter/v1"
	"github.com/envd-dev/envd/gen/envd/interpreter/v1/interpreterv1connect"
)

// The tracebacks are those envd gave for these cells (IPython 8 with
// NoColor, Deno), glued as E2B's wire glues them.
func TestFormatTraceback(t *testing.T) {
	t.Parallel()
	rule := strings.Repeat("-", 75)
	tests := []struct {
		name, in, want string
		color          bool
	}{
		{
			name: "ipython",
			in: rule + "ZeroDivisionError                         Traceback (most recent call last)Cell In [2], line 3\n" +
				"      1 def f():\n      2     return 1/0\n----> 3 f()\nCell In [2], line 2, in f()\n      1 def f():\n----> 2     return 1/0\n" +
				"ZeroDivisionError: division by zero",
			want: rule + "\nZeroDivisionError                         Traceback (most recent call last)\nCell In [2], line 3\n" +
				"      1 def f():\n      2     return 1/0\n----> 3 f()\nCell In [2], line 2, in f()\n      1 def f():\n----> 2     return 1/0\n" +
				"ZeroDivisionError: division by zero",
		},
		{
			name: "ipython chained",
			in: rule + "ZeroDivisionError    Traceback (most recent call last)Cell In [3], line 2\n----> 2     1/0\nZeroDivisionError: division by zero\n" +
				"The above exception was the direct cause of the following exception:\nValueError    Traceback (most recent call last)Cell In [3], line 4\n----> 4     raise ValueError(\"x\") from e\nValueError: x",
			want: rule + "\nZeroDivisionError    Traceback (most recent call last)\nCell In [3], line 2\n----> 2     1/0\nZeroDivisionError: division by zero\n" +
				"The above exception was the direct cause of the following exception:\nValueError    Traceback (most recent call last)\nCell In [3], line 4\n----> 4     raise ValueError(\"x\") from e\nValueError: x",
		},
		{
			name: "ipython syntax error, already in lines",
			in:   "  Cell In [4], line 1\n    def f(:\n          ^\nSyntaxError: invalid syntax\n",
			want: "  Cell In [4], line 1\n    def f(:\n          ^\nSyntaxError: invalid syntax",
		},
		{
			name: "v8",
			in:   "TypeError: Cannot read properties of null (reading 'x')    at f (<anonymous>:2:8)    at <anonymous>:4:1    at file:///a/b.ts:10:3",
			want: "TypeError: Cannot read properties of null (reading 'x')\n    at f (<anonymous>:2:8)\n    at <anonymous>:4:1\n    at file:///a/b.ts:10:3",
		},
		{
			name: "v8 lookalike in a message is left alone",
			in:   "Error: meet me    at noon",
			want: "Error: meet me    at noon",
		},
		{
			name: "colours stripped",
			in:   "\x1b[0;31m" + rule + "\x1b[0m\x1b[0;31mNameError\x1b[0m    Traceback (most recent call last)\x1b[0;32mCell In [1], line 1\x1b[0m\n\x1b[0;31mNameError\x1b[0m: name 'x' is not defined",
			want: rule + "\nNameError    Traceback (most recent call last)\nCell In [1], line 1\nNameError: name 'x' is not defined",
		},
		{
			name:  "colours kept for a terminal",
			in:    "\x1b[0;31mNameError\x1b[0m: name 'x' is not defined\n",
			want:  "\x1b[0;31mNameError\x1b[0m: name 'x' is not defined",
			color: true,
		},
		{
			name: "r",
			in:   "Error in eval(expr, envir, enclos): bad\nTraceback:\n1. stop(\"bad\")",
			want: "Error in eval(expr, envir, enclos): bad\nTraceback:\n1. stop(\"bad\")",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := formatTraceback(tt.in, tt.color); got != tt.want {
				t.Errorf("formatTraceback:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestStripANSI(t *testing.T) {
	t.Parallel()
	in := "\x1b[1;32mgreen\x1b[0m \x1b[2K\x1b]0;title\x07\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ \x1b7done"
	if got := stripANSI(in); got != "green link done" {
		t.Errorf("stripANSI = %q", got)
	}
}

// TestCtrlCReader: Ctrl-C becomes an Enter that is remembered, wherever
// it falls in what the terminal gave; the rest passes as it is.
func TestCtrlCReader(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"whole", "one byte at a time"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var in io.Reader = strings.NewReader("ab\x03cd\r\x03\x03e")
			if name != "whole" {
				in = iotest.OneByteReader(in)
			}
			c := &ctrlCReader{r: in}
			var got []string
			buf := make([]byte, 16)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					s := string(buf[:n])
					if c.takeInterrupt() {
						if s != "\r" {
							t.Fatalf("an interrupt came with %q", s)
						}
						s = "^C"
					}
					got = append(got, s)
				}
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if joined := strings.Join(got, ""); joined != "ab^Ccd\r^C^Ce" {
				t.Errorf("read %q", got)
			}
		})
	}
}

func TestHistory(t *testing.T) {
	t.Parallel()
	h := &history{}
	for _, l := range []string{"a", "", "b", "b", "  ", "c"} {
		h.Add(l)
	}
	if h.Len() != 3 || h.At(0) != "c" || h.At(2) != "a" {
		t.Errorf("history %q", h.lines)
	}
	h.dropLast()
	h.dropLast() // only the last Add's line
	if !slices.Equal(h.lines, []string{"a", "b"}) {
		t.Errorf("after dropLast: %q", h.lines)
	}
	h.Add("b") // a repeat: not added, not dropped
	h.dropLast()
	if !slices.Equal(h.lines, []string{"a", "b"}) {
		t.Errorf("after a repeat: %q", h.lines)
	}
	var _ term.History = h
}

func TestImageBytes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw  string
		b64  bool
		want string
		err  bool
	}{
		{raw: `"aGVsbG8="`, b64: true, want: "hello"},
		{raw: `"aGVs\nbG8=\n"`, b64: true, want: "hello"},
		{raw: `["aGVs", "bG8="]`, b64: true, want: "hello"},
		{raw: `"<svg/>"`, want: "<svg/>"},
		{raw: `"!!"`, b64: true, err: true},
		{raw: `{"a": 1}`, err: true},
	}
	for _, tt := range tests {
		got, err := imageBytes(json.RawMessage(tt.raw), tt.b64)
		if (err != nil) != tt.err || string(got) != tt.want {
			t.Errorf("imageBytes(%s) = %q, %v", tt.raw, got, err)
		}
	}
}

func TestCopyStats(t *testing.T) {
	t.Parallel()
	s := copyStats{dirs: 3, files: 1, links: 2, bytes: 2048}
	if got := s.String(); got != "3 directories, 1 file (2.0 KiB) and 2 symlinks" {
		t.Errorf("%q", got)
	}
	s = copyStats{dirs: 1}
	if got := s.String(); got != "1 directory and 0 files (0 B)" {
		t.Errorf("%q", got)
	}
}

func TestSnake(t *testing.T) {
	t.Parallel()
	if snake("timed out") != "timed_out" || snake("ok") != "ok" {
		t.Error("snake")
	}
}

// fakeInterpreter answers Execute as envd does: the code "exit()" with
// the end of code that exited its kernel, "boom" with a kernel that died
// under the code, anything else with an OK end.
type fakeInterpreter struct {
	interpreterv1connect.UnimplementedInterpreterServiceHandler

	mu    sync.Mutex
	codes []string // guarded by mu
}

const (
	exitedMsg = "The code exited the kernel (exit() or quit()): this context's kernel was restarted, and its " +
		"variables, imports and definitions are gone. The context is usable again."
	diedMsg = "The kernel exited while running the code (exit status 3: the code ended its process, for example " +
		"with os._exit() or Deno.exit()) and was restarted with fresh state: variables and imports are lost. " +
		"The context is usable again."
)

func (f *fakeInterpreter) Execute(_ context.Context, req *connect.Request[ipb.ExecuteRequest], stream *connect.ServerStream[ipb.ExecuteResponse]) error {
	f.mu.Lock()
	f.codes = append(f.codes, req.Msg.GetCode())
	f.mu.Unlock()
	evs := []*ipb.ExecutionEvent{{Event: &ipb.ExecutionEvent_Started{Started: &ipb.Started{ExecutionId: "x", ContextId: "c", ExecutionCount: 1}}}}
	end := &ipb.End{Reason: ipb.EndReason_END_REASON_OK}
	switch req.Msg.GetCode() {
	case "exit()\n":
		evs = append(evs, &ipb.ExecutionEvent{Event: &ipb.ExecutionEvent_Error{Error: &ipb.Error{Name: "KernelExited", Value: exitedMsg}}})
		end = &ipb.End{Reason: ipb.EndReason_END_REASON_KERNEL_DIED, Message: exitedMsg}
	case "boom\n":
		evs = append(evs, &ipb.ExecutionEvent{Event: &ipb.ExecutionEvent_Error{Error: &ipb.Error{Name: "ContextRestarting", Value: diedMsg}}})
		end = &ipb.End{Reason: ipb.EndReason_END_REASON_KERNEL_DIED, Message: diedMsg}
	}
	evs = append(evs, &ipb.ExecutionEvent{Event: &ipb.ExecutionEvent_End{End: end}})
	for i, ev := range evs {
		ev.Seq = uint64(i)
		if err := stream.Send(&ipb.ExecuteResponse{Event: ev}); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeInterpreter) ran() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.codes)
}

// replOn runs the exec-code prompt over input against f, and returns what
// it wrote on stderr.
func replOn(t *testing.T, f *fakeInterpreter, input string) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(interpreterv1connect.NewInterpreterServiceHandler(f))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := client.New(client.Options{Addr: srv.URL, HTTP1: true})
	t.Cleanup(func() { _ = c.Close() })
	var stdout, stderr bytes.Buffer
	x := &executor{e: &env{c: c, stdin: strings.NewReader(input), stdout: &stdout, stderr: &stderr}}
	if err := x.prompt(context.Background(), newPlainLines(strings.NewReader(input), io.Discard)); err != nil {
		t.Fatalf("prompt: %v; stderr %q", err, stderr.String())
	}
	return stderr.String()
}

// TestPromptKernelExited: code that exits its kernel ends the prompt's
// session, saying that the context's state is gone (the message once);
// a kernel that died otherwise leaves it going, on a fresh kernel, said
// so too.
func TestPromptKernelExited(t *testing.T) {
	t.Parallel()
	t.Run("exit", func(t *testing.T) {
		t.Parallel()
		f := &fakeInterpreter{}
		out := replOn(t, f, "x = 1\nexit()\nprint(x)\n")
		if got := f.ran(); !slices.Equal(got, []string{"x = 1\n", "exit()\n"}) {
			t.Errorf("ran %q: the session went on after the kernel exited", got)
		}
		if strings.Count(out, "exited the kernel (exit() or quit())") != 1 || !strings.Contains(out, "session ends") ||
			!strings.Contains(out, "state (variables, imports, definitions) is gone") {
			t.Errorf("stderr %q", out)
		}
	})
	t.Run("died", func(t *testing.T) {
		t.Parallel()
		f := &fakeInterpreter{}
		out := replOn(t, f, "x = 1\nboom\nprint(x)\n")
		if got := f.ran(); !slices.Equal(got, []string{"x = 1\n", "boom\n", "print(x)\n"}) {
			t.Errorf("ran %q", got)
		}
		if strings.Count(out, "exit status 3") != 1 || !strings.Contains(out, "the context's state is gone") ||
			!strings.Contains(out, "the next line runs on a fresh kernel") {
			t.Errorf("stderr %q", out)
		}
	})
}
