package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envd-dev/envd/backoff"
	"github.com/envd-dev/envd/internal/jupyter/jwire"
)

// The direct path. An execute_request of a kernel connected with
// KernelOptions.Direct goes to the kernel's own shell socket, and its
// messages come back from the kernel's shell and iopub sockets, not through
// the Jupyter server's WebSocket: the server (Python) adds its own delay to
// every message it relays, and to every request it hands on (bench/ has the
// runCode row against the kernel's own round trip). The WebSocket stays: it carries everything
// else (completions, kernel_info, stdin, the server's restarting and dead
// notices), and executions while the direct path is down.
//
// envd reads the kernel's connection file (the server writes it in its
// runtime directory; only loopback addresses are used) and opens a ZeroMQ
// DEALER to shell and a SUB to iopub (jwire.Dial). After each connect one
// kernel_info_request must come back on both before executions use the
// path: proof that iopub is subscribed. The kernel's iopub goes to every
// subscriber, so the server relays copies of a direct execution's messages
// too; the WebSocket's reader drops those. A message is read as the
// WebSocket's are, within the same bounds (jwire.ReadMessage): a big one is
// cut or chunked, never held whole. What one message costs envd, in frames
// and in the bytes kept of them, is bounded as it is read; a peer that goes
// over it loses its connection (jwire.ErrMessageBound).
//
// A direct execution ends as the kernel reports it. If its code kills the
// server, the kernel's reply can come before envd learns of the death (the
// server's relay could not): the run then ends as the kernel said, the
// kernel dies with the server moments later, and the first run after envd
// learned of it is told the server restarted. No execution goes direct once
// the server is known to be gone.
//
// When the path breaks (the kernel died or restarted: its sockets close),
// its executions are left to the server's restarting or dead notice, which
// ends them as before; one still waiting after directGrace ends with
// ErrConnectionLost. The path then reconnects, with a backoff, to the
// ports of the connection file, which a restarted kernel keeps.

// directGrace is how long an execution of a broken direct path waits for
// the server's notice of a restart or death.
const directGrace = 5 * time.Second

type direct struct {
	k    *Kernel
	file string // the kernel's connection file
	kick chan struct{}
	sent atomic.Uint64 // requests sent on the path

	mu    sync.Mutex
	shell *jwire.Conn // guarded by mu; set while the path is up and confirmed
	key   []byte      // the message signing key; guarded by mu
}

// connectionInfo is what the direct path uses of a connection file.
type connectionInfo struct {
	Transport       string `json:"transport"`
	IP              string `json:"ip"`
	ShellPort       int    `json:"shell_port"`
	IOPubPort       int    `json:"iopub_port"`
	Key             string `json:"key"`
	SignatureScheme string `json:"signature_scheme"`
}

func readConnectionInfo(file string) (*connectionInfo, error) {
	b, err := readBounded(file)
	if err != nil {
		return nil, err
	}
	var ci connectionInfo
	if err := json.Unmarshal(b, &ci); err != nil {
		return nil, fmt.Errorf("connection file %s: %w", file, err)
	}
	switch {
	case ci.Transport != "tcp":
		return nil, fmt.Errorf("connection file %s: transport %q, not tcp", file, ci.Transport)
	case net.ParseIP(ci.IP) == nil || !net.ParseIP(ci.IP).IsLoopback():
		return nil, fmt.Errorf("connection file %s: address %q is not loopback", file, ci.IP)
	case ci.Key != "" && ci.SignatureScheme != "hmac-sha256":
		return nil, fmt.Errorf("connection file %s: signature scheme %q", file, ci.SignatureScheme)
	case ci.ShellPort <= 0 || ci.ShellPort > 65535 || ci.IOPubPort <= 0 || ci.IOPubPort > 65535:
		return nil, fmt.Errorf("connection file %s: bad ports", file)
	}
	return &ci, nil
}

// startDirect starts k's direct path if the kernel allows one.
func (k *Kernel) startDirect() {
	if !k.opts.Direct || k.client.connDir == "" {
		return
	}
	k.dp = &direct{k: k, file: filepath.Join(k.client.connDir, "kernel-"+k.id+".json"), kick: make(chan struct{}, 1)}
	k.readers.Add(1)
	go k.dp.run()
}

// directBackoff spaces the direct path's reconnections; a path that stayed
// up for directStableRun starts the schedule over.
var directBackoff = backoff.Policy{Floor: 20 * time.Millisecond, Cap: 2 * time.Second}

const directStableRun = 10 * time.Second

// run keeps the path up until the kernel connection closes.
func (d *direct) run() {
	defer d.k.readers.Done()
	retry := backoff.New(directBackoff, d.k.clock, "jupyter", "direct")
	for d.k.ctx.Err() == nil {
		began := d.k.clock.Now()
		err := d.connect()
		if d.k.ctx.Err() != nil {
			return
		}
		if errors.Is(err, jwire.ErrMessageBound) {
			// No kernel does this, but code in one (the sandbox user's)
			// can: logged once per connection it cost.
			d.k.log.Warn("kernel's direct path down: the peer sent a message over its bound", "error", err)
		} else {
			d.k.log.Debug("kernel's direct path down", "error", err)
		}
		if d.k.clock.Since(began) > directStableRun {
			retry.Reset()
		}
		if retry.Wait(d.k.ctx) != nil {
			return
		}
	}
}

// reset breaks the path: the kernel restarted.
func (d *direct) reset() {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.shell = nil
	d.mu.Unlock()
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// connect opens, confirms and serves the path once; it returns when the
// path breaks.
func (d *direct) connect() error {
	ci, err := readConnectionInfo(d.file)
	if err != nil {
		return err
	}
	select { // a kick before this connect is moot
	case <-d.kick:
	default:
	}
	ctx, cancel := context.WithTimeout(d.k.ctx, 5*time.Second)
	defer cancel()
	shell, err := jwire.Dial(ctx, net.JoinHostPort(ci.IP, strconv.Itoa(ci.ShellPort)), "DEALER")
	if err != nil {
		return err
	}
	iopub, err := jwire.Dial(ctx, net.JoinHostPort(ci.IP, strconv.Itoa(ci.IOPubPort)), "SUB")
	if err != nil {
		shell.Close()
		return err
	}
	down := make(chan error, 2)
	var readers sync.WaitGroup
	defer func() { // closing the sockets ends their readers
		shell.Close()
		iopub.Close()
		readers.Wait()
	}()
	if err := iopub.Subscribe(); err != nil {
		return err
	}
	for _, r := range []struct {
		z  *jwire.Conn
		ch string
	}{{shell, ChannelShell}, {iopub, ChannelIOPub}} {
		readers.Go(func() { down <- d.read(r.z, r.ch) })
	}
	key := []byte(ci.Key)
	if err := d.confirm(ctx, shell, key, down); err != nil {
		return err
	}
	d.mu.Lock()
	d.shell, d.key = shell, key
	d.mu.Unlock()
	d.k.log.Debug("kernel's direct path up")
	select {
	case err = <-down:
	case <-d.kick:
		err = errors.New("the kernel restarted")
	case <-d.k.ctx.Done():
		err = d.k.ctx.Err()
	}
	d.mu.Lock()
	if d.shell == shell {
		d.shell = nil
	}
	d.mu.Unlock()
	d.k.directBroken()
	return err
}

// confirm asks the kernel on the new path until it answers on both of its
// sockets (see Kernel.askUntilAnswered), or the path breaks.
func (d *direct) confirm(ctx context.Context, shell *jwire.Conn, key []byte, down <-chan error) error {
	k := d.k
	register := func(id string, w *replyWaiter) error {
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.goneErr != nil {
			return k.goneErr
		}
		k.pending[id] = w
		k.directIDs[id] = true
		return nil
	}
	send := func(m *Message) error { return shell.Send(m.ZMQFrames(key)) }
	if err := k.askUntilAnswered(ctx, down, nil, register, send); err != nil {
		return fmt.Errorf("confirm the direct path: %w", err)
	}
	return nil
}

// send sends msg on the direct path and registers r under its id. It
// reports false, having sent nothing, when the path is not up (the caller
// then sends through the WebSocket).
func (d *direct) send(msg *Message, r request) bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	shell, key := d.shell, d.key
	d.mu.Unlock()
	if shell == nil || d.k.client.staleErr() != nil {
		return false // the WebSocket's path says why the server is gone
	}
	k := d.k
	id := msg.Header.MsgID
	k.mu.Lock()
	if k.goneErr != nil || k.needNudge {
		k.mu.Unlock()
		return false
	}
	k.pending[id] = r
	k.directIDs[id] = true
	k.mu.Unlock()
	if err := shell.Send(msg.ZMQFrames(key)); err != nil {
		k.remove(id)
		return false
	}
	d.sent.Add(1)
	return true
}

// directBroken leaves the direct path's requests in flight to the server's
// notice of a restart or death, for directGrace; then ends those still
// waiting.
func (k *Kernel) directBroken() {
	k.mu.Lock()
	var ids []string
	for id := range k.directIDs {
		ids = append(ids, id)
	}
	k.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	k.clock.AfterFunc(directGrace, func() {
		var pend []request
		k.mu.Lock()
		for _, id := range ids {
			if r, ok := k.pending[id]; ok && k.directIDs[id] {
				pend = append(pend, r)
				delete(k.pending, id)
				delete(k.directIDs, id)
			}
		}
		k.mu.Unlock()
		for _, r := range pend {
			r.fail(fmt.Errorf("%w: the kernel's direct connection broke", ErrConnectionLost))
		}
	}, "jupyter", "direct")
}

// read reads messages from one socket of the path until it fails.
func (d *direct) read(z *jwire.Conn, channel string) error {
	emit := func(m *Message) {
		m.Channel = channel
		d.k.dispatchDirect(m)
	}
	for {
		if err := jwire.ReadMessage(z, channel, d.k.log, emit); err != nil {
			return err
		}
	}
}

// dispatchDirect hands a message of the direct path to its request, if
// that request was sent on the direct path.
func (k *Kernel) dispatchDirect(m *Message) {
	k.mu.Lock()
	r := k.pending[m.ParentHeader.MsgID]
	ok := k.directIDs[m.ParentHeader.MsgID]
	k.mu.Unlock()
	if r != nil && ok {
		r.deliver(m)
	}
}
