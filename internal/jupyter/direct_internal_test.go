package jupyter

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/quartz"

	"github.com/envd-dev/envd/internal/jupyter/jwire"
	"github.com/envd-dev/envd/internal/testutil"
)

// zmtpPeer listens on 127.0.0.1 as a fake kernel socket of type sockType.
// Each connection is shaken hands with, then handed to serve, which runs
// in its own goroutine; the listener and the connections are closed, and
// serve waited for, at cleanup.
func zmtpPeer(t *testing.T, sockType string, serve func(c net.Conn, z *jwire.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return testutil.Serve(t, ln, func(c net.Conn) {
		z, err := jwire.Handshake(c, sockType)
		if err != nil {
			return
		}
		serve(c, z)
	})
}

// shortFrame appends a ZMTP frame of at most 255 bytes to b, with MORE if
// more frames of its message follow.
func shortFrame(b []byte, more bool, body []byte) []byte {
	var flags byte
	if more {
		flags = 0x01
	}
	return append(append(b, flags, byte(len(body))), body...)
}

// writeFlood sends the start of a Jupyter message on iopub (topic,
// delimiter, signature, header, parent, metadata, content), then n empty
// buffer frames (rounded up to whole chunks of chunk empty frames) and a
// last empty frame that ends the message. It stops at the first failed
// write: envd hung up.
func writeFlood(c net.Conn, chunk, n int) {
	m := &Message{
		Header:  Header{MsgID: "m", MsgType: "status", Session: "k", Username: "k", Version: "5.3"},
		Content: json.RawMessage(`{"execution_state":"idle"}`),
	}
	var head []byte
	for _, f := range append([][]byte{[]byte("status")}, m.ZMQFrames(nil)...) {
		head = shortFrame(head, true, f)
	}
	if _, err := c.Write(head); err != nil {
		return
	}
	empties := bytes.Repeat(shortFrame(nil, true, nil), chunk)
	for sent := 0; sent < n; sent += chunk {
		if _, err := c.Write(empties); err != nil {
			return
		}
	}
	_, _ = c.Write(shortFrame(nil, false, nil))
}

// warnings records the log records of level Warn and above.
type warnings struct {
	mu   sync.Mutex
	msgs []string // guarded by mu
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w *warnings) WithGroup(string) slog.Handler                { return w }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	s := r.Message
	r.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
	w.mu.Lock()
	w.msgs = append(w.msgs, s)
	w.mu.Unlock()
	return nil
}

func (w *warnings) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}

// TestDirectPathReconnectsAfterFlood: a fake kernel on 127.0.0.1 answers
// the direct path's kernel_info, then floods iopub with a message of five
// million empty frames. The path gives up the connection (one warning
// naming the bound) and connects again, to a kernel that behaves.
func TestDirectPathReconnectsAfterFlood(t *testing.T) {
	t.Parallel()
	statuses := make(chan Header, 16) // request headers, for iopub's status idle
	flood := make(chan struct{})
	var shellConns, iopubConns atomic.Int32
	shellAddr := zmtpPeer(t, "ROUTER", func(_ net.Conn, z *jwire.Conn) {
		shellConns.Add(1)
		for {
			var req *Message
			if err := jwire.ReadMessage(z, ChannelShell, nil, func(m *Message) { req = m }); err != nil {
				return
			}
			if req == nil {
				t.Error("shell got a message that is not a Jupyter message")
				return
			}
			reply := &Message{
				Header:       Header{MsgID: "r", MsgType: "kernel_info_reply", Session: "k", Username: "k", Version: "5.3"},
				ParentHeader: req.Header,
				Content:      json.RawMessage(`{"status":"ok"}`),
			}
			if z.Send(reply.ZMQFrames(nil)) != nil {
				return
			}
			select {
			case statuses <- req.Header:
			case <-t.Context().Done():
				return
			}
		}
	})
	iopubAddr := zmtpPeer(t, "PUB", func(c net.Conn, z *jwire.Conn) {
		n := iopubConns.Add(1)
		// The subscription: a message, but not a Jupyter one.
		if err := jwire.ReadMessage(z, ChannelIOPub, nil, func(*Message) {}); err != nil {
			return
		}
		var floodNow <-chan struct{}
		if n == 1 {
			floodNow = flood
		}
		for {
			select {
			case <-t.Context().Done():
				return
			case <-floodNow:
				writeFlood(c, 1<<15, 5<<20)
				return
			case req := <-statuses:
				status := &Message{
					Header:       Header{MsgID: "s", MsgType: "status", Session: "k", Username: "k", Version: "5.3"},
					ParentHeader: req,
					Content:      json.RawMessage(`{"execution_state":"idle"}`),
				}
				if z.Send(append([][]byte{[]byte("status")}, status.ZMQFrames(nil)...)) != nil {
					return
				}
			}
		}
	})
	dir := t.TempDir()
	port := func(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }
	testutil.WriteFile(t, dir+"/kernel-k1.json", `{"transport":"tcp","ip":"127.0.0.1","shell_port":`+port(shellAddr)+
		`,"iopub_port":`+port(iopubAddr)+`,"key":"secret","signature_scheme":"hmac-sha256"}`, 0o600)

	warns := &warnings{}
	ctx, cancel := context.WithCancel(context.Background())
	k := &Kernel{
		id: "k1", client: &Client{connDir: dir}, log: slog.New(warns), clock: quartz.NewReal(), ctx: ctx, cancel: cancel,
		opts:    KernelOptions{Direct: true, NudgeInterval: 50 * time.Millisecond},
		pending: make(map[string]request), directIDs: make(map[string]bool), changed: make(chan struct{}),
	}
	k.startDirect()
	t.Cleanup(func() { cancel(); k.readers.Wait() }) // before the peers close
	up := func() bool { up, _ := DirectForTest(k); return up }
	if !testutil.PollFor(20*time.Second, up) {
		t.Fatal("the direct path never came up")
	}
	close(flood)
	if !testutil.PollFor(20*time.Second, func() bool { return shellConns.Load() == 2 && up() }) {
		t.Fatalf("the direct path did not come back: %d connections, up %v", shellConns.Load(), up())
	}
	got := warns.list()
	bound := regexp.MustCompile(`over its bound.*more than \d+ frames`)
	if len(got) != 1 || !bound.MatchString(got[0]) {
		t.Errorf("warnings %q, want one naming the bound", got)
	}
}
