package interpreter

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// EventKind says what an Event carries.
type EventKind uint8

// Event kinds. An execution's events begin with exactly one EventStarted
// and end with exactly one EventEnd.
const (
	// EventExecutionCount: the kernel accepted the code (ExecutionCount),
	// after something else happened first (else EventStarted carries it).
	EventExecutionCount EventKind = iota + 1
	// EventStdout and EventStderr: output text (Text, Timestamp). Chunks
	// are the kernel's, except that very large ones are split.
	EventStdout
	EventStderr
	// EventResult: a rich result (Result).
	EventResult
	// EventError: the code raised (the first error of an execution only),
	// or envd ended the execution abnormally (Error).
	EventError
	// EventEnd: the execution is over (End). Always last.
	EventEnd
	// EventLost: this reader fell so far behind that Lost bytes of events
	// were dropped. Only produced by Reader.Read, never stored.
	EventLost
	// EventStarted: always event 0 (Started), stored together with the
	// execution's first other event: when the kernel accepted the code it
	// stands in place of that EventExecutionCount. A queued execution has
	// none until its turn comes.
	EventStarted
	// EventNotice: envd tells the code's author something that happened
	// to the context before this execution (Notice): its kernel was
	// replaced or restarted behind its back, packages it had imported
	// changed. Comes before the code's own output.
	EventNotice
)

func (k EventKind) String() string {
	switch k {
	case EventExecutionCount:
		return "execution_count"
	case EventStdout:
		return "stdout"
	case EventStderr:
		return "stderr"
	case EventResult:
		return "result"
	case EventError:
		return "error"
	case EventEnd:
		return "end"
	case EventLost:
		return "lost"
	case EventStarted:
		return "started"
	case EventNotice:
		return "notice"
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event is one thing an execution produced.
type Event struct {
	// Seq numbers an execution's stored events from 0 without gaps (an
	// EventLost has the Seq of the first event after the loss).
	Seq            uint64
	Kind           EventKind
	ExecutionCount int         // EventExecutionCount
	Text           string      // EventStdout, EventStderr
	Timestamp      string      // EventStdout, EventStderr: see FormatTimestamp
	Result         *Result     // EventResult
	Error          *ErrorValue // EventError
	End            *End        // EventEnd
	Lost           int64       // EventLost: bytes of stored events dropped
	Started        *Started    // EventStarted
	Notice         *Notice     // EventNotice
}

// NoticeKind says what a Notice is about.
type NoticeKind uint8

// Notice kinds.
const (
	// NoticeKernelRestarted: the context's kernel restarted (it died and
	// Jupyter restarted it) since its last execution, and no execution
	// was told: its state is gone.
	NoticeKernelRestarted NoticeKind = iota + 1
	// NoticeKernelReplaced: the context got a new kernel (the Jupyter
	// server restarted, or the old kernel could not be restarted): its
	// state is gone.
	NoticeKernelReplaced
	// NoticePackagesChanged: packages the kernel had already imported
	// were installed, upgraded or removed; it still runs the old code
	// until the context is restarted.
	NoticePackagesChanged
)

func (k NoticeKind) String() string {
	switch k {
	case NoticeKernelRestarted:
		return "kernel_restarted"
	case NoticeKernelReplaced:
		return "kernel_replaced"
	case NoticePackagesChanged:
		return "packages_changed"
	}
	return "NoticeKind(" + strconv.Itoa(int(k)) + ")"
}

// Notice is something that happened to a context between executions,
// told to the next one.
type Notice struct {
	Kind NoticeKind `json:"kind"`
	Text string     `json:"text"` // a sentence for a person
	At   time.Time  `json:"at"`   // when it happened
}

// Started is the first event of an execution.
type Started struct {
	ExecutionID string `json:"execution_id"`
	ContextID   string `json:"context_id"`
	// ExecutionCount is the kernel's execution count when Counted: the
	// kernel accepted the code before anything else happened. Else it is 0,
	// and an EventExecutionCount may still follow.
	ExecutionCount int  `json:"execution_count"`
	Counted        bool `json:"counted"`
}

// ErrorValue is an error raised by the code, or made up by envd.
type ErrorValue struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"` // the kernel's frames joined with ""
}

// EndReason says how an execution ended (the reasons of the native API).
type EndReason uint8

// End reasons.
const (
	// EndOK: the code ran to completion.
	EndOK EndReason = iota + 1
	// EndError: the code raised (see the error event), or envd could not
	// run it (Jupyter unavailable, the kernel connection lost, the context
	// could not be set up; see Message).
	EndError
	// EndInterrupted: Interrupt was called (the HTTP client went away), or
	// envd is shutting down.
	EndInterrupted
	// EndTimedOut: the execution's own timeout passed and it was stopped.
	EndTimedOut
	// EndKernelDied: the kernel died under it, or the code exited it, and
	// it was restarted with fresh state; the context is usable again.
	EndKernelDied
	// EndContextRestarted: the context was restarted or removed while it
	// ran.
	EndContextRestarted
	// EndServerRestarted: the Jupyter server went away; the context gets a
	// new kernel on its next use.
	EndServerRestarted
)

func (r EndReason) String() string {
	switch r {
	case EndOK:
		return "ok"
	case EndError:
		return "error"
	case EndInterrupted:
		return "interrupted"
	case EndTimedOut:
		return "timed_out"
	case EndKernelDied:
		return "kernel_died"
	case EndContextRestarted:
		return "context_restarted"
	case EndServerRestarted:
		return "server_restarted"
	}
	return "EndReason(" + strconv.Itoa(int(r)) + ")"
}

// End is the last event of an execution.
type End struct {
	Reason  EndReason `json:"reason"`
	Message string    `json:"message,omitempty"` // what happened, when not EndOK or EndError
}

// Synthetic error names and values, as E2B's server emits them (docs/wire.md,
// "POST /execute") where one applies, and envd's own otherwise.
const (
	errNameRestarting = "ContextRestarting"
	errNameAborted    = "ExecutionAborted"
	errValueAborted   = "Execution was aborted"
	errNameWebSocket  = "WebSocketError"
	errNameUnexpected = "UnexpectedEndOfExecution"
	errNameTimeout    = "TimeoutError"
	errNameSetup      = "ContextSetupError"
	// errNameExited: the code exited its kernel (exit(), quit()). E2B's
	// server has no name for it: it ends such an execution as if nothing
	// happened.
	errNameExited = "KernelExited"
)

// FormatTimestamp renders a Jupyter header date the way E2B's server does
// (pydantic datetime, then isoformat): RFC 3339 with a numeric offset
// ("+00:00", never "Z") and microseconds, the fraction left out when it is
// zero. An unparsable date gives now.
func FormatTimestamp(date string) string {
	t, err := time.Parse(time.RFC3339Nano, date)
	if err != nil {
		t = time.Now().UTC()
	}
	t = t.Truncate(time.Microsecond)
	if t.Nanosecond() == 0 {
		return t.Format("2006-01-02T15:04:05-07:00")
	}
	return t.Format("2006-01-02T15:04:05.000000-07:00")
}

// Records in an execution's outbuf.Log hold one event each:
//
//	'E' | kind | 0 | 0 | u32be payload length | u64be seq | payload
//
// The header lets a reader that lost data recognise the one record the log
// may have cut at its start (a cut record is shorter than its header says).
const recordHeader = 16

func encodeEvent(ev Event) []byte {
	var payload []byte
	switch ev.Kind {
	case EventExecutionCount:
		payload = strconv.AppendInt(nil, int64(ev.ExecutionCount), 10)
	case EventStdout, EventStderr:
		payload = make([]byte, 0, len(ev.Timestamp)+1+len(ev.Text))
		payload = append(payload, ev.Timestamp...)
		payload = append(payload, '\n')
		payload = append(payload, ev.Text...)
	case EventResult:
		payload = mustJSON(ev.Result)
	case EventError:
		payload = mustJSON(ev.Error)
	case EventEnd:
		payload = mustJSON(ev.End)
	case EventStarted:
		payload = mustJSON(ev.Started)
	case EventNotice:
		payload = mustJSON(ev.Notice)
	default:
		panic(fmt.Sprintf("interpreter: cannot store %v", ev.Kind))
	}
	rec := make([]byte, recordHeader, recordHeader+len(payload))
	rec[0], rec[1] = 'E', byte(ev.Kind)
	binary.BigEndian.PutUint32(rec[4:], uint32(len(payload)))
	binary.BigEndian.PutUint64(rec[8:], ev.Seq)
	return append(rec, payload...)
}

// decodeEvent decodes a record; ok is false for a cut or foreign record.
func decodeEvent(rec []byte) (ev Event, ok bool) {
	if len(rec) < recordHeader || rec[0] != 'E' || rec[2] != 0 || rec[3] != 0 ||
		uint64(len(rec)-recordHeader) != uint64(binary.BigEndian.Uint32(rec[4:])) {
		return Event{}, false
	}
	ev.Kind = EventKind(rec[1])
	ev.Seq = binary.BigEndian.Uint64(rec[8:])
	payload := rec[recordHeader:]
	switch ev.Kind {
	case EventExecutionCount:
		n, err := strconv.Atoi(string(payload))
		if err != nil {
			return Event{}, false
		}
		ev.ExecutionCount = n
	case EventStdout, EventStderr:
		for i, c := range payload {
			if c == '\n' {
				ev.Timestamp, ev.Text = string(payload[:i]), string(payload[i+1:])
				return ev, true
			}
		}
		return Event{}, false
	case EventResult:
		ev.Result = new(Result)
		if json.Unmarshal(payload, ev.Result) != nil {
			return Event{}, false
		}
	case EventError:
		ev.Error = new(ErrorValue)
		if json.Unmarshal(payload, ev.Error) != nil {
			return Event{}, false
		}
	case EventEnd:
		ev.End = new(End)
		if json.Unmarshal(payload, ev.End) != nil {
			return Event{}, false
		}
	case EventStarted:
		ev.Started = new(Started)
		if json.Unmarshal(payload, ev.Started) != nil {
			return Event{}, false
		}
	case EventNotice:
		ev.Notice = new(Notice)
		if json.Unmarshal(payload, ev.Notice) != nil {
			return Event{}, false
		}
	default:
		return Event{}, false
	}
	return ev, true
}

func mustJSON(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // keep raw MIME values as the kernel sent them
	if err := enc.Encode(v); err != nil {
		// Only raw MIME values could fail, and they were validated when the
		// kernel message was decoded.
		panic(fmt.Sprintf("interpreter: encode event: %v", err))
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
