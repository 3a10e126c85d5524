package server

import (
	"net/http"
	"strconv"
	"time"
)

// DefaultKeepalive is the keepalive interval of a stream whose client sent
// no Keepalive-Ping-Interval header, as upstream.
const DefaultKeepalive = 90 * time.Second

// KeepaliveInterval reads the Keepalive-Ping-Interval header (seconds) the
// SDK sends on long streams (process output, directory watches): how long a
// stream may stay quiet before it sends a keepalive event.
func KeepaliveInterval(h http.Header) time.Duration {
	if n, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval")); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return DefaultKeepalive
}
