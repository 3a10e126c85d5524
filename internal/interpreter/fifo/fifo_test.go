package fifo_test

import (
	"testing"

	"github.com/envd-dev/envd/internal/interpreter/fifo"
)

func granted(t Ticket) bool {
	select {
	case <-t:
		return true
	default:
		return false
	}
}

type Ticket = fifo.Ticket

func TestOrder(t *testing.T) {
	t.Parallel()
	var q fifo.Queue
	a := q.Enqueue()
	b := q.Enqueue()
	c := q.Enqueue()
	d := q.Enqueue()
	if !granted(a) || granted(b) || granted(c) || granted(d) {
		t.Fatal("only the first ticket is granted at first")
	}
	q.Cancel(c) // a waiting place: dropped, nobody else moves
	if granted(b) || granted(d) {
		t.Fatal("cancelling a waiter granted a turn")
	}
	q.Release()
	if !granted(b) || granted(d) {
		t.Fatal("release must grant the next in order")
	}
	q.Cancel(b) // a granted turn: passed on
	if !granted(d) {
		t.Fatal("cancelling a granted turn must pass it on")
	}
	q.Release()
	if e := q.Enqueue(); !granted(e) {
		t.Fatal("an idle queue grants at once")
	}
}
