package jupyter

import (
	"context"
	"io"
	"strings"
	"sync"
	"time"
)

// Execution is one execute_request in flight. Its messages (every message
// whose parent is this request: status, execute_input, stream,
// display_data, execute_result, error, clear_output, execute_reply,
// input_request, comm traffic...) are queued in arrival order and read with
// Next.
//
// It completes only when both the shell execute_reply and the iopub
// "status: idle" have arrived (plus KernelOptions.PostIdleGrace): the two
// channels are not ordered, and the reply can come a second before the last
// output. It ends early with ErrKernelRestarted, ErrKernelDied,
// ErrConnectionLost, ErrServerRestarted or ErrClosed if the kernel or the
// connection goes away; outputs queued before that remain readable.
//
// The queue is not bounded: the reader goroutine must never block on a
// consumer, so the consumer is expected to drain promptly (into a bounded
// log of its own).
type Execution struct {
	// ID is the execute_request's msg_id.
	ID string

	k     *Kernel
	grace time.Duration

	notify chan struct{} // capacity 1: "the queue or the state changed"
	done   chan struct{} // closed when the execution ends

	mu         sync.Mutex
	queue      []*Message  // guarded by mu; unread messages are queue[head:]
	head       int         // guarded by mu
	reply      *Message    // guarded by mu
	idle       bool        // guarded by mu
	graceTimer *time.Timer // guarded by mu; non-nil while in the post-idle grace
	ended      bool        // guarded by mu
	err        error       // guarded by mu
}

func newExecution(k *Kernel, id string, grace time.Duration) *Execution {
	return &Execution{
		ID:     id,
		k:      k,
		grace:  grace,
		notify: make(chan struct{}, 1),
		done:   make(chan struct{}),
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
			m := e.queue[e.head]
			e.queue[e.head] = nil
			e.head++
			if e.head == len(e.queue) { // drained: reuse the backing array
				e.queue, e.head = e.queue[:0], 0
			}
			e.mu.Unlock()
			return m, nil
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

func (e *Execution) deliver(m *Message) {
	e.mu.Lock()
	if e.ended {
		e.mu.Unlock()
		return
	}
	e.queue = append(e.queue, m)
	switch {
	case m.Channel == ChannelShell && m.Type() == "execute_reply":
		e.reply = m
	case m.Channel == ChannelIOPub && m.Type() == "status":
		var st StatusContent
		if m.DecodeContent(&st) == nil && st.ExecutionState == "idle" {
			e.idle = true
		}
	}
	complete := e.reply != nil && e.idle && e.graceTimer == nil
	if complete && e.grace > 0 {
		// Stay registered a little longer: some kernels (Deno) publish
		// outputs after idle.
		e.graceTimer = time.AfterFunc(e.grace, func() { e.end(nil) })
		complete = false
	}
	e.mu.Unlock()
	e.wake()
	if complete {
		e.end(nil)
	}
}

func (e *Execution) fail(err error) {
	e.mu.Lock()
	finished := e.reply != nil && e.idle
	e.mu.Unlock()
	if finished { // only the grace period was left: it completed
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
	if e.graceTimer != nil {
		e.graceTimer.Stop()
	}
	e.mu.Unlock()
	e.k.remove(e.ID)
	close(e.done)
	e.wake()
}

func (e *Execution) wake() {
	select {
	case e.notify <- struct{}{}:
	default:
	}
}

// replyWaiter waits for a shell reply and, if wantIOPub, for an iopub
// message of the same request. It reports once on result (buffered).
type replyWaiter struct {
	wantIOPub bool
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
		w.iopub = true
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
