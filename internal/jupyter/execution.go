package jupyter

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/envd-dev/envd/internal/jupyter/jwire"
)

// Execution is one execute_request in flight. Its messages (every message
// whose parent is this request: status, execute_input, stream,
// display_data, execute_result, error, clear_output, execute_reply,
// input_request, comm traffic...) are queued in arrival order and read with
// Next.
//
// It completes only when both the shell execute_reply and the iopub
// "status: idle" have arrived (and, with KernelOptions.FlushAfterIdle, the
// flush after them): the two channels are not ordered, and the reply can
// come a second before the last output. It ends early with
// ErrKernelRestarted, ErrKernelDied, ErrConnectionLost, ErrServerRestarted
// or ErrClosed if the kernel or the connection goes away, with ErrNoReply
// if the kernel finished the request without replying, and with
// ErrKernelUnresponsive if it stopped answering (see
// KernelOptions.ProbeAfter); outputs queued before that remain readable.
//
// The queue is bounded: output messages (stream, display_data, error...)
// are queued up to KernelOptions.MaxQueuedBytes. Beyond that the kernel's
// reader waits for Next up to KernelOptions.ReaderGrace, then drops output
// until the queue is half empty again, leaving in its place one stderr
// stream message that says how much was dropped (Message.Dropped).
// status, execute_input, execute_reply and input_request are never dropped.
type Execution struct {
	// ID is the execute_request's msg_id.
	ID string

	k     *Kernel
	flush time.Duration // KernelOptions.FlushAfterIdle

	notify   chan struct{} // capacity 1: "the queue or the state changed"
	done     chan struct{} // closed when the execution ends
	drained  chan struct{} // capacity 1: Next took a message
	activity chan struct{} // capacity 1: a message arrived (for watch)

	mu       sync.Mutex
	queue    []queued  // guarded by mu; unread messages are queue[head:]
	head     int       // guarded by mu
	outBytes int       // guarded by mu; size of the queued output messages
	allBytes int       // guarded by mu; size of every queued message
	dropping bool      // guarded by mu; output is dropped until outBytes <= half the cap
	reply    *Message  // guarded by mu
	idle     bool      // guarded by mu
	lastMsg  time.Time // guarded by mu; when the last message arrived (or the request was sent)
	flushing bool      // guarded by mu; reply and idle are in, the flush is on (watch)
	ended    bool      // guarded by mu
	err      error     // guarded by mu
}

// queued is a message in an Execution's queue.
type queued struct {
	m      *Message
	size   int
	output bool // counted in outBytes; may be dropped
	marker bool // a drop marker, still updatable
}

func newExecution(k *Kernel, id string, flush time.Duration) *Execution {
	return &Execution{
		ID:       id,
		k:        k,
		flush:    flush,
		notify:   make(chan struct{}, 1),
		done:     make(chan struct{}),
		drained:  make(chan struct{}, 1),
		activity: make(chan struct{}, 1),
	}
}

// Next returns the next message in arrival order, waiting for it if needed.
// After the last message it returns io.EOF if the execution completed, or
// the error that ended it. Next must not be called concurrently with
// itself; ctx only bounds this wait.
func (e *Execution) Next(ctx context.Context) (*Message, error) {
	for {
		e.mu.Lock()
		if e.head < len(e.queue) {
			q := e.queue[e.head]
			e.queue[e.head] = queued{}
			e.head++
			if e.head == len(e.queue) { // drained: reuse the backing array
				e.queue, e.head = e.queue[:0], 0
			}
			e.allBytes -= q.size
			if q.output {
				e.outBytes -= q.size
			}
			if e.dropping && e.outBytes <= e.k.opts.MaxQueuedBytes/2 {
				e.dropping = false
			}
			e.mu.Unlock()
			signal(e.drained)
			return q.m, nil
		}
		if e.ended {
			err := e.err
			e.mu.Unlock()
			if err == nil {
				return nil, io.EOF
			}
			return nil, err
		}
		e.mu.Unlock()
		select {
		case <-e.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Done is closed when the execution has ended (messages may still be
// queued for Next).
func (e *Execution) Done() <-chan struct{} { return e.done }

// Wait blocks until the execution ends or ctx is done, and returns Err.
func (e *Execution) Wait(ctx context.Context) error {
	select {
	case <-e.done:
		return e.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Err returns why the execution ended: nil if it completed (or has not
// ended yet), else one of the sentinel errors.
func (e *Execution) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// Reply returns the execute_reply, or nil if it has not arrived.
func (e *Execution) Reply() *Message {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.reply
}

// isControl tells the messages that are never dropped: they drive the
// execution (its state, its end, a kernel waiting for input), and a kernel
// sends one or two of each per request.
func isControl(m *Message) bool {
	switch m.Type() {
	case "status", "execute_input", "execute_reply", "input_request":
		return true
	}
	return false
}

// messageSize is what a message costs in the queue, roughly: each buffer
// costs its slice header besides its bytes (jwire.FrameCost, as on the
// direct path), so a message of many empty buffers is charged what it
// holds.
func messageSize(m *Message) int {
	n := 512 + len(m.Content) + len(m.Metadata)
	for _, b := range m.Buffers {
		n += jwire.FrameCost + len(b)
	}
	return n
}

// deliver queues m. It is called by the kernel's reader, which it may keep
// waiting up to ReaderGrace when the queue is full.
func (e *Execution) deliver(m *Message) {
	defer signal(e.activity)
	size := messageSize(m)
	limit := e.k.opts.MaxQueuedBytes
	now := e.k.clock.Now()
	e.mu.Lock()
	if e.ended {
		e.mu.Unlock()
		return
	}
	e.lastMsg = now
	if isControl(m) {
		// Never dropped, but bounded all the same: a kernel could forge
		// them. Beyond twice the cap only the ones that matter are kept.
		// An input_request is not one of them: a kernel waits for the
		// reply to each, so a real one never has a queue of them, and
		// code in the kernel can publish any number.
		first := (m.Type() == "execute_reply" && e.reply == nil) || (m.Type() == "status" && !e.idle)
		if e.allBytes+size > 2*limit && !first {
			e.dropLocked(m, size)
			e.mu.Unlock()
			e.wake()
			return
		}
	} else {
		waited := false
		for !e.ended && !e.dropping && e.outBytes > 0 && e.outBytes+size > limit {
			if waited {
				e.dropping = true
				e.k.log.Warn("execution reader fell behind; dropping kernel output", "msg_id", e.ID,
					"queued_bytes", e.outBytes, "grace", e.k.opts.ReaderGrace)
				break
			}
			e.mu.Unlock()
			waited = !e.waitDrained()
			e.mu.Lock()
		}
		if e.ended {
			e.mu.Unlock()
			return
		}
		if e.dropping {
			e.dropLocked(m, size)
			e.mu.Unlock()
			e.wake()
			return
		}
	}
	e.queue = append(e.queue, queued{m: m, size: size, output: !isControl(m)})
	e.allBytes += size
	if !isControl(m) {
		e.outBytes += size
	}
	switch {
	case m.Channel == ChannelShell && m.Type() == "execute_reply":
		if e.reply == nil {
			e.reply = m
		}
	case m.Channel == ChannelIOPub && m.Type() == "status":
		var st StatusContent
		if m.DecodeContent(&st) == nil && st.ExecutionState == "idle" {
			e.idle = true
		}
	}
	complete := e.reply != nil && e.idle && !e.flushing
	if complete && e.flush > 0 {
		// Some kernels (Deno) publish outputs after idle: watch flushes
		// them out and then ends the execution.
		e.flushing = true
		complete = false
	}
	e.mu.Unlock()
	e.wake()
	if complete {
		e.end(nil)
	}
}

// waitDrained waits until Next takes a message, for at most ReaderGrace.
// It reports whether the reader made progress (or the wait is moot).
func (e *Execution) waitDrained() bool {
	t := e.k.clock.NewTimer(e.k.opts.ReaderGrace, "jupyter", tagReaderGrace)
	defer t.Stop()
	select {
	case <-e.drained:
		return true
	case <-e.done:
		return true
	case <-e.k.ctx.Done():
		return true
	case <-t.C:
		// One last look: the reader may have taken a message just now.
		select {
		case <-e.drained:
			return true
		default:
			return false
		}
	}
}

// dropLocked counts m as dropped in the marker at the queue's tail,
// adding one if needed.
func (e *Execution) dropLocked(m *Message, size int) {
	n := int64(size - 512)
	var s StreamContent
	if m.Type() == "stream" && m.DecodeContent(&s) == nil {
		n = int64(len(s.Text))
	}
	n = max(n, 0) + m.Dropped
	if len(e.queue) > e.head && e.queue[len(e.queue)-1].marker {
		q := &e.queue[len(e.queue)-1]
		q.m.Dropped += n
		q.m.Content = markerContent(q.m.Dropped, e.k.opts.MaxQueuedBytes)
		return
	}
	mk := &Message{
		Channel: ChannelIOPub,
		Header: Header{
			MsgID:    jwire.NewID(),
			MsgType:  "stream",
			Session:  e.k.session,
			Username: "envd",
			Date:     e.k.clock.Now().UTC().Format("2006-01-02T15:04:05.000000Z"),
			Version:  jwire.ProtocolVersion,
		},
		ParentHeader: Header{MsgID: e.ID, MsgType: "execute_request"},
		Content:      markerContent(n, e.k.opts.MaxQueuedBytes),
		Dropped:      n,
	}
	e.queue = append(e.queue, queued{m: mk, size: messageSize(mk), marker: true})
	e.allBytes += messageSize(mk)
}

func markerContent(n int64, limit int) json.RawMessage {
	c, _ := json.Marshal(StreamContent{Name: "stderr", Text: fmt.Sprintf(
		"\n[envd: %d bytes of output dropped: the reader fell more than %d MiB behind]\n", n, limit>>20)})
	return c
}

func (e *Execution) fail(err error) {
	e.mu.Lock()
	finished := e.reply != nil && e.idle
	e.mu.Unlock()
	if finished { // only the flush was left: it completed
		err = nil
	}
	e.end(err)
}

func (e *Execution) end(err error) {
	e.mu.Lock()
	if e.ended {
		e.mu.Unlock()
		return
	}
	e.ended, e.err = true, err
	e.mu.Unlock()
	e.k.remove(e.ID)
	close(e.done)
	e.wake()
}

func (e *Execution) wake() { signal(e.notify) }

// signal does a non-blocking send on a channel of capacity 1.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// replyWaiter waits for a shell reply and, if wantIOPub, for an iopub
// message of the same request (if wantIdle, its "status: idle"). It
// reports once on result (buffered).
type replyWaiter struct {
	wantIOPub bool
	wantIdle  bool
	result    chan error

	mu       sync.Mutex
	replyMsg *Message // guarded by mu
	iopub    bool     // guarded by mu
	reported bool     // guarded by mu
}

func newReplyWaiter(wantIOPub bool) *replyWaiter {
	return &replyWaiter{wantIOPub: wantIOPub, result: make(chan error, 1)}
}

func (w *replyWaiter) deliver(m *Message) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case m.Channel == ChannelIOPub:
		if !w.wantIdle {
			w.iopub = true
			break
		}
		var st StatusContent
		if m.Type() == "status" && m.DecodeContent(&st) == nil && st.ExecutionState == "idle" {
			w.iopub = true
		}
	case strings.HasSuffix(m.Type(), "_reply"):
		w.replyMsg = m
	}
	if w.replyMsg != nil && (w.iopub || !w.wantIOPub) {
		w.reportLocked(nil)
	}
}

func (w *replyWaiter) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reportLocked(err)
}

func (w *replyWaiter) reportLocked(err error) {
	if w.reported {
		return
	}
	w.reported = true
	select {
	case w.result <- err:
	default: // a nudge shares one channel between attempts; one report is enough
	}
}

func (w *replyWaiter) reply() *Message {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.replyMsg
}
