package codeconnect

import (
	"encoding/json"
	"testing"
	"time"

	pb "github.com/envd-dev/envd/gen/envd/interpreter/v1"
	"github.com/envd-dev/envd/internal/interpreter"
)

// Every notice kind has its wire kind.
func TestNoticeKinds(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	x := &interpreter.Execution{ID: "e", ContextID: "c"}
	for k, want := range map[interpreter.NoticeKind]pb.NoticeKind{
		interpreter.NoticeKernelRestarted: pb.NoticeKind_NOTICE_KIND_KERNEL_RESTARTED,
		interpreter.NoticeKernelReplaced:  pb.NoticeKind_NOTICE_KIND_KERNEL_REPLACED,
		interpreter.NoticePackagesChanged: pb.NoticeKind_NOTICE_KIND_PACKAGES_CHANGED,
		interpreter.NoticeKind(99):        pb.NoticeKind_NOTICE_KIND_UNSPECIFIED,
	} {
		out := toProto(x, interpreter.Event{Seq: 1, Kind: interpreter.EventNotice, Notice: &interpreter.Notice{Kind: k, Text: "t", At: at}})
		n := out.GetNotice()
		if n.GetKind() != want || n.GetText() != "t" || !n.GetAt().AsTime().Equal(at) || out.GetSeq() != 1 {
			t.Errorf("%v: %v", k, out)
		}
	}
}

// Every engine end reason has its wire reason, and they are named alike.
func TestEndReasons(t *testing.T) {
	t.Parallel()
	for r := interpreter.EndOK; r <= interpreter.EndServerRestarted; r++ {
		got := endReason(r)
		if got == pb.EndReason_END_REASON_UNSPECIFIED || got.String() != "END_REASON_"+upper(r.String()) {
			t.Errorf("%v -> %v", r, got)
		}
	}
	if got := endReason(interpreter.EndReason(99)); got != pb.EndReason_END_REASON_UNSPECIFIED {
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

// A result converts to the wire whatever its values: data passes through
// byte for byte.
func FuzzResultToProto(f *testing.F) {
	f.Add(`"'x'"`, `{"a": [1, null, 0.0]}`)
	f.Add(`[1, 2]`, `"é"`)
	x := &interpreter.Execution{ID: "e", ContextID: "c"}
	f.Fuzz(func(t *testing.T, text, other string) {
		if !json.Valid([]byte(text)) || !json.Valid([]byte(other)) {
			t.Skip()
		}
		ev := interpreter.Event{Seq: 4, Kind: interpreter.EventResult, Result: &interpreter.Result{IsMain: true, Data: map[string]json.RawMessage{
			"text/plain": json.RawMessage(text), "application/json": json.RawMessage(other),
		}}}
		out := toProto(x, ev)
		r := out.GetResult()
		if out.GetSeq() != 4 || r == nil || !r.GetIsMainResult() || string(r.GetData()["application/json"]) != other ||
			string(r.GetData()["text/plain"]) != text {
			t.Fatalf("toProto: %v", out)
		}
		_ = r.GetText()
	})
}
