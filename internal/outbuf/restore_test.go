package outbuf_test

import (
	"testing"

	"github.com/envd-dev/envd/internal/outbuf"
)

// TestSnapshotRestore: a restored log replays what the snapshot retained,
// at the same offsets, and goes on from its end.
func TestSnapshotRestore(t *testing.T) {
	t.Parallel()
	l := outbuf.New(8)
	l.Write(1, []byte("0123"))
	l.Write(2, []byte("456789")) // evicts "01"
	start, end, recs, closed := l.Snapshot()
	if start != 2 || end != 10 || closed {
		t.Fatalf("snapshot: %d..%d closed %v", start, end, closed)
	}
	r, err := outbuf.Restore(8, start, end, recs)
	if err != nil {
		t.Fatal(err)
	}
	r.Write(1, []byte("ab"))
	got := concat(readAll(t, r.Cursor(outbuf.Oldest)))
	if string(got) != "456789ab" {
		t.Errorf("restored log reads %q", got)
	}
	if _, err := outbuf.Restore(8, 0, 10, recs); err == nil {
		t.Error("restore of records that do not start at start: no error")
	}
}
