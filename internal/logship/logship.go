// Package logship ships envd's log records to the host's logs collector, as
// upstream envd does inside a Firecracker guest: each record, encoded as one
// JSON object in upstream's shape, is POSTed on its own to the address the
// MMDS publishes.
//
// Logging never waits for the collector. A Shipper's Handler only encodes a
// record and queues it (bounded); one goroutine sends the queue, one record
// per request. Records logged before the address is known wait in the queue.
//
// The shape of a shipped record:
//
//	timestamp   RFC 3339 with nanoseconds, UTC
//	level       debug, info, warn or error (a level between two counts as
//	            the lower one)
//	message     the record's message
//	logger      the record's "component" attribute, renamed (top level only)
//	instanceID  the sandbox's id, envID the template's, as set by SetTarget
//	            when the record is sent
//
// and the record's attributes as slog's JSON handler writes them (groups as
// nested objects, errors as their message), except durations, which are
// strings in time.Duration's notation ("1.5s"): they carry their unit, where
// a bare number would read as nanoseconds here and milliseconds in
// upstream's records.
package logship

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/quartz"
)

// Defaults of Options, upstream's bounds.
const (
	// DefaultMaxPending bounds the bytes of the records waiting to be sent.
	DefaultMaxPending = 8 << 20
	// DefaultMaxRecord bounds one encoded record; a longer one is dropped.
	DefaultMaxRecord = 192 << 10
	// DefaultTimeout bounds one request to the collector.
	DefaultTimeout = 10 * time.Second
	// ReportEvery is how often, at most, send failures are logged.
	ReportEvery = time.Minute
)

// Options configure a Shipper.
type Options struct {
	// Logger receives the shipper's own reports: send failures, at most
	// once per ReportEvery, and its counters at Close. It should not ship;
	// should it, the records the shipper logs are left out of shipping
	// anyway, so logging a failure never causes another. Nil: discarded.
	Logger *slog.Logger
	// Clock paces the failure reports. Nil: the real clock.
	Clock quartz.Clock
	// Level is the lowest level shipped. Nil: every level; the handler the
	// shipper is teed beside is expected to filter.
	Level slog.Leveler
	// MaxPending bounds the bytes of the queued records (without the ids
	// added when they are sent). When a record does not fit, it is dropped,
	// not an older one: the records queued first, the boot's logged before
	// the address was known among them, are kept, and the gap is one run.
	// Zero: DefaultMaxPending.
	MaxPending int
	// MaxRecord bounds one encoded record; a longer one is dropped and
	// counted, never sent. Zero: DefaultMaxRecord.
	MaxRecord int
	// Timeout bounds each request. Zero: DefaultTimeout.
	Timeout time.Duration
}

// Target is where records go, and the ids added to each.
type Target struct {
	// Address is the collector's URL (the MMDS's "address"); "" holds the
	// records until one is set.
	Address string
	// InstanceID and EnvID are the sandbox's and its template's ids.
	InstanceID, EnvID string
}

// Stats are a Shipper's counters.
type Stats struct {
	// Sent counts the records the collector took (a 2xx answer).
	Sent int64
	// Failed counts the records whose request failed: no connection, no
	// answer within the timeout, or a status other than 2xx. They are not
	// sent again.
	Failed int64
	// DroppedFull counts the records dropped because the queue was full.
	DroppedFull int64
	// DroppedOversized counts the records dropped for their size.
	DroppedOversized int64
	// Pending is the number of records queued now, PendingBytes their size.
	Pending, PendingBytes int
}

// Shipper queues log records and sends them to the collector. Its zero
// value is not usable: make one with New, and Close it.
type Shipper struct {
	log        *slog.Logger
	clock      quartz.Clock
	level      slog.Leveler
	maxPending int
	maxRecord  int
	client     *http.Client
	transport  *http.Transport
	enc        slog.Handler // slog's JSON handler, writing into the queue

	// ctx aborts the request in flight once Close's bound is over.
	ctx    context.Context
	cancel context.CancelFunc
	// wake tells the sender that records were queued, the target was set,
	// or Close was called.
	wake   chan struct{}
	done   chan struct{} // closed when the sender ends
	closed atomic.Bool   // set at Close: Handle no longer encodes

	mu      sync.Mutex
	queue   [][]byte // guarded by mu: encoded records, oldest first
	target  Target   // guarded by mu
	ids     []byte   // guarded by mu: `,"instanceID":…,"envID":…}` for target
	started bool     // guarded by mu: the sender runs (or ran)
	closing bool     // guarded by mu
	stats   Stats    // guarded by mu

	// Only the sender touches these.
	lastReport time.Time
	unreported int64 // failures since the last report
}

// ownRecord marks the context of the records the shipper logs itself.
type ownRecord struct{}

// own is the context the shipper logs with.
var own = context.WithValue(context.Background(), ownRecord{}, true)

// New returns a shipper with no target yet: records are queued until
// SetTarget names one. Its sender starts with the first target.
func New(o Options) *Shipper {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = quartz.NewReal()
	}
	if o.Level == nil {
		o.Level = slog.Level(-1 << 10) // every level
	}
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.MaxRecord <= 0 {
		o.MaxRecord = DefaultMaxRecord
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	// One connection per record, as upstream: nothing idles between
	// records, and a collector that restarts costs no stale connection.
	tr := &http.Transport{
		DialContext:       (&net.Dialer{Timeout: o.Timeout}).DialContext,
		DisableKeepAlives: true,
	}
	s := &Shipper{
		log:        o.Logger,
		clock:      o.Clock,
		level:      o.Level,
		maxPending: o.MaxPending,
		maxRecord:  o.MaxRecord,
		client:     &http.Client{Transport: tr, Timeout: o.Timeout},
		transport:  tr,
		wake:       make(chan struct{}, 1),
		done:       make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.enc = slog.NewJSONHandler(queueWriter{s}, &slog.HandlerOptions{Level: o.Level, ReplaceAttr: upstreamShape})
	return s
}

// Handler returns the handler that ships records: tee it beside the one that
// writes envd's log. It never blocks on the collector.
func (s *Shipper) Handler() slog.Handler { return &handler{s: s, enc: s.enc} }

// SetTarget sets where records go and the ids added to them, from the next
// record sent on; the first address starts the sender. An address that is
// not an http(s) URL is refused (logged) and records wait for a valid one.
func (s *Shipper) SetTarget(t Target) {
	if t.Address != "" {
		if err := checkAddress(t.Address); err != nil {
			s.log.LogAttrs(own, slog.LevelWarn, "not shipping log records to the host: bad logs address; holding them", slog.String("address", t.Address), slog.Any("err", err))
			t.Address = ""
		}
	}
	ids := idsSuffix(t)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.target, s.ids = t, ids
	start := t.Address != "" && !s.started
	if start {
		s.started = true
	}
	s.mu.Unlock()
	if start {
		go s.run()
	}
	s.signal()
}

// Stats returns the counters.
func (s *Shipper) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Pending = len(s.queue)
	return st
}

// Close stops shipping. Records logged from then on are not shipped; those
// queued are still sent until ctx ends, when the request in flight is
// aborted and the rest are abandoned. It returns once the sender has ended,
// after logging the counters; ctx's error if records were abandoned. Later
// calls do nothing.
func (s *Shipper) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	started := s.started
	s.mu.Unlock()
	s.closed.Store(true)
	if started {
		s.signal()
		select {
		case <-s.done:
		case <-ctx.Done():
			s.cancel()
			<-s.done
		}
	}
	s.cancel()
	s.transport.CloseIdleConnections()
	st := s.Stats()
	var err error
	switch {
	case st.Pending == 0:
	case ctx.Err() != nil:
		err = fmt.Errorf("log shipping: %d records never sent: %w", st.Pending, context.Cause(ctx))
	default:
		err = fmt.Errorf("log shipping: %d records never sent: no logs address", st.Pending)
	}
	level := slog.LevelInfo
	if st.Failed+st.DroppedFull+st.DroppedOversized > 0 || st.Pending > 0 {
		level = slog.LevelWarn
	}
	s.log.LogAttrs(own, level, "log shipping stopped",
		slog.Int64("sent", st.Sent), slog.Int64("failed", st.Failed),
		slog.Int64("dropped_full", st.DroppedFull), slog.Int64("dropped_oversized", st.DroppedOversized),
		slog.Int("unsent", st.Pending))
	return err
}

// signal wakes the sender, if it sleeps.
func (s *Shipper) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// enqueue queues one encoded record, or counts it dropped.
func (s *Shipper) enqueue(p []byte) {
	p = bytes.TrimRight(p, "\n")
	s.mu.Lock()
	switch {
	case s.closing:
		s.mu.Unlock()
		return
	case len(p) > s.maxRecord:
		s.stats.DroppedOversized++
		s.mu.Unlock()
		return
	case s.stats.PendingBytes+len(p) > s.maxPending:
		s.stats.DroppedFull++
		s.mu.Unlock()
		return
	}
	s.queue = append(s.queue, bytes.Clone(p))
	s.stats.PendingBytes += len(p)
	s.mu.Unlock()
	s.signal()
}

// run sends the queue, one record at a time, until Close.
func (s *Shipper) run() {
	defer close(s.done)
	for {
		rec, t, ids, ok := s.next()
		if !ok {
			return
		}
		err := s.send(t.Address, withIDs(rec, ids))
		if err != nil && s.ctx.Err() == nil {
			// Not once Close has aborted it: Close logs the counters.
			s.failed(t.Address, err)
		}
		s.mu.Lock()
		if err != nil {
			s.stats.Failed++
		} else {
			s.stats.Sent++
		}
		s.mu.Unlock()
	}
}

// next takes the oldest record once there is one and an address to send it
// to. It reports false once the shipper is closing and nothing more can be
// sent, or Close's bound is over.
func (s *Shipper) next() ([]byte, Target, []byte, bool) {
	for {
		if s.ctx.Err() != nil {
			return nil, Target{}, nil, false
		}
		s.mu.Lock()
		if len(s.queue) > 0 && s.target.Address != "" {
			rec := s.queue[0]
			s.queue[0] = nil
			s.queue = s.queue[1:]
			s.stats.PendingBytes -= len(rec)
			t, ids := s.target, s.ids
			s.mu.Unlock()
			return rec, t, ids, true
		}
		closing := s.closing
		s.mu.Unlock()
		if closing {
			return nil, Target{}, nil, false
		}
		select {
		case <-s.wake:
		case <-s.ctx.Done():
		}
	}
}

// send POSTs one record.
func (s *Shipper) send(address string, body []byte) error {
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, address, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build the request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Close = true
	res, err := s.client.Do(req)
	if err != nil {
		return err // a *url.Error: names the method and the address
	}
	io.Copy(io.Discard, io.LimitReader(res.Body, 4<<10))
	res.Body.Close()
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return fmt.Errorf("POST %s: collector answered %s", address, res.Status)
	}
	return nil
}

// failed counts a send failure and logs it, with the failures since the
// last report, unless it reported less than ReportEvery ago.
func (s *Shipper) failed(address string, err error) {
	s.unreported++
	now := s.clock.Now("logship", "report")
	if !s.lastReport.IsZero() && now.Sub(s.lastReport) < ReportEvery {
		return
	}
	s.log.LogAttrs(own, slog.LevelWarn, "cannot ship log records to the host's collector; dropping them",
		slog.String("address", address), slog.Int64("failures", s.unreported), slog.Any("err", err))
	s.lastReport, s.unreported = now, 0
}

// handler encodes records into its shipper's queue.
type handler struct {
	s   *Shipper
	enc slog.Handler
}

// Enabled reports whether records of level are shipped: at or above the
// shipper's level, not the shipper's own, and not once it is closed.
func (h *handler) Enabled(ctx context.Context, level slog.Level) bool {
	return !h.s.closed.Load() && ctx.Value(ownRecord{}) == nil && h.enc.Enabled(ctx, level)
}

// Handle encodes r and queues it.
func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	if !h.Enabled(ctx, r.Level) {
		return nil
	}
	return h.enc.Handle(ctx, r)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &handler{s: h.s, enc: h.enc.WithAttrs(attrs)}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{s: h.s, enc: h.enc.WithGroup(name)}
}

// queueWriter is where the JSON handler writes: each Write is one record.
type queueWriter struct{ s *Shipper }

func (w queueWriter) Write(p []byte) (int, error) {
	w.s.enqueue(p)
	return len(p), nil
}

// upstreamShape renames and reformats slog's attributes to upstream's
// record shape (see the package doc).
func upstreamShape(groups []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	if len(groups) > 0 {
		return a
	}
	switch a.Key {
	case slog.TimeKey:
		if a.Value.Kind() == slog.KindTime {
			return slog.String("timestamp", a.Value.Time().UTC().Format(time.RFC3339Nano))
		}
	case slog.LevelKey:
		if l, ok := a.Value.Any().(slog.Level); ok {
			return slog.String("level", levelName(l))
		}
	case slog.MessageKey:
		a.Key = "message"
	case "component":
		a.Key = "logger"
	}
	return a
}

// levelName is l's name in upstream's (zerolog's) records.
func levelName(l slog.Level) string {
	switch {
	case l < slog.LevelInfo:
		return "debug"
	case l < slog.LevelWarn:
		return "info"
	case l < slog.LevelError:
		return "warn"
	default:
		return "error"
	}
}

// idsSuffix is what closes a record with t's ids added.
func idsSuffix(t Target) []byte {
	inst, _ := json.Marshal(t.InstanceID) // a string always encodes
	env, _ := json.Marshal(t.EnvID)
	b := []byte(`,"instanceID":`)
	b = append(b, inst...)
	b = append(b, `,"envID":`...)
	b = append(b, env...)
	return append(b, '}')
}

// withIDs adds the ids to rec, a JSON object as slog's JSON handler writes
// one (never empty: it has a level and a message at least).
func withIDs(rec, ids []byte) []byte {
	if len(rec) < 2 || rec[len(rec)-1] != '}' {
		return rec
	}
	b := make([]byte, 0, len(rec)-1+len(ids))
	b = append(b, rec[:len(rec)-1]...)
	return append(b, ids...)
}

// checkAddress refuses an address that is not an http(s) URL with a host.
func checkAddress(address string) error {
	u, err := url.Parse(address)
	if err != nil {
		return err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http(s) URL", address)
	}
	return nil
}
