package outbuf_test

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"

	"github.com/envd-dev/envd/internal/outbuf"
)

// writeOwned writes n bytes of the pattern at the log's end in a buffer
// from the log, as a drain does, and returns the buffer.
func writeOwned(l *outbuf.Log, n int) []byte {
	b := l.Buffer(n)
	copy(b, pattern(l.End(), n))
	l.WriteOwned(1, b)
	return b
}

// checkPattern fails unless every record holds the pattern at its offset.
func checkPattern(t testing.TB, what string, recs []outbuf.Record) {
	t.Helper()
	for _, r := range recs {
		if !bytes.Equal(r.Data, pattern(r.Off, len(r.Data))) {
			t.Fatalf("%s: the record at offset %d was overwritten", what, r.Off)
		}
	}
}

// An evicted buffer comes back from Buffer once the reader read past it,
// and not while the reader may still use it.
func TestBufferReuse(t *testing.T) {
	t.Parallel()
	const size = 1 << 10
	l := outbuf.New(4*size, outbuf.WithBufferReuse())
	rd := l.Follow(outbuf.Oldest)
	defer rd.Close()

	first := writeOwned(l, size)
	held, err := rd.Read()
	if err != nil || len(held) != 1 {
		t.Fatalf("Read: %v, %d records", err, len(held))
	}
	// Evict the first record several times over while the reader holds
	// it: none of the buffers handed out may be the one it holds.
	seen := map[*byte]bool{&first[0]: true}
	for range 16 {
		b := writeOwned(l, size)
		if &b[0] == &first[0] {
			t.Fatal("the buffer of a record the reader holds was handed out")
		}
		seen[&b[0]] = true
	}
	checkPattern(t, "held across evictions", held)

	// Once it reads on, the buffers of what it read come back.
	if _, err := rd.Read(); err == nil {
		t.Fatal("a reader left 16 records behind lost nothing")
	}
	reused := 0
	for range 16 {
		recs, err := rd.Read()
		if err != nil {
			t.Fatal(err)
		}
		checkPattern(t, "read", recs)
		b := writeOwned(l, size)
		if seen[&b[0]] {
			reused++
		}
		seen[&b[0]] = true
	}
	if reused < 12 {
		t.Fatalf("%d of 16 buffers reused by a writer its reader keeps up with", reused)
	}
	if b := l.Buffer(size / 2); len(b) != size/2 {
		t.Fatalf("Buffer(%d) has length %d", size/2, len(b))
	}
}

// A plain cursor, a snapshot and a closed reader get copies: nothing tells
// the log when their users are done.
func TestBufferReuseCopies(t *testing.T) {
	t.Parallel()
	const size = 128 << 10 // a reader's batch is 2 of them
	l := outbuf.New(4*size, outbuf.WithBufferReuse())
	for range 4 {
		writeOwned(l, size)
	}
	c := l.Cursor(outbuf.Oldest)
	cur := readAll(t, c)
	_, _, snap, _ := l.Snapshot()
	rd := l.Follow(outbuf.Oldest)
	batch, err := rd.Read() // a batch, and the rest pending
	if err != nil {
		t.Fatal(err)
	}
	rd.Close()
	for range 32 {
		writeOwned(l, size)
	}
	rest, err := rd.Read()
	if err != nil {
		t.Fatal(err)
	}
	checkPattern(t, "cursor", cur)
	checkPattern(t, "snapshot", snap)
	checkPattern(t, "pending of a closed reader", rest)
	if len(batch) == 0 || len(rest) == 0 {
		t.Fatalf("batch %d records, pending %d: the test needs both", len(batch), len(rest))
	}
}

// Readers check every byte while a paced writer reuses buffers as fast as
// it can: the race detector and the patterns catch a buffer reused under
// a reader.
func TestBufferReuseRace(t *testing.T) {
	t.Parallel()
	const (
		capacity = 64 << 10
		total    = 32 << 20
	)
	l := outbuf.New(capacity, outbuf.WithBufferReuse())
	var wg sync.WaitGroup
	for range 2 {
		rd := l.Follow(outbuf.Oldest)
		wg.Go(func() {
			defer rd.Close()
			var got int64
			for {
				recs, err := rd.Read()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Error(err)
					return
				}
				checkPattern(t, "following reader", recs)
				for _, r := range recs {
					got += int64(len(r.Data))
				}
				if len(recs) == 0 {
					<-rd.Wait()
				}
			}
			if got != total {
				t.Errorf("read %d bytes, want %d", got, total)
			}
		})
	}
	// Half the buffers are written whole, half in parts of 1 to 4 KiB as
	// a drain writes them, the last part taking the buffer.
	ctx := context.Background()
	for off, n, i := 0, 0, 0; off < total; off, i = off+n, i+1 {
		n = min(1<<(10+i%5), total-off) // 1 to 16 KiB
		b := l.Buffer(n)
		copy(b, pattern(int64(off), n))
		if i%2 == 0 {
			l.WritePacedPart(ctx, 1, b, b)
			continue
		}
		for at := 0; at < n; {
			k := min(1<<(10+(at>>10)%3), n-at)
			var whole []byte
			if at+k == n {
				whole = b
			}
			l.WritePacedPart(ctx, 1, b[at:at+k], whole)
			at += k
		}
	}
	l.Close()
	wg.Wait()
}

// A buffer written in parts comes back from Buffer only once its last
// part, which hands it over, is evicted and read past: never while an
// earlier part is still in the log or held by a reader.
func TestBufferReuseParts(t *testing.T) {
	t.Parallel()
	const size = 1 << 10
	l := outbuf.New(4*size, outbuf.WithBufferReuse())
	rd := l.Follow(outbuf.Oldest)
	defer rd.Close()

	b := l.Buffer(size)
	copy(b, pattern(0, size))
	l.WritePart(1, b[:size/2], nil)
	held, err := rd.Read() // the reader holds the first part
	if err != nil || len(held) != 1 {
		t.Fatalf("Read: %v, %d records", err, len(held))
	}
	l.WritePart(1, b[size/2:], b)
	for range 4 { // evicts both parts (more would drop b from the held ones)
		got := writeOwned(l, size)
		if &got[0] == &b[0] {
			t.Fatal("a buffer was handed out while a reader holds its first part")
		}
	}
	checkPattern(t, "first part, held", held)
	if _, err := rd.Read(); err == nil {
		t.Fatal("a reader left 4 records behind lost nothing")
	}
	for {
		recs, err := rd.Read()
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			break
		}
	}
	back := false
	for range 8 { // the free list, and new buffers past it
		got := l.Buffer(size)
		back = back || &got[0] == &b[0]
	}
	if !back {
		t.Fatal("the buffer written in parts never came back once read past")
	}
}
