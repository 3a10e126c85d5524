package outbuf

import "fmt"

// Snapshot returns what the log retains: the offset of its oldest byte,
// the offset after its newest, its records (shared: do not modify their
// Data) and whether it is closed. With Restore, a log outlives the process
// image that wrote it (a live upgrade of envd).
func (l *Log) Snapshot() (start, end int64, recs []Record, closed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	recs = append([]Record(nil), l.recs[l.head:]...)
	if l.reuse != nil {
		recs = copyRecords(recs)
	}
	return l.start, l.end, recs, l.closed
}

// Restore returns a log that continues a Snapshot: it retains recs (which
// it keeps, not copies), and its next write lands at end. recs must be
// contiguous from start to end (as Snapshot returns them); the oldest are
// dropped if they exceed capacity.
func Restore(capacity int, start, end int64, recs []Record, opts ...Option) (*Log, error) {
	l := New(capacity, opts...)
	off := start
	for i, r := range recs {
		if r.Off != off {
			return nil, fmt.Errorf("outbuf: record %d starts at offset %d, want %d", i, r.Off, off)
		}
		off += int64(len(r.Data))
	}
	if off != end {
		return nil, fmt.Errorf("outbuf: records end at offset %d, want %d", off, end)
	}
	l.recs = make([]Record, len(recs))
	for i, r := range recs {
		l.recs[i] = Record{Off: r.Off, Kind: r.Kind, Data: r.Data[:len(r.Data):len(r.Data)]}
	}
	if l.reuse != nil {
		l.reuse.whole = make([][]byte, len(recs)) // none of them is the log's to reuse
	}
	l.start, l.end = start, end
	l.evict()
	return l, nil
}
