package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"time"
)

// CheckDebugAddr accepts Config.DebugAddr: "" (off) or IP:PORT with a
// loopback IP (127.0.0.0/8, ::1). Anything else, a wildcard or a host
// name included, is refused: the profiles are served without a token.
func CheckDebugAddr(addr string) error {
	if addr == "" {
		return nil
	}
	const want = "want a loopback IP:PORT such as 127.0.0.1:6060 (the profiles need no token: never a wildcard, an external address or a host name)"
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s: %v", want, err)
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.Unmap().IsLoopback() {
		return errors.New(want)
	}
	return nil
}

// debugServer serves net/http/pprof on Config.DebugAddr; nil when off.
type debugServer struct {
	srv  *http.Server
	done chan struct{}
}

// listenDebug starts the debug server on addr (checked by CheckDebugAddr),
// or returns nil when addr is "". Its routes are net/http/pprof's under
// /debug/pprof/ (the index, the named profiles such as
// goroutine?debug=1, profile, trace, symbol), without cmdline: envd's
// command line may hold the access token.
func listenDebug(addr string, log *slog.Logger) (*debugServer, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-debug-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	d := &debugServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, done: make(chan struct{})}
	log.Warn("serving pprof for debugging, without a token, to whoever reaches this loopback address", "debug_addr", ln.Addr().String())
	go func() {
		defer close(d.done)
		if err := d.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("debug server failed", "error", err)
		}
	}()
	return d, nil
}

// close stops the debug server (a CPU profile or trace in progress is cut)
// and waits for it.
func (d *debugServer) close() {
	if d == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if d.srv.Shutdown(ctx) != nil {
		d.srv.Close()
	}
	<-d.done
}
