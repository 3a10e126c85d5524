package process

import (
	"context"

	"github.com/envd-dev/envd/internal/outbuf"
)

// Flow control between a process's output and the readers that follow it
// is outbuf's paced log (internal/outbuf/pace.go): the drains append with
// WritePaced, so before appending a chunk that would leave a following
// Reader more than half the log behind, a drain waits for it to read on. A
// Reader that reads nothing for ReaderGrace while a drain waits for it is
// left behind for good, and its next Read reports the loss. Plain cursors
// (Process.Output) are never waited for, and once the process is killed
// and its output no longer waited for (hurry), no reader is.
//
// Without this, a client reading as fast as the network allows falls out of
// the log within milliseconds of a program that prints faster than that
// (`cat big.log`, `head -c 1G /dev/zero`): it would get data_loss where
// upstream's fan-out just throttles the program to its readers. A stuck
// client still costs the program at most ReaderGrace, once.

// Reader follows a process's output: see Process.Follow.
type Reader = outbuf.Reader

// Follow returns a Reader of the process's output from the oldest retained
// byte, like Output's cursor, but the process waits for it (up to
// ReaderGrace) rather than evict what it has not read. Close it when done.
// Read returns nil when nothing is new, io.EOF after the last byte of an
// ended process, or a *outbuf.LostError when the reader was left behind.
func (p *Process) Follow() *Reader {
	return p.log.Follow(outbuf.Oldest)
}

// newLog returns the output log of a process started with opts.
func newLog(opts Options) *outbuf.Log {
	return outbuf.New(opts.LogSize, logOptions(opts)...)
}

// logOptions are the options of a process's output log. The drains hand
// full buffers to it and take their next ones from it (Log.Buffer), so its
// readers use what they read before their next Read (streamEvents sends
// it first).
func logOptions(opts Options) []outbuf.Option {
	return []outbuf.Option{outbuf.WithReaderGrace(opts.ReaderGrace), outbuf.WithClock(opts.Clock), outbuf.WithBufferReuse()}
}

// startPacing makes the drains' paced writes wait for the followers until
// p.hurry is called.
func (p *Process) startPacing() {
	p.pacing, p.hurry = context.WithCancel(context.Background())
}
