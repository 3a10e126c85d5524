package codehttp

import (
	"encoding/json"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/envd-dev/envd/internal/interpreter"
)

func TestAppendString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"plain", `"plain"`},
		{"q\"b\\s/", `"q\"b\\s/"`},
		{"\n\r\t\b\f\x00\x1f\x7f", `"\n\r\t\b\f\u0000\u001f` + "\x7f" + `"`},
		{"é漢😀", `"\u00e9\u6f22\ud83d\ude00"`},
		{"\u2028\ufeff", `"\u2028\ufeff"`},
		{"bad\xffbyte", `"bad\ufffdbyte"`},
		{"<&>", `"<&>"`},
	} {
		got := string(appendString(nil, tc.in))
		if got != tc.want {
			t.Errorf("appendString(%q) = %s, want %s", tc.in, got, tc.want)
		}
		if utf8.ValidString(tc.in) {
			var back string
			if err := json.Unmarshal([]byte(got), &back); err != nil || back != tc.in {
				t.Errorf("round trip of %q: %q, %v", tc.in, back, err)
			}
		}
	}
}

func TestAppendRaw(t *testing.T) {
	t.Parallel()
	raw := []byte("{\"a\": [0.0, null, \"é😀\"],\n \"b\": 1e3}")
	got := string(appendRaw(nil, raw))
	want := `{"a": [0.0, null, "\u00e9\ud83d\ude00"], "b": 1e3}`
	if got != want {
		t.Errorf("appendRaw = %s, want %s", got, want)
	}
}

// The engine's started event is the E2B number_of_executions line when it
// carries the kernel's count, and no line when made up; a count that comes
// later is that line.
func TestAppendStarted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ev   interpreter.Event
		want string
	}{
		{interpreter.Event{Kind: interpreter.EventStarted, Started: &interpreter.Started{ExecutionID: "x", ExecutionCount: 3, Counted: true}},
			`{"type": "number_of_executions", "execution_count": 3}` + "\n"},
		{interpreter.Event{Kind: interpreter.EventStarted, Started: &interpreter.Started{ExecutionID: "x"}}, ""},
		{interpreter.Event{Seq: 2, Kind: interpreter.EventExecutionCount, ExecutionCount: 4},
			`{"type": "number_of_executions", "execution_count": 4}` + "\n"},
		{interpreter.Event{Kind: interpreter.EventEnd, End: &interpreter.End{Reason: interpreter.EndOK}}, ""},
		{interpreter.Event{Kind: interpreter.EventNotice, Notice: &interpreter.Notice{Kind: interpreter.NoticeKernelReplaced,
			Text: "state gone é", At: time.Date(2026, 12, 1, 10, 0, 0, 5000, time.UTC)}},
			`{"type": "stderr", "text": "[envd: state gone \u00e9]\n", "timestamp": "2026-12-01T10:00:00.000005+00:00"}` + "\n"},
	} {
		if got := string(appendEvent(nil, tc.ev)); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.ev.Kind, got, tc.want)
		}
	}
}
