package shell

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// input is envd's end of a command's input pipe (opened read-write: see
// privateDir.fifo). Writes go in order, one at a time (sem): the Run's
// input first, then each SendInput. A write the command does not take
// waits, as long as its context allows; closing never waits for it, it
// ends it. The pipe is closed (the command reads end-of-file) only once
// the shell holds its read end (opened): before, the last writer gone would
// discard what it holds, and the shell's open would wait for another.
type input struct {
	sem chan struct{}

	mu         sync.Mutex
	f          *os.File  // guarded by mu; nil once closed
	left       []byte    // guarded by mu: the Run's input not written yet
	opened     bool      // guarded by mu: the shell holds the read end
	closeAsked bool      // guarded by mu: close once opened
	wakeOnce   sync.Once // starts the Command's wakeReopens
}

// closed tells whether the pipe was closed.
func (in *input) closed() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.f == nil
}

func newInput(f *os.File) *input {
	return &input{sem: make(chan struct{}, 1), f: f}
}

// start writes the Run's input on a goroutine of its own, then closes the
// pipe unless keep: the turn is taken before start returns, so that every
// SendInput comes after.
func (in *input) start(data []byte, keep bool) {
	in.sem <- struct{}{}
	in.mu.Lock()
	in.left = data
	in.mu.Unlock()
	go func() {
		defer func() { <-in.sem }()
		for {
			in.mu.Lock()
			f, b := in.f, in.left
			in.mu.Unlock()
			if f == nil {
				return
			}
			if len(b) == 0 {
				break
			}
			n, err := f.Write(b)
			in.mu.Lock()
			in.left = in.left[n:]
			in.mu.Unlock()
			if err != nil {
				return // closed, or parked for a handover (park)
			}
		}
		if !keep {
			in.close()
		}
	}()
}

// write writes b, after the writes before it.
func (in *input) write(ctx context.Context, b []byte) error {
	select {
	case in.sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("an earlier input is still being written and the command is not reading its input: %w", ctx.Err())
	}
	defer func() { <-in.sem }()
	in.mu.Lock()
	f := in.f
	in.mu.Unlock()
	if f == nil {
		return errorf(ErrEnded, "the command's stdin is closed")
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		f.SetWriteDeadline(time.Now())
		close(fired)
	})
	_, err := f.Write(b)
	if !stop() {
		<-fired
		f.SetWriteDeadline(time.Time{})
	}
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("the command is not reading its input: %w", ctx.Err())
	case errors.Is(err, os.ErrClosed):
		return errorf(ErrEnded, "the command's stdin was closed while the input was being written")
	}
	return fmt.Errorf("write the command's input: %w", err)
}

// close closes the pipe once the shell holds its read end; closing it
// again is fine.
func (in *input) close() {
	in.mu.Lock()
	if !in.opened {
		in.closeAsked = true
		in.mu.Unlock()
		return
	}
	in.mu.Unlock()
	in.forceClose()
}

// markOpened notes that the shell holds the read end: a close asked for
// before happens now.
func (in *input) markOpened() {
	in.mu.Lock()
	in.opened = true
	asked := in.closeAsked
	in.mu.Unlock()
	if asked {
		in.forceClose()
	}
}

// forceClose closes the pipe now (the command ended).
func (in *input) forceClose() {
	in.mu.Lock()
	f := in.f
	in.f = nil
	in.mu.Unlock()
	if f != nil {
		f.Close()
	}
}

// park stops the Run's input writer for a handover and returns what it has
// not written; unpark lets it go on.
func (in *input) park() []byte {
	in.mu.Lock()
	f := in.f
	in.mu.Unlock()
	if f == nil {
		return nil
	}
	f.SetWriteDeadline(time.Now())
	// The writer holds the turn while it writes: wait for it to stop.
	in.sem <- struct{}{}
	<-in.sem
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]byte(nil), in.left...)
}
