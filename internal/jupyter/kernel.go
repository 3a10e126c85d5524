package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/quartz"
	"github.com/coder/websocket"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/jupyter/jwire"
)

// writeTimeout bounds one frame write. Writes use the kernel's own context
// rather than the caller's: coder/websocket closes the connection when a
// write is cancelled midway, and the connection is shared.
const writeTimeout = 30 * time.Second

// KernelOptions configures a kernel connection.
type KernelOptions struct {
	// FlushAfterIdle keeps an execution open after both its execute_reply
	// and its iopub idle have arrived, for outputs the kernel publishes
	// after idle (Deno: about one execution in ten, its execute_result or
	// a console.log, later the more loaded the machine). A
	// kernel_info_request is sent then, and the execution ends 50 ms after
	// that request's own idle arrives: most late outputs come before it,
	// and on a loaded machine some a little after (Deno sends them from
	// another task). FlushAfterIdle bounds the wait for that idle (a kernel
	// that does not answer: the execution ends complete). Zero:
	// an execution ends as soon as both arrived, which is right for
	// ipykernel and IRkernel.
	FlushAfterIdle time.Duration
	// NudgeInterval is how often kernel_info_request is resent while
	// waiting for a restarted kernel's iopub to come back. Zero: 250 ms.
	NudgeInterval time.Duration
	// MaxQueuedBytes bounds the output queued in one Execution for its
	// reader (see Execution). Zero: 32 MiB.
	MaxQueuedBytes int
	// ReaderGrace is how long the kernel's reader waits for an Execution's
	// reader to make room in a full queue before dropping output. Other
	// requests on the kernel wait meanwhile. Zero: 1 s.
	ReaderGrace time.Duration
	// ProbeAfter is how long an execution may go without a message before
	// the kernel is probed: a kernel_info_request on shell, which a kernel
	// answers only after our request (an answer without our reply means
	// the request ended without one: ErrNoReply), and one on control,
	// which a kernel that answers control while busy (ipykernel, Deno: not
	// IRkernel) must answer within ProbeTimeout (else ErrKernelUnresponsive).
	// Code may run as long as it likes while the kernel answers. Zero: 10 s.
	ProbeAfter time.Duration
	// ProbeTimeout: see ProbeAfter. ipykernel answers control from its own
	// thread, which needs the GIL: code holding it longer (one huge C call,
	// e.g. sorting a billion items) counts as unresponsive. Zero: 2 min.
	ProbeTimeout time.Duration
	// ReplyGrace is how long an execution whose iopub went idle waits for
	// its execute_reply before it ends with ErrNoReply. Zero: 5 s.
	ReplyGrace time.Duration
	// Direct sends executions to the kernel's own sockets, not through the
	// server (direct.go), when the client knows the server's connection
	// files (ClientOptions.ConnectionDir). For ipykernel: a kernel that
	// asks for stdin without allow_stdin would wait for ever there.
	Direct bool
	// Clock drives every wait above. Zero: the real clock.
	Clock quartz.Clock
	// Logger receives debug logs. Zero: the client's logger.
	Logger *slog.Logger
}

// Kernel is a connection to one kernel's channels over the server's
// WebSocket. It is safe for concurrent use; requests are matched to their
// messages by msg_id, so several may be in flight, but a kernel runs
// executions one at a time and serialising them is the caller's job.
//
// The connection heals itself: after a dropped WebSocket the next request
// reconnects, and after a kernel restart the next request first makes sure
// iopub is subscribed again (without that, Jupyter 1.23 loses the iopub
// messages of the first request in about half the cases).
type Kernel struct {
	id      string
	client  *Client
	session string // our session id, in every header and in the URL
	opts    KernelOptions
	log     *slog.Logger

	clock  quartz.Clock
	ctx    context.Context // cancelled by Close; bounds reads and writes
	cancel context.CancelFunc

	watchers sync.WaitGroup // Execution.watch goroutines
	// controlWhileBusy is set once the kernel answered a control probe
	// while an execution was running: from then on a kernel that does not
	// answer one is unresponsive.
	controlWhileBusy atomic.Bool

	// connSem serialises (re)connecting and nudging. A channel rather than
	// a mutex so that waiting honours the caller's context.
	connSem chan struct{}
	readers sync.WaitGroup

	mu         sync.Mutex
	conn       *websocket.Conn    // guarded by mu; nil while disconnected
	pending    map[string]request // by msg_id; guarded by mu
	directIDs  map[string]bool    // the pending sent on the direct path; guarded by mu
	dp         *direct            // the direct path; nil without one
	readerDone chan struct{}      // closed when conn's reader exits; guarded by mu
	needNudge  bool               // guarded by mu
	restarts   int                // guarded by mu
	lastExit   *ExitStatus        // guarded by mu; see KernelStatus.Exit
	goneErr    error              // guarded by mu; set once the kernel is unusable
	changed    chan struct{}      // closed and replaced on any status change; guarded by mu
}

// request is an in-flight request waiting for messages whose parent is its
// msg_id. Both methods are called without Kernel.mu held.
type request interface {
	deliver(m *Message)
	fail(err error)
}

// Connect opens the kernel's channels. It waits until the kernel is ready
// (the server holds the WebSocket upgrade until the kernel answers
// kernel_info: about 0.5 s for a fresh python kernel).
func (c *Client) Connect(ctx context.Context, kernelID string, opts KernelOptions) (*Kernel, error) {
	if opts.NudgeInterval <= 0 {
		opts.NudgeInterval = 250 * time.Millisecond
	}
	if opts.MaxQueuedBytes <= 0 {
		opts.MaxQueuedBytes = 32 << 20
	}
	if opts.ReaderGrace <= 0 {
		opts.ReaderGrace = time.Second
	}
	if opts.ProbeAfter <= 0 {
		opts.ProbeAfter = 10 * time.Second
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = 2 * time.Minute
	}
	if opts.ReplyGrace <= 0 {
		opts.ReplyGrace = 5 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = quartz.NewReal()
	}
	log := opts.Logger
	if log == nil {
		log = c.log
	}
	kctx, cancel := context.WithCancel(context.Background())
	k := &Kernel{
		id:        kernelID,
		client:    c,
		session:   jwire.NewID(),
		opts:      opts,
		log:       log.With("kernel_id", kernelID),
		clock:     opts.Clock,
		ctx:       kctx,
		cancel:    cancel,
		connSem:   make(chan struct{}, 1),
		pending:   make(map[string]request),
		directIDs: make(map[string]bool),
		changed:   make(chan struct{}),
	}
	conn, err := k.dial(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	k.mu.Lock()
	k.conn = conn
	k.mu.Unlock()
	k.startReader(conn)
	k.startDirect()
	c.conns.add(k)
	return k, nil
}

// ID returns the kernel id.
func (k *Kernel) ID() string { return k.id }

// KernelStatus is a snapshot of a kernel connection's state.
type KernelStatus struct {
	// Restarts counts the kernel restarts seen since Connect (automatic
	// after a crash, or Restart). Each one lost the kernel's state.
	Restarts int
	// Exit is how the kernel process that the latest restart replaced
	// ended, when the server said so (envd's server config adds it to the
	// "restarting" status of an automatic restart: kernel_exit.py). Nil
	// when it did not, and after Restart.
	Exit *ExitStatus
	// Err is non-nil once the kernel is unusable: ErrKernelDied,
	// ErrKernelNotFound or ErrClosed.
	Err error
	// Changed is closed when Restarts or Err change.
	Changed <-chan struct{}
}

// Status returns the connection's current state. Loop on Changed to follow
// it: restarts and deaths are state, so they cannot be missed.
func (k *Kernel) Status() KernelStatus {
	k.mu.Lock()
	defer k.mu.Unlock()
	st := KernelStatus{Restarts: k.restarts, Err: k.goneErr, Changed: k.changed}
	if k.lastExit != nil {
		exit := *k.lastExit
		st.Exit = &exit
	}
	return st
}

// ExitStatus is how a kernel process ended.
type ExitStatus struct {
	Code   int         // its exit status, when Signal is 0
	Signal unix.Signal // the signal that killed it, or 0
}

// exitStatus reads a Popen returncode: the exit status, or minus the
// signal that killed the process.
func exitStatus(returncode int) *ExitStatus {
	if returncode < 0 {
		return &ExitStatus{Signal: unix.Signal(-returncode)}
	}
	return &ExitStatus{Code: returncode}
}

// String is "exit status 3" or "signal SIGKILL".
func (s ExitStatus) String() string {
	if s.Signal == 0 {
		return "exit status " + strconv.Itoa(s.Code)
	}
	if name := unix.SignalName(s.Signal); name != "" {
		return "signal " + name
	}
	return "signal " + strconv.Itoa(int(s.Signal))
}

// changedLocked wakes Status watchers.
func (k *Kernel) changedLocked() {
	close(k.changed)
	k.changed = make(chan struct{})
}

// ExecuteOptions tunes one execute_request. The zero value runs user code:
// not silent, stored in history, no stdin.
type ExecuteOptions struct {
	// Silent runs without execute_input/execute_result and without bumping
	// the execution count (streams still arrive). For internal snippets.
	Silent bool
	// StopOnError makes the kernel abort requests queued behind this one if
	// it fails.
	StopOnError bool
	// AllowStdin lets the kernel send input_request on the stdin channel;
	// answer with InputReply. IRkernel sends them even when false.
	AllowStdin bool
	// NoHistory runs code that is not Silent without storing it in the
	// history or bumping the execution count: internal code that must
	// print (IRkernel discards every output of a silent request).
	NoHistory bool
	// UserExpressions are evaluated by the kernel after the code, in its
	// namespace, and their values come back in the execute_reply (see
	// ExecuteReplyContent.UserExpressions), never on iopub: ipykernel
	// evaluates them, silent or not; most other kernels ignore them.
	UserExpressions map[string]string
}

// Execute sends code to the kernel and returns at once; read the results
// from the Execution. The Execution's lifetime is not tied to ctx, which
// only bounds reconnecting and sending.
func (k *Kernel) Execute(ctx context.Context, code string, opts ExecuteOptions) (*Execution, error) {
	msg, err := jwire.NewMessage(ChannelShell, "execute_request", k.session, map[string]any{
		"code":             code,
		"silent":           opts.Silent,
		"store_history":    !opts.Silent && !opts.NoHistory,
		"user_expressions": userExpressions(opts.UserExpressions),
		"allow_stdin":      opts.AllowStdin,
		"stop_on_error":    opts.StopOnError,
	})
	if err != nil {
		return nil, err
	}
	e := newExecution(k, msg.Header.MsgID, k.opts.FlushAfterIdle)
	e.lastMsg = k.clock.Now()
	if opts.AllowStdin || !k.dp.send(msg, e) {
		if err := k.send(ctx, msg, e); err != nil {
			return nil, err
		}
	}
	// Created here rather than in watch, so that a test's clock knows of
	// it when Execute returns.
	silence := k.clock.NewTimer(k.opts.ProbeAfter, "jupyter", tagSilence)
	k.watchers.Add(1)
	go e.watch(silence)
	return e, nil
}

func userExpressions(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// KernelInfo is the content of a kernel_info_reply.
type KernelInfo struct {
	Status                string `json:"status"`
	ProtocolVersion       string `json:"protocol_version"`
	Implementation        string `json:"implementation"`
	ImplementationVersion string `json:"implementation_version"`
	Banner                string `json:"banner"`
	LanguageInfo          struct {
		Name          string `json:"name"`
		Version       string `json:"version"`
		MimeType      string `json:"mimetype"`
		FileExtension string `json:"file_extension"`
	} `json:"language_info"`
}

// KernelInfo asks the kernel for its kernel_info_reply.
func (k *Kernel) KernelInfo(ctx context.Context) (*KernelInfo, error) {
	var info KernelInfo
	if err := k.ask(ctx, "kernel_info_request", struct{}{}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// ask sends a shell request and decodes its reply's content into out. It
// waits until ctx ends: a kernel answers shell requests in order, so a
// busy kernel answers after the code it runs (queue behind it yourself).
// The kernel's restart or death while waiting is ErrKernelRestarted or
// ErrKernelDied.
func (k *Kernel) ask(ctx context.Context, msgType string, content, out any) error {
	msg, err := jwire.NewMessage(ChannelShell, msgType, k.session, content)
	if err != nil {
		return err
	}
	w := newReplyWaiter(false)
	if err := k.send(ctx, msg, w); err != nil {
		return err
	}
	defer k.remove(msg.Header.MsgID)
	select {
	case err := <-w.result:
		if err != nil {
			return err
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	return w.reply().DecodeContent(out)
}

// CompleteReply is the content of a complete_reply. Positions count
// Unicode code points, as the request's cursor does.
type CompleteReply struct {
	Status      string   `json:"status"`
	Matches     []string `json:"matches"`
	CursorStart int      `json:"cursor_start"`
	CursorEnd   int      `json:"cursor_end"`
	Metadata    struct {
		// Types is IPython's experimental per-match detail (type and
		// signature), when the kernel gives it.
		Types []CompletionType `json:"_jupyter_types_experimental"`
	} `json:"metadata"`
	ErrorContent
}

// CompletionType is one entry of IPython's _jupyter_types_experimental.
type CompletionType struct {
	Start     int    `json:"start"`
	End       int    `json:"end"`
	Text      string `json:"text"`
	Type      string `json:"type"`
	Signature string `json:"signature"`
}

// Complete sends a complete_request for code with the cursor at
// cursorPos (in Unicode code points) and returns the reply. See ask for
// how it waits.
func (k *Kernel) Complete(ctx context.Context, code string, cursorPos int) (*CompleteReply, error) {
	var rep CompleteReply
	err := k.ask(ctx, "complete_request", map[string]any{"code": code, "cursor_pos": cursorPos}, &rep)
	if err != nil {
		return nil, err
	}
	return &rep, nil
}

// InspectReply is the content of an inspect_reply: Data is a MIME bundle
// kept raw.
type InspectReply struct {
	Status   string                     `json:"status"`
	Found    bool                       `json:"found"`
	Data     map[string]json.RawMessage `json:"data"`
	Metadata json.RawMessage            `json:"metadata"`
	ErrorContent
}

// Inspect sends an inspect_request for code with the cursor at cursorPos
// (in Unicode code points); detailLevel is 0 or 1 (more detail, e.g.
// IPython's source). See ask for how it waits.
func (k *Kernel) Inspect(ctx context.Context, code string, cursorPos, detailLevel int) (*InspectReply, error) {
	var rep InspectReply
	err := k.ask(ctx, "inspect_request", map[string]any{"code": code, "cursor_pos": cursorPos, "detail_level": detailLevel}, &rep)
	if err != nil {
		return nil, err
	}
	return &rep, nil
}

// Interrupt interrupts the running execution through the REST API.
func (k *Kernel) Interrupt(ctx context.Context) error {
	return k.client.InterruptKernel(ctx, k.id)
}

// Restart restarts the kernel (same id, fresh state) and returns once it is
// usable. Executions still in flight end with ErrKernelRestarted (ipykernel
// usually finishes them first with a KeyboardInterrupt, as the server
// interrupts before restarting).
//
// The server finishes a restart it began whatever its client does, and
// does not tell the kernel's WebSockets of it: the request is not tied to
// ctx (at most restartWait), so that a caller giving up cannot leave the
// connection taking the fresh kernel for the old one (no re-setup, iopub
// not re-subscribed). A request whose outcome is unknown (no answer)
// counts as a restart.
func (k *Kernel) Restart(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restartWait)
	_, err := k.client.RestartKernel(rctx, k.id)
	cancel()
	if err != nil {
		var herr *HTTPError
		switch {
		case errors.Is(err, ErrKernelNotFound):
			k.gone(ErrKernelNotFound)
		case !errors.As(err, &herr) && k.client.staleErr() == nil:
			k.restarted(nil) // it may have restarted
		}
		return err
	}
	k.restarted(nil)
	_, err = k.ready(ctx)
	return err
}

// restartWait bounds a kernel restart's request (see Kernel.Restart).
const restartWait = 2 * time.Minute

// InputReply answers an input_request (from the stdin channel) with value.
func (k *Kernel) InputReply(ctx context.Context, req *Message, value string) error {
	msg, err := jwire.NewMessage(ChannelStdin, "input_reply", k.session, map[string]string{"value": value})
	if err != nil {
		return err
	}
	msg.ParentHeader = req.Header
	return k.send(ctx, msg, nil)
}

// Close closes the connection; in-flight requests end with ErrClosed. It
// does not shut the kernel down (see Client.DeleteKernel).
func (k *Kernel) Close() error {
	k.mu.Lock()
	if errors.Is(k.goneErr, ErrClosed) {
		k.mu.Unlock()
		return nil
	}
	k.goneErr = ErrClosed
	conn := k.conn
	k.conn = nil
	pend := k.takePendingLocked()
	k.changedLocked()
	k.mu.Unlock()

	for _, r := range pend {
		r.fail(ErrClosed)
	}
	if conn != nil {
		// The error only says how the close handshake went; the
		// connection is closed either way.
		_ = conn.Close(websocket.StatusNormalClosure, "")
	}
	k.client.conns.remove(k)
	k.cancel()
	k.readers.Wait()
	k.watchers.Wait()
	return nil
}

// send makes sure the connection is usable, registers r (if non-nil) under
// msg's id and writes msg.
func (k *Kernel) send(ctx context.Context, msg *Message, r request) error {
	id := msg.Header.MsgID
	for {
		conn, err := k.ready(ctx)
		if err != nil {
			return err
		}
		// Register only if nothing happened since ready(): a restart or a
		// drop in between would otherwise leave r waiting for messages that
		// will never come, as it missed the failAll.
		k.mu.Lock()
		if k.conn != conn || k.needNudge || k.goneErr != nil {
			k.mu.Unlock()
			continue
		}
		if r != nil {
			k.pending[id] = r
		}
		k.mu.Unlock()

		if err := k.write(conn, msg); err != nil {
			k.remove(id)
			return err
		}
		return nil
	}
}

func (k *Kernel) write(conn *websocket.Conn, msg *Message) error {
	data, bin, err := msg.Encode()
	if err != nil {
		return err
	}
	typ := websocket.MessageText
	if bin {
		typ = websocket.MessageBinary
	}
	wctx, cancel := context.WithTimeout(k.ctx, writeTimeout)
	defer cancel()
	if err := conn.Write(wctx, typ, data); err != nil {
		k.connLost(conn, err)
		if serr := k.client.staleErr(); serr != nil {
			return serr
		}
		return fmt.Errorf("send %s: %w: %v", msg.Header.MsgType, ErrConnectionLost, err)
	}
	return nil
}

// ready returns a usable connection: it reconnects after a drop and, after
// a restart, nudges the kernel until its iopub is subscribed.
func (k *Kernel) ready(ctx context.Context) (*websocket.Conn, error) {
	select {
	case k.connSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-k.connSem }()

	if err := k.usable(); err != nil {
		return nil, err
	}
	k.mu.Lock()
	conn, nudge := k.conn, k.needNudge
	k.mu.Unlock()

	if conn == nil {
		c, err := k.dial(ctx)
		if err != nil {
			if errors.Is(err, ErrKernelNotFound) {
				k.gone(ErrKernelNotFound)
			}
			return nil, err
		}
		k.mu.Lock()
		if k.goneErr != nil { // closed while we dialled
			err := k.goneErr
			k.mu.Unlock()
			_ = c.CloseNow()
			return nil, err
		}
		// The server nudges every new connection before reading from it,
		// so a fresh connection needs no nudge of ours.
		k.conn, k.needNudge = c, false
		k.mu.Unlock()
		k.startReader(c)
		return c, nil
	}
	if nudge {
		if err := k.nudge(ctx, conn); err != nil {
			return nil, err
		}
		k.mu.Lock()
		k.needNudge = false
		k.mu.Unlock()
	}
	return conn, nil
}

// usable reports why the kernel cannot be used, if it cannot.
func (k *Kernel) usable() error {
	k.mu.Lock()
	gone := k.goneErr
	k.mu.Unlock()
	if errors.Is(gone, ErrClosed) {
		return ErrClosed
	}
	if err := k.client.staleErr(); err != nil {
		return err
	}
	return gone
}

// nudge sends kernel_info_request on conn until the kernel answers (see
// askUntilAnswered): proof that iopub is subscribed again and the restarted
// kernel is up. A restart while nudging just means the kernel is still
// coming back; any other failure is final.
func (k *Kernel) nudge(ctx context.Context, conn *websocket.Conn) error {
	register := func(id string, w *replyWaiter) error {
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.conn != conn {
			return fmt.Errorf("nudge kernel: %w", ErrConnectionLost)
		}
		k.pending[id] = w
		return nil
	}
	send := func(m *Message) error { return k.write(conn, m) }
	restarting := func(err error) bool { return errors.Is(err, ErrKernelRestarted) }
	return k.askUntilAnswered(ctx, nil, restarting, register, send)
}

// askUntilAnswered sends kernel_info_request every NudgeInterval until one
// of them has both its reply and an iopub message back. register records
// a request under its id in k.pending (or says why it cannot be sent);
// send writes it. A failed request for which retry says so is outlived
// (the next one is sent as planned); stop ends the wait with its error.
// The requests are removed from k.pending when it returns.
func (k *Kernel) askUntilAnswered(ctx context.Context, stop <-chan error, retry func(error) bool,
	register func(id string, w *replyWaiter) error, send func(*Message) error) error {
	result := make(chan error, 1)
	var ids []string
	defer func() {
		for _, id := range ids {
			k.remove(id)
		}
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case err := <-result:
			if err == nil || retry == nil || !retry(err) {
				return err
			}
		case err := <-stop:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			msg, err := jwire.NewMessage(ChannelShell, "kernel_info_request", k.session, struct{}{})
			if err != nil {
				return err
			}
			if err := register(msg.Header.MsgID, &replyWaiter{wantIOPub: true, result: result}); err != nil {
				return err
			}
			ids = append(ids, msg.Header.MsgID)
			if err := send(msg); err != nil {
				return err
			}
			t.Reset(k.opts.NudgeInterval)
		}
	}
}

func (k *Kernel) dial(ctx context.Context) (*websocket.Conn, error) {
	u := *k.client.base
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	u.Path = kernelPath(k.id) + "/channels"
	u.RawQuery = "session_id=" + k.session
	conn, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{
		HTTPClient:      k.client.http,
		HTTPHeader:      http.Header{"Authorization": {"token " + k.client.token}},
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		if serr := k.client.staleErr(); serr != nil {
			return nil, serr
		}
		if resp != nil && resp.StatusCode == http.StatusNotFound {
			return nil, fmt.Errorf("connect kernel: %w", ErrKernelNotFound)
		}
		return nil, fmt.Errorf("jupyter: connect kernel %s: %w", k.id, err)
	}
	// A 50 MB print or a 9 MB plotly figure arrives as a single frame;
	// jwire.ReadFrame bounds what is kept of one, so the WebSocket need not.
	conn.SetReadLimit(-1)
	return conn, nil
}

func (k *Kernel) startReader(conn *websocket.Conn) {
	done := make(chan struct{})
	k.mu.Lock()
	if k.conn == conn {
		k.readerDone = done
	}
	k.mu.Unlock()
	k.readers.Add(1)
	go k.readLoop(conn, done)
}

// readLoop is the connection's only reader. It blocks on a consumer only
// for a bounded time (see Execution): delivering a message appends it to
// the request's bounded queue.
func (k *Kernel) readLoop(conn *websocket.Conn, done chan struct{}) {
	defer k.readers.Done()
	defer close(done)
	emit := func(m *Message) { k.dispatch(conn, m) }
	for {
		typ, r, err := conn.Reader(k.ctx)
		if err == nil {
			err = jwire.ReadFrame(typ == websocket.MessageBinary, r, k.log, emit)
		}
		if err != nil {
			k.connLost(conn, err)
			return
		}
	}
}

func (k *Kernel) dispatch(conn *websocket.Conn, m *Message) {
	if m.Channel == ChannelIOPub {
		switch m.Type() {
		case "status":
			// The server sends restarting/dead with an empty parent when the
			// kernel process died; they concern every request.
			var st StatusContent
			if m.DecodeContent(&st) == nil {
				switch st.ExecutionState {
				case "restarting":
					// envd's server config says how the process ended.
					var ex struct {
						Status *int `json:"envd_exit_status"`
					}
					var exit *ExitStatus
					if m.DecodeContent(&ex) == nil && ex.Status != nil {
						exit = exitStatus(*ex.Status)
					}
					if exit != nil {
						k.log.Warn("kernel died and is restarting", "exit", exit.String())
					} else {
						k.log.Warn("kernel died and is restarting")
					}
					k.restarted(exit)
					return
				case "dead":
					k.log.Warn("kernel died and will not be restarted")
					k.gone(ErrKernelDied)
					_ = conn.CloseNow() // the server leaves it open, but it is useless
					return
				}
			}
		case "shutdown_reply":
			// A shutdown we did not ask for (DELETE through REST, or the
			// server stopping): the kernel is going away.
			var sr struct {
				Restart bool `json:"restart"`
			}
			if m.DecodeContent(&sr) == nil && !sr.Restart && !k.isPending(m.ParentHeader.MsgID) {
				k.gone(ErrKernelDied)
				return
			}
		}
	}
	k.mu.Lock()
	r := k.pending[m.ParentHeader.MsgID]
	if k.directIDs[m.ParentHeader.MsgID] {
		r = nil // the server's copy of what the direct path delivers
	}
	k.mu.Unlock()
	if r != nil {
		r.deliver(m)
	}
	// Anything else (the server's nudges, other sessions' traffic) is
	// ignored on purpose.
}

func (k *Kernel) isPending(id string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.pending[id]
	return ok
}

// restarted records a kernel restart (after its process ended as exit
// says, if known): in-flight requests can never complete and the next
// request must nudge first.
func (k *Kernel) restarted(exit *ExitStatus) {
	k.mu.Lock()
	k.restarts++
	k.lastExit = exit
	k.needNudge = true
	pend := k.takePendingLocked()
	k.changedLocked()
	k.mu.Unlock()
	k.dp.reset()
	for _, r := range pend {
		r.fail(ErrKernelRestarted)
	}
}

// gone records that the kernel is unusable for good.
func (k *Kernel) gone(err error) {
	k.mu.Lock()
	if k.goneErr != nil {
		k.mu.Unlock()
		return
	}
	k.goneErr = err
	pend := k.takePendingLocked()
	k.changedLocked()
	k.mu.Unlock()
	for _, r := range pend {
		r.fail(err)
	}
}

// connLost handles a dead connection: requests sent on it are failed, and
// the next request reconnects.
func (k *Kernel) connLost(conn *websocket.Conn, cause error) {
	k.mu.Lock()
	if k.conn != conn {
		k.mu.Unlock()
		return // already replaced, or closed by Close
	}
	k.conn = nil
	pend := k.takePendingLocked()
	k.mu.Unlock()
	_ = conn.CloseNow()

	err := k.client.staleErr()
	if err == nil {
		err = fmt.Errorf("%w: %v", ErrConnectionLost, cause)
		if len(pend) > 0 {
			k.log.Warn("kernel connection lost", "error", cause, "in_flight", len(pend))
		}
	}
	for _, r := range pend {
		r.fail(err)
	}
}

func (k *Kernel) takePendingLocked() []request {
	pend := make([]request, 0, len(k.pending))
	for id, r := range k.pending {
		pend = append(pend, r)
		delete(k.pending, id)
	}
	clear(k.directIDs)
	return pend
}

func (k *Kernel) remove(id string) {
	k.mu.Lock()
	delete(k.pending, id)
	delete(k.directIDs, id)
	k.mu.Unlock()
}

// kernelConns are a client's open kernel connections by kernel id, so that
// a kernel deleted through the client ends its connections at once: the
// server leaves their WebSockets open, and the kernel's own shutdown_reply
// does not come when the server had to kill it (a kernel slow to stop on a
// loaded machine).
type kernelConns struct {
	mu   sync.Mutex
	byID map[string]map[*Kernel]struct{} // guarded by mu
}

func (kc *kernelConns) add(k *Kernel) {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	if kc.byID == nil {
		kc.byID = map[string]map[*Kernel]struct{}{}
	}
	if kc.byID[k.id] == nil {
		kc.byID[k.id] = map[*Kernel]struct{}{}
	}
	kc.byID[k.id][k] = struct{}{}
}

func (kc *kernelConns) remove(k *Kernel) {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	delete(kc.byID[k.id], k)
	if len(kc.byID[k.id]) == 0 {
		delete(kc.byID, k.id)
	}
}

// deleted ends the connections to kernel id: it is gone.
func (kc *kernelConns) deleted(id string) {
	kc.mu.Lock()
	ks := make([]*Kernel, 0, len(kc.byID[id]))
	for k := range kc.byID[id] {
		ks = append(ks, k)
	}
	kc.mu.Unlock()
	for _, k := range ks {
		k.gone(ErrKernelDied)
	}
}
