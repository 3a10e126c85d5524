package interpreter

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestFormatTimestamp(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"2026-11-30T11:58:36.670725Z":      "2026-11-30T11:58:36.670725+00:00",
		"2026-11-30T11:58:36.6707259Z":     "2026-11-30T11:58:36.670725+00:00",
		"2026-11-30T11:58:36Z":             "2026-11-30T11:58:36+00:00",
		"2026-11-30T11:58:36.000000Z":      "2026-11-30T11:58:36+00:00",
		"2026-11-30T11:58:36.5+02:00":      "2026-11-30T11:58:36.500000+02:00",
		"2026-11-30T11:58:36.123456+00:00": "2026-11-30T11:58:36.123456+00:00",
	} {
		if got := FormatTimestamp(in); got != want {
			t.Errorf("FormatTimestamp(%q) = %q, want %q", in, got, want)
		}
	}
	if got := FormatTimestamp("junk"); !strings.HasSuffix(got, "+00:00") {
		t.Errorf("junk date: %q", got)
	}
}

func TestSplitText(t *testing.T) {
	t.Parallel()
	s := strings.Repeat("é", 100) + strings.Repeat("line\n", 20)
	parts := splitText(s, 64)
	if strings.Join(parts, "") != s {
		t.Fatal("split loses text")
	}
	for _, p := range parts {
		if len(p) > 64 || !utf8.ValidString(p) {
			t.Errorf("bad part %q (%d bytes)", p, len(p))
		}
	}
	if got := splitText("short", 64); len(got) != 1 {
		t.Errorf("short text split: %q", got)
	}
}

func TestResultFields(t *testing.T) {
	t.Parallel()
	r := &Result{IsMain: true, Data: map[string]json.RawMessage{
		"text/plain": json.RawMessage(`"'/home/user'"`),
		"image/png":  json.RawMessage(`"iVBOR"`),
		"z/unknown":  json.RawMessage(`{"x":null}`),
		"a/unknown":  json.RawMessage(`1`),
	}}
	fields, extra := r.Fields()
	if len(fields) != 2 || fields[0].Name != "text" || string(fields[0].Value) != `"/home/user"` || fields[1].Name != "png" {
		t.Errorf("fields %+v", fields)
	}
	if len(extra) != 2 || extra[0].Name != "a/unknown" || string(extra[1].Value) != `{"x":null}` {
		t.Errorf("extra %+v", extra)
	}
	for in, want := range map[string]string{`"'a'"`: `"a"`, `"\"a\""`: `"a"`, `"'a\""`: `"'a\""`, `"'"`: `"'"`, `"''"`: `""`, `5`: `5`} {
		if got := string(unquoteText(json.RawMessage(in))); got != want {
			t.Errorf("unquoteText(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestEventRecords(t *testing.T) {
	t.Parallel()
	for _, ev := range []Event{
		{Seq: 3, Kind: EventExecutionCount, ExecutionCount: 7},
		{Seq: 4, Kind: EventStdout, Text: "a\nb", Timestamp: "t"},
		{Seq: 5, Kind: EventStderr, Text: "", Timestamp: "t"},
		{Seq: 6, Kind: EventResult, Result: &Result{IsMain: true, Data: map[string]json.RawMessage{"e2b/chart": json.RawMessage(`{"v":0.0,"n":null,"h":"<&>"}`)}}},
		{Seq: 7, Kind: EventError, Error: &ErrorValue{Name: "E", Value: "v", Traceback: "tb"}},
		{Seq: 8, Kind: EventEnd, End: &End{Reason: EndTimedOut, Message: "m"}},
		{Seq: 0, Kind: EventStarted, Started: &Started{ExecutionID: "x", ContextID: "c", ExecutionCount: 2, Counted: true}},
		{Seq: 1, Kind: EventNotice, Notice: &Notice{Kind: NoticePackagesChanged, Text: "t", At: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)}},
	} {
		rec := encodeEvent(ev)
		got, ok := decodeEvent(rec)
		if !ok {
			t.Fatalf("decode %v failed", ev.Kind)
		}
		a, _ := json.Marshal(ev)
		b, _ := json.Marshal(got)
		if string(a) != string(b) {
			t.Errorf("round trip\n got %s\nwant %s", b, a)
		}
		if _, ok := decodeEvent(rec[1:]); ok {
			t.Errorf("a cut record of %v decoded", ev.Kind)
		}
	}
}

func TestNormalizeLanguage(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"": "python", " Python ": "python", "JS": "javascript", "ts": "typescript", "R": "r", "Bash": "bash", "java": "java"} {
		if got := NormalizeLanguage(in); got != want {
			t.Errorf("NormalizeLanguage(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestResultText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ raw, want string }{
		{`"'/home/user'"`, "/home/user"},
		{`"\"it's\""`, "it's"},
		{`"42"`, "42"},
		{`"'"`, "'"},
		{`"caf\u00e9"`, "café"},
		{`["a\n", "b"]`, "a\nb"},
		{`{"not": "text"}`, `{"not": "text"}`},
	} {
		r := &Result{Data: map[string]json.RawMessage{"text/plain": json.RawMessage(tc.raw)}}
		if got, ok := r.Text(); !ok || got != tc.want {
			t.Errorf("Text of %s = %q, want %q", tc.raw, got, tc.want)
		}
	}
}
