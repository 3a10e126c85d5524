package server

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DefaultKeepalive is the keepalive interval of a stream whose client sent
// no Keepalive-Ping-Interval header, as upstream.
const DefaultKeepalive = 90 * time.Second

// The range a client's Keepalive-Ping-Interval is clamped to: a stream sends
// a keepalive at most once a second, and at least once an hour.
const (
	MinKeepalive = time.Second
	MaxKeepalive = time.Hour
)

// KeepaliveInterval reads the Keepalive-Ping-Interval header (seconds) the
// SDK sends on long streams (process output, directory watches): how long a
// stream may stay quiet before it sends a keepalive event. A value outside
// [MinKeepalive, MaxKeepalive] is clamped to it, however large (so it never
// overflows a time.Duration); a missing, zero, negative or unparsable value
// gives DefaultKeepalive. It never fails, so a stream can read it at any
// point, after it started a process as before.
func KeepaliveInterval(h http.Header) time.Duration {
	n, err := strconv.ParseInt(strings.TrimSpace(h.Get("Keepalive-Ping-Interval")), 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange) && n > 0:
		return MaxKeepalive // more seconds than an int64 holds
	case err != nil || n <= 0:
		return DefaultKeepalive
	case n > int64(MaxKeepalive/time.Second):
		return MaxKeepalive
	}
	return max(time.Duration(n)*time.Second, MinKeepalive)
}
