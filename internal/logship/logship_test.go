package logship_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/quartz"
	"go.uber.org/goleak"

	"github.com/envd-dev/envd/internal/logship"
	"github.com/envd-dev/envd/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// post is one request the collector got.
type post struct {
	method, path, contentType string
	close                     bool // Connection: close
	rec                       map[string]any
	err                       error // the body is not one JSON object
}

// collector is a fake logs collector on loopback: it keeps every POST and
// answers status (zero: 204).
type collector struct {
	srv    *httptest.Server
	status atomic.Int32
	got    chan post // every request, in order
	mu     sync.Mutex
	posts  []post
}

func newCollector(t *testing.T) *collector {
	t.Helper()
	c := &collector{got: make(chan post, 10000)}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		p := post{method: r.Method, path: r.URL.Path, contentType: r.Header.Get("Content-Type"), close: r.Close}
		dec := json.NewDecoder(strings.NewReader(string(body)))
		if p.err = dec.Decode(&p.rec); p.err == nil && dec.More() {
			p.err = errors.New("more than one JSON value")
		}
		c.mu.Lock()
		c.posts = append(c.posts, p)
		c.mu.Unlock()
		c.got <- p
		if s := c.status.Load(); s != 0 {
			w.WriteHeader(int(s))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *collector) all() []post {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]post(nil), c.posts...)
}

// record waits for the next record and checks the request that carried it.
func (c *collector) record(t *testing.T) map[string]any {
	t.Helper()
	p := testutil.RequireReceive(t, c.got)
	if p.err != nil {
		t.Fatalf("not one JSON object: %v", p.err)
	}
	if p.method != http.MethodPost || p.path != "/logs" || p.contentType != "application/json" || !p.close {
		t.Errorf("request: %s %s, Content-Type %q, Connection: close %v", p.method, p.path, p.contentType, p.close)
	}
	return p.rec
}

// holder accepts TCP connections on loopback and never reads or answers;
// it keeps them open (referenced: a collected conn is closed) until the
// test ends.
type holder struct {
	ln       net.Listener
	accepted chan struct{} // one per connection
	mu       sync.Mutex
	conns    []net.Conn
}

func newHolder(t *testing.T) *holder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &holder{ln: ln, accepted: make(chan struct{}, 100)}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.conns = append(h.conns, c)
			h.mu.Unlock()
			h.accepted <- struct{}{}
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		for _, c := range h.conns {
			c.Close()
		}
	})
	return h
}

// sink collects a logger's JSON records.
type sink struct{ buf testutil.SyncBuffer }

func (s *sink) records(msg string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s.buf.String()))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func (s *sink) handler() slog.Handler { return slog.NewJSONHandler(&s.buf, nil) }

// closeAtCleanup closes s when the test ends, bounded.
func closeAtCleanup(t *testing.T, s *logship.Shipper) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s.Close(ctx)
	})
}

// TestShipsRecords: every record arrives, one per POST (no keep-alive), as
// one JSON object in upstream's shape with the ids and the attributes,
// including those logged before the address was known, in order.
func TestShipsRecords(t *testing.T) {
	c := newCollector(t)
	s := logship.New(logship.Options{Clock: quartz.NewMock(t)})
	closeAtCleanup(t, s)
	log := slog.New(s.Handler()).With("component", "process")

	log.Info("before the address", "n", 1)
	log.Debug("debug before the address")
	if st := s.Stats(); st.Pending != 2 || st.Sent != 0 {
		t.Fatalf("before the address: %+v", st)
	}
	s.SetTarget(logship.Target{Address: c.srv.URL + "/logs", InstanceID: "sbx-1", EnvID: "tpl-1"})
	log.Warn("with attributes", "took", 1500*time.Millisecond, slog.Group("req", "path", "/x", "n", 2), "err", errors.New("boom"))
	log.WithGroup("g").With("a", 1).Error("in a group", "b", true)
	log.Log(context.Background(), slog.LevelInfo+2, "between two levels")

	want := []struct{ msg, level string }{
		{"before the address", "info"},
		{"debug before the address", "debug"},
		{"with attributes", "warn"},
		{"in a group", "error"},
		{"between two levels", "info"},
	}
	var recs []map[string]any
	for _, w := range want {
		r := c.record(t)
		recs = append(recs, r)
		if r["message"] != w.msg || r["level"] != w.level {
			t.Errorf("record %v; want message %q, level %q", r, w.msg, w.level)
		}
		ts, _ := r["timestamp"].(string)
		if _, err := time.Parse(time.RFC3339Nano, ts); err != nil || !strings.HasSuffix(ts, "Z") {
			t.Errorf("timestamp %q: %v", ts, err)
		}
		if r["instanceID"] != "sbx-1" || r["envID"] != "tpl-1" || r["logger"] != "process" {
			t.Errorf("ids or logger: %v", r)
		}
		for _, k := range []string{"msg", "time", "component"} {
			if _, ok := r[k]; ok {
				t.Errorf("slog's key %q left in %v", k, r)
			}
		}
	}
	if recs[0]["n"] != 1.0 {
		t.Errorf("attribute n: %v", recs[0])
	}
	r := recs[2]
	if r["took"] != "1.5s" || r["err"] != "boom" || fmt.Sprint(r["req"]) != "map[n:2 path:/x]" {
		t.Errorf("attributes: %v", r)
	}
	if fmt.Sprint(recs[3]["g"]) != "map[a:1 b:true]" {
		t.Errorf("group: %v", recs[3])
	}
	testutil.Poll(t, "every record counted sent", func() bool { return s.Stats().Sent == int64(len(want)) })
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Failed+st.DroppedFull+st.DroppedOversized != 0 || st.Pending != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestTargetChange: a new target (a resumed sandbox) takes the records from
// then on, with the new ids.
func TestTargetChange(t *testing.T) {
	c1, c2 := newCollector(t), newCollector(t)
	s := logship.New(logship.Options{})
	closeAtCleanup(t, s)
	log := slog.New(s.Handler())
	s.SetTarget(logship.Target{Address: c1.srv.URL + "/logs", InstanceID: "sbx-1", EnvID: "tpl-1"})
	log.Info("one")
	if r := c1.record(t); r["message"] != "one" || r["instanceID"] != "sbx-1" {
		t.Errorf("first: %v", r)
	}
	testutil.Poll(t, "the first record counted sent", func() bool { return s.Stats().Sent == 1 })
	s.SetTarget(logship.Target{Address: c2.srv.URL + "/logs", InstanceID: "sbx-2", EnvID: "tpl-1"})
	log.Info("two")
	if r := c2.record(t); r["message"] != "two" || r["instanceID"] != "sbx-2" || r["envID"] != "tpl-1" {
		t.Errorf("after the change: %v", r)
	}
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := len(c1.all()); n != 1 {
		t.Errorf("the first collector got %d records; want 1", n)
	}
}

// TestBufferBound: while the records cannot be sent, at most MaxPending
// bytes of them wait; the newest are dropped and counted, and the oldest
// arrive once an address is known.
func TestBufferBound(t *testing.T) {
	const bound = 2000
	s := logship.New(logship.Options{MaxPending: bound})
	closeAtCleanup(t, s)
	log := slog.New(s.Handler())
	const n = 100
	for i := range n {
		log.Info(fmt.Sprintf("record %03d", i), "pad", strings.Repeat("x", 100))
	}
	st := s.Stats()
	if st.DroppedFull == 0 || st.PendingBytes > bound || st.Pending == 0 || int64(st.Pending)+st.DroppedFull != n {
		t.Fatalf("stats %+v; want %d records queued or dropped, at most %d bytes queued", st, n, bound)
	}
	c := newCollector(t)
	s.SetTarget(logship.Target{Address: c.srv.URL + "/logs", InstanceID: "sbx-1", EnvID: "tpl-1"})
	for i := range st.Pending {
		if r := c.record(t); r["message"] != fmt.Sprintf("record %03d", i) {
			t.Fatalf("record %d: %v", i, r)
		}
	}
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := len(c.all()); got != st.Pending {
		t.Errorf("%d records arrived; want the %d queued", got, st.Pending)
	}
	if end := s.Stats(); end.Sent != int64(st.Pending) || end.DroppedFull != st.DroppedFull {
		t.Errorf("stats at the end %+v", end)
	}
}

// TestOversized: a record over MaxRecord is dropped and counted, never sent.
func TestOversized(t *testing.T) {
	c := newCollector(t)
	s := logship.New(logship.Options{})
	closeAtCleanup(t, s)
	s.SetTarget(logship.Target{Address: c.srv.URL + "/logs", InstanceID: "sbx-1", EnvID: "tpl-1"})
	log := slog.New(s.Handler())
	log.Info("too big", "blob", strings.Repeat("x", logship.DefaultMaxRecord))
	log.Info("small")
	if r := c.record(t); r["message"] != "small" {
		t.Errorf("got %v; want the small record only", r)
	}
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.DroppedOversized != 1 || st.Sent != 1 {
		t.Errorf("stats %+v", st)
	}
	if n := len(c.all()); n != 1 {
		t.Errorf("%d records arrived; want 1", n)
	}
}

// lateHandler passes records to a handler set after it was made: the
// shipper's own logger, shipping into that same shipper. The shipper never
// derives its logger (With), so neither does this.
type lateHandler struct{ h atomic.Pointer[slog.Handler] }

func (l *lateHandler) Enabled(ctx context.Context, level slog.Level) bool {
	h := l.h.Load()
	return h != nil && (*h).Enabled(ctx, level)
}
func (l *lateHandler) Handle(ctx context.Context, r slog.Record) error {
	return (*l.h.Load()).Handle(ctx, r)
}
func (l *lateHandler) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *lateHandler) WithGroup(string) slog.Handler      { return l }

// TestFailuresReported: a collector answering 500 makes every send fail;
// the failures are counted and logged at most once a minute, with how many
// there were since the last report. The shipper's own records are never
// shipped, even through a logger that ships.
func TestFailuresReported(t *testing.T) {
	c := newCollector(t)
	c.status.Store(http.StatusInternalServerError)
	clock := quartz.NewMock(t)
	var own sink
	late := &lateHandler{}
	s := logship.New(logship.Options{Clock: clock, Logger: slog.New(slog.NewMultiHandler(own.handler(), late))})
	closeAtCleanup(t, s)
	h := s.Handler()
	late.h.Store(&h)
	s.SetTarget(logship.Target{Address: c.srv.URL + "/logs", InstanceID: "sbx-1", EnvID: "tpl-1"})
	log := slog.New(h)
	const report = "cannot ship log records to the host's collector; dropping them"
	logN := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			log.Info(fmt.Sprintf("r%d", i))
		}
		testutil.Poll(t, fmt.Sprintf("%d failures", to), func() bool { return s.Stats().Failed == int64(to) })
	}

	logN(0, 5)
	reports := own.records(report)
	if len(reports) != 1 || reports[0]["failures"] != 1.0 || !strings.Contains(fmt.Sprint(reports[0]["err"]), "500") {
		t.Fatalf("reports after the first failures: %v", reports)
	}
	logN(5, 8)
	if reports := own.records(report); len(reports) != 1 {
		t.Fatalf("reported again within a minute: %v", reports)
	}
	clock.Advance(logship.ReportEvery).MustWait(t.Context())
	logN(8, 9)
	reports = own.records(report)
	if len(reports) != 2 || reports[1]["failures"] != 8.0 {
		t.Fatalf("reports a minute later: %v; want a second one counting 8 failures", reports)
	}
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Sent != 0 || st.Failed != 9 {
		t.Errorf("stats %+v", st)
	}
	if r := own.records("log shipping stopped"); len(r) != 1 || r[0]["failed"] != 9.0 || r[0]["level"] != "WARN" {
		t.Errorf("the counters at Close: %v", r)
	}
	posts := c.all()
	if len(posts) != 9 {
		t.Errorf("%d records arrived; want 9", len(posts))
	}
	for i, p := range posts {
		if p.rec["message"] != fmt.Sprintf("r%d", i) {
			t.Errorf("record %d: %v; the shipper's own records must not be shipped", i, p.rec)
		}
	}
}

// TestHeldCollector: a collector that accepts the connection and never
// answers holds the sender, never the callers: Handle calls complete (the
// newest records dropped once the queue is full), and Close returns once
// its bound is over, aborting the request.
func TestHeldCollector(t *testing.T) {
	hold := newHolder(t)
	var own sink
	s := logship.New(logship.Options{MaxPending: 4096, Timeout: time.Hour, Logger: slog.New(own.handler())})
	closeAtCleanup(t, s)
	s.SetTarget(logship.Target{Address: "http://" + hold.ln.Addr().String() + "/logs", InstanceID: "sbx-1", EnvID: "tpl-1"})
	log := slog.New(s.Handler())
	log.Info("first")
	testutil.RequireReceive(t, hold.accepted) // the sender waits for its answer

	const goroutines, each = 8, 250
	done := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				for i := range each {
					log.Info("while held", "g", g, "i", i)
				}
			})
		}
		wg.Wait()
		close(done)
	}()
	testutil.RequireClosed(t, done, "every Handle call while the collector holds the request")
	st := s.Stats()
	if st.Sent != 0 || st.Failed != 0 || st.DroppedFull == 0 || int64(st.Pending)+st.DroppedFull != goroutines*each {
		t.Fatalf("stats while held %+v", st)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- s.Close(ctx) }()
	if err := testutil.RequireReceive(t, closed); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close: %v; want the bound's end", err)
	}
	if st := s.Stats(); st.Sent != 0 || st.Failed != 1 || st.Pending == 0 {
		t.Errorf("stats after Close %+v", st)
	}
	if r := own.records("log shipping stopped"); len(r) != 1 || r[0]["unsent"] == 0.0 {
		t.Errorf("the counters at Close: %v", r)
	}
	if r := own.records("cannot ship log records to the host's collector; dropping them"); len(r) != 0 {
		t.Errorf("Close's abort reported as a send failure: %v", r)
	}
}

// TestRequestTimeout: a request unanswered within Timeout fails, and is
// counted and reported.
func TestRequestTimeout(t *testing.T) {
	hold := newHolder(t)
	var own sink
	s := logship.New(logship.Options{Timeout: 50 * time.Millisecond, Logger: slog.New(own.handler())})
	closeAtCleanup(t, s)
	s.SetTarget(logship.Target{Address: "http://" + hold.ln.Addr().String() + "/logs"})
	slog.New(s.Handler()).Info("never answered")
	testutil.Poll(t, "the request's failure", func() bool { return s.Stats().Failed == 1 })
	if r := own.records("cannot ship log records to the host's collector; dropping them"); len(r) != 1 {
		t.Errorf("reports: %v", r)
	}
}

// TestCloseWithoutAddress: without an address nothing is sent and Close
// returns at once, saying how many records it abandons; records logged
// after Close are not queued, and a second Close does nothing.
func TestCloseWithoutAddress(t *testing.T) {
	var own sink
	s := logship.New(logship.Options{Logger: slog.New(own.handler())})
	log := slog.New(s.Handler())
	for range 3 {
		log.Info("never sent")
	}
	// Not an http URL: refused, and the records wait.
	s.SetTarget(logship.Target{Address: "ftp://collector/logs"})
	if r := own.records("not shipping log records to the host: bad logs address; holding them"); len(r) != 1 {
		t.Errorf("bad address: %v", r)
	}
	if err := s.Close(t.Context()); err == nil || !strings.Contains(err.Error(), "3 records never sent: no logs address") {
		t.Errorf("Close: %v", err)
	}
	log.Info("after Close")
	if st := s.Stats(); st.Pending != 3 || st.Sent+st.Failed+st.DroppedFull != 0 {
		t.Errorf("stats %+v", st)
	}
	if err := s.Close(t.Context()); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if r := own.records("log shipping stopped"); len(r) != 1 || r[0]["unsent"] != 3.0 {
		t.Errorf("the counters at Close: %v", r)
	}
}
