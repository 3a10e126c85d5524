package interpreter

import (
	"encoding/json"
	"testing"

	pb "github.com/envd-dev/envd/gen/envd/interpreter/v1"
)

// Every engine end reason has its wire reason, and they are named alike.
func TestEndReasons(t *testing.T) {
	t.Parallel()
	for r := EndOK; r <= EndServerRestarted; r++ {
		got := endReason(r)
		if got == pb.EndReason_END_REASON_UNSPECIFIED || got.String() != "END_REASON_"+upper(r.String()) {
			t.Errorf("%v -> %v", r, got)
		}
	}
	if got := endReason(EndReason(99)); got != pb.EndReason_END_REASON_UNSPECIFIED {
		t.Errorf("unknown reason -> %v", got)
	}
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

func TestPlainText(t *testing.T) {
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
		if got := plainText(json.RawMessage(tc.raw)); got != tc.want {
			t.Errorf("plainText(%s) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}

// A result converts to the wire whatever its values: data passes through
// byte for byte.
func FuzzResultToProto(f *testing.F) {
	f.Add(`"'x'"`, `{"a": [1, null, 0.0]}`)
	f.Add(`[1, 2]`, `"é"`)
	x := &Execution{ID: "e", ContextID: "c"}
	f.Fuzz(func(t *testing.T, text, other string) {
		if !json.Valid([]byte(text)) || !json.Valid([]byte(other)) {
			t.Skip()
		}
		ev := Event{Seq: 3, Kind: EventResult, Result: &Result{IsMain: true, Data: map[string]json.RawMessage{
			"text/plain": json.RawMessage(text), "application/json": json.RawMessage(other),
		}}}
		out := toProto(x, ev, 4)
		r := out.GetResult()
		if out.GetSeq() != 4 || r == nil || !r.GetIsMainResult() || string(r.GetData()["application/json"]) != other ||
			string(r.GetData()["text/plain"]) != text {
			t.Fatalf("toProto: %v", out)
		}
		_ = r.GetText()
	})
}
