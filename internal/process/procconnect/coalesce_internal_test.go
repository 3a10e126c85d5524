package procconnect

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/envd-dev/envd/internal/outbuf"
	"github.com/envd-dev/envd/internal/process"
)

// TestCoalesce: each run of records of one kind becomes one record with
// the run's bytes in order and the first record's offset; a record alone
// in its run is passed on untouched; the scratch buffer is reused.
func TestCoalesce(t *testing.T) {
	t.Parallel()
	rec := func(off int64, kind uint8, s string) outbuf.Record {
		return outbuf.Record{Off: off, Kind: kind, Data: []byte(s)}
	}
	alone := rec(3, process.Stderr, "c")
	in := []outbuf.Record{
		rec(0, process.Stdout, "a"), rec(1, process.Stdout, "bb"), alone,
		rec(4, process.Stdout, "d"), rec(5, process.Stdout, "e"), rec(6, process.Stdout, "f"), rec(7, process.PTY, "g"),
	}
	got, scratch := coalesce(in, nil)
	want := []outbuf.Record{rec(0, process.Stdout, "abb"), alone, rec(4, process.Stdout, "def"), rec(7, process.PTY, "g")}
	if s, w := show(got), show(want); s != w {
		t.Fatalf("coalesce = %s, want %s", s, w)
	}
	if &got[1].Data[0] != &alone.Data[0] {
		t.Error("a record alone in its run was copied")
	}
	if in[0].Off != 0 || string(in[0].Data) != "a" || string(in[1].Data) != "bb" {
		t.Errorf("the input records changed: %s", show(in))
	}
	if cap(got[0].Data) != len(got[0].Data) {
		t.Error("a joined record's capacity reaches into the next one: an append would overwrite it")
	}

	// Nothing to join: the same records, and the scratch is kept.
	single := []outbuf.Record{rec(8, process.Stdout, "x"), rec(9, process.Stderr, "y")}
	got2, scratch2 := coalesce(single, scratch)
	if show(got2) != show(single) || cap(scratch2) != cap(scratch) {
		t.Errorf("coalesce(%s) = %s, scratch cap %d (was %d)", show(single), show(got2), cap(scratch2), cap(scratch))
	}

	// A second join of no more bytes reuses the scratch's memory.
	got3, scratch3 := coalesce([]outbuf.Record{rec(10, process.Stdout, "p"), rec(11, process.Stdout, "q")}, scratch)
	if string(got3[0].Data) != "pq" || &scratch3[:1][0] != &scratch[:1][0] {
		t.Errorf("second join: %s, scratch reused: %v", show(got3), &scratch3[:1][0] == &scratch[:1][0])
	}
	if got, _ := coalesce(nil, nil); len(got) != 0 {
		t.Error("coalesce(nil) returned records")
	}
}

func show(recs []outbuf.Record) string {
	var b bytes.Buffer
	for _, r := range recs {
		fmt.Fprintf(&b, "[%d %d %q]", r.Off, r.Kind, r.Data)
	}
	return b.String()
}
