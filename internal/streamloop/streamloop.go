// Package streamloop runs the send loop of a server stream: it sends what
// its source has as soon as it has it, a keepalive after each stretch of
// silence, and it always ends with a reason: the end was sent, the
// request's context ended, or a send or the source failed.
//
// One goroutine, the one that calls [Loop.Run], owns the stream's sends
// (Pump and SendKeepalive are only called from it), as connect-go requires
// of a ServerStream and net/http of a ResponseWriter. The package knows
// neither: a Connect handler returns Run's error, an HTTP handler maps it
// to what its protocol can still say once the response has begun.
//
// A Connect handler:
//
//	return streamloop.Loop{
//		Clock:     clock,
//		Keepalive: server.KeepaliveInterval(req.Header()),
//		Ready:     rd.Wait,
//		Pump: func() (bool, error) {
//			recs, err := rd.Read()
//			if errors.Is(err, io.EOF) {
//				return false, sendEnd() // nil error: streamloop.Done
//			}
//			...send each record...
//			return len(recs) > 0, err
//		},
//		SendKeepalive: func() error { return stream.Send(keepaliveMsg) },
//	}.Run(ctx)
package streamloop

import (
	"context"
	"errors"
	"time"

	"github.com/coder/quartz"
)

// Done is what Pump returns once it has sent the stream's end: Run then
// returns nil.
//
//lint:ignore ST1012 Done is not a failure but the signal that the stream ended as it should, as io.EOF and fs.SkipDir are: an Err name would misread it.
var Done = errors.New("stream ended")

// Loop is one stream's loop. Ready, Pump and SendKeepalive are required.
type Loop struct {
	// Clock drives the keepalive ticker, created with the tags
	// "streamloop" and "keepalive". Nil: the real clock.
	Clock quartz.Clock
	// Keepalive is the silence after which SendKeepalive is called: the
	// ticker restarts whenever Pump sends something. Zero or negative: no
	// keepalives.
	Keepalive time.Duration
	// Ready returns a channel that receives, or is closed, when Pump may
	// have something new to send. It is called before each wait.
	Ready func() <-chan struct{}
	// Pump sends what the source has now, without waiting for more, and
	// reports whether it sent anything. It returns Done once it has sent
	// the stream's end, or the error that ends the stream (a failed send,
	// a source that failed, data lost), which Run returns as is.
	Pump func() (sent bool, err error)
	// SendKeepalive sends one keepalive message.
	SendKeepalive func() error
}

// Run pumps until the stream ends, waiting between pumps for Ready, the
// keepalive ticker or ctx. It returns nil when Pump returned Done, and
// otherwise why the stream ended: ctx.Err() once ctx is done (the client
// went away, the deadline passed, the server is shutting down), or the
// error of Pump or SendKeepalive.
//
// Run pumps before it first waits, and when ctx ends while the source is
// also ready it pumps once more first, so that an end that comes with the
// cancellation (a process that exits as the server shuts down) is sent
// rather than dropped at random.
func (l Loop) Run(ctx context.Context) error {
	clock := l.Clock
	if clock == nil {
		clock = quartz.NewReal()
	}
	var tick <-chan time.Time
	var ticker *quartz.Ticker
	if l.Keepalive > 0 {
		ticker = clock.NewTicker(l.Keepalive, "streamloop", "keepalive")
		defer ticker.Stop("streamloop", "keepalive")
		tick = ticker.C
	}
	for {
		sent, err := l.Pump()
		if errors.Is(err, Done) {
			return nil
		}
		if err != nil {
			return err
		}
		if sent {
			if err := ctx.Err(); err != nil {
				return err // a source that always has more must not outlive ctx
			}
			if ticker != nil {
				ticker.Reset(l.Keepalive, "streamloop", "keepalive")
			}
			continue
		}
		ready := l.Ready()
		select {
		case <-ready:
		case <-tick:
			if err := l.SendKeepalive(); err != nil {
				return err
			}
		case <-ctx.Done():
			select {
			case <-ready:
				if _, err := l.Pump(); errors.Is(err, Done) {
					return nil
				}
			default:
			}
			return ctx.Err()
		}
	}
}
