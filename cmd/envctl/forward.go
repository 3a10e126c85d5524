package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/envd-dev/envd/relay"
)

type forwardOpts struct {
	address string
}

const forwardUsage = "[--address ADDRESS] [LOCAL:]REMOTE..."

var forwardCommand = &command{
	noFiles:      true,
	name:         "forward",
	args:         forwardUsage,
	summary:      "forward local TCP ports to ports inside the sandbox through envd, as kubectl port-forward (LOCAL:REMOTE, or PORT for the same on both sides, or :REMOTE for any free local port), until interrupted",
	interspersed: true,
	flags: func(fs *flag.FlagSet) any {
		o := &forwardOpts{}
		fs.StringVar(&o.address, "address", "127.0.0.1", "the local `ADDRESS` to listen on (0.0.0.0 shares the ports with your network)")
		return o
	},
	run: runForward,
}

// forwardPair is one LOCAL:REMOTE argument.
type forwardPair struct {
	local, remote int // local 0: any free port
}

func parseForwards(args []string) ([]forwardPair, error) {
	if len(args) == 0 {
		return nil, usageError{"forward: give at least one port pair (usage: envctl forward " + forwardUsage + ")"}
	}
	port := func(arg, s string, zeroOK bool) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 65535 || (n == 0 && !zeroOK) {
			return 0, usageError{fmt.Sprintf("forward: %q: %q is not a port (1-65535)", arg, s)}
		}
		return n, nil
	}
	var out []forwardPair
	for _, arg := range args {
		local, remote, pair := strings.Cut(arg, ":")
		var p forwardPair
		var err error
		if !pair {
			if p.remote, err = port(arg, local, false); err != nil {
				return nil, err
			}
			p.local = p.remote
		} else {
			if local != "" {
				if p.local, err = port(arg, local, true); err != nil {
					return nil, err
				}
			}
			if p.remote, err = port(arg, remote, false); err != nil {
				return nil, err
			}
		}
		out = append(out, p)
	}
	return out, nil
}

func runForward(ctx context.Context, e *env, opts any, args []string) error {
	o := opts.(*forwardOpts)
	pairs, err := parseForwards(args)
	if err != nil {
		return err
	}
	if net.ParseIP(o.address) == nil && o.address != "localhost" {
		return usageError{fmt.Sprintf("forward: --address %q: give an IP address", o.address)}
	}
	// Every local port is open before the first is served: a port taken
	// fails the whole command, and nothing was forwarded.
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for _, p := range pairs {
		ln, err := net.Listen("tcp", net.JoinHostPort(o.address, strconv.Itoa(p.local)))
		if err != nil {
			return fmt.Errorf("forward: listen on %s port %d: %w", o.address, p.local, err)
		}
		lns = append(lns, ln)
	}
	// envd must answer, and take the token, before anything is said to be
	// forwarded: /health answers anyone, so a call that needs the token
	// follows it.
	if err := e.c.Health(ctx); err != nil {
		return err
	}
	if _, err := e.c.Envs(ctx); err != nil {
		if exitCode(err) == exitRefused {
			return exitError{code: exitRefused, msg: "forward: " + tokenRefused(e, err)}
		}
		return err
	}
	var wg sync.WaitGroup
	for i, p := range pairs {
		fmt.Fprintf(e.stdout, "Forwarding from %s -> %d\n", lns[i].Addr(), p.remote)
		wg.Go(func() { serveForward(ctx, e, lns[i], p.remote) })
	}
	<-ctx.Done()
	for _, ln := range lns {
		ln.Close()
	}
	wg.Wait()
	return nil
}

// serveForward tunnels each connection ln accepts to remote, until ln is
// closed; then it closes the connections still open and waits for them.
func serveForward(ctx context.Context, e *env, ln net.Listener, remote int) {
	var wg sync.WaitGroup
	defer wg.Wait()
	conns := map[net.Conn]struct{}{}
	var mu sync.Mutex
	defer func() {
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				fmt.Fprintf(e.stderr, "forward: accept on %s: %v\n", ln.Addr(), err)
			}
			return
		}
		mu.Lock()
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Go(func() {
			defer func() {
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
				c.Close()
			}()
			dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			up, err := e.c.DialPort(dctx, remote)
			cancel()
			if err != nil {
				fmt.Fprintf(e.stderr, "forward: %s -> %d: %v\n", c.RemoteAddr(), remote, err)
				return
			}
			mu.Lock()
			conns[up] = struct{}{}
			mu.Unlock()
			defer func() {
				mu.Lock()
				delete(conns, up)
				mu.Unlock()
			}()
			relay.Both(c, up)
		})
	}
}
