// Package fifo hands a resource to its users one at a time, in the order
// they asked for it: the scheduler of a code context's executions.
package fifo

import "sync"

// Queue grants turns in enqueue order. The zero value is an idle queue.
type Queue struct {
	mu      sync.Mutex
	busy    bool            // guarded by mu
	waiters []chan struct{} // guarded by mu
}

// Ticket is a place in a Queue: it is closed when the turn comes.
type Ticket <-chan struct{}

var granted = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Enqueue takes a place in the queue; the ticket is closed when it is the
// caller's turn. The caller must then Release, or Cancel if it gives up.
func (q *Queue) Enqueue() Ticket {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.busy {
		q.busy = true
		return granted
	}
	ch := make(chan struct{})
	q.waiters = append(q.waiters, ch)
	return ch
}

// Cancel gives up a place; if the turn had already come, it is passed on.
func (q *Queue) Cancel(t Ticket) {
	q.mu.Lock()
	for i, w := range q.waiters {
		if Ticket(w) == t {
			q.waiters = append(q.waiters[:i:i], q.waiters[i+1:]...)
			q.mu.Unlock()
			return
		}
	}
	q.mu.Unlock()
	q.Release()
}

// Release ends the current turn and grants the next one.
func (q *Queue) Release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiters) == 0 {
		q.busy = false
		return
	}
	next := q.waiters[0]
	q.waiters[0] = nil
	q.waiters = q.waiters[1:]
	close(next)
}
