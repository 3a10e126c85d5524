package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os/exec"
	"strings"

	"connectrpc.com/connect"
)

// Error is what every method of Client returns when envd refused a call or
// could not be reached. It carries the Connect code of the failure (for the
// HTTP API, the code of the HTTP status) and the server's message.
//
// Compare it with the sentinels: errors.Is(err, client.ErrNotFound).
type Error struct {
	// Op is what the client was doing: "stat /tmp/x", "start process".
	Op string
	// Code classifies the failure. A call that never reached envd has
	// connect.CodeUnavailable.
	Code connect.Code
	// Status is the HTTP status of an HTTP API call (/files, /init, ...);
	// 0 for RPCs and for calls that got no answer.
	Status int
	// Message is the server's message, or what went wrong on the way.
	Message string
	// Err is the underlying error: a *connect.Error, a *DialError, ...
	Err error

	// about says what the failure concerns, for the standard library's
	// sentinels (see Is): a file, or the command of a process.
	about subject
}

// subject is what an Error concerns, beyond its code.
type subject uint8

const (
	aboutOther   subject = iota
	aboutFile            // a file operation: fs.ErrNotExist and the like match
	aboutCommand         // starting a command: exec.ErrNotFound matches a missing one
)

// Error is one line, each part said once: what was done, the kind of
// failure, and the server's message ("stat /x: not found: no such file or
// directory"). The kind is left out when the message says it in its own
// words ("send SIGTERM to process 9: process with pid 9 not found"), and so
// is what the message repeats of Op: Op itself, or the subject Op names
// last ("/x: ..." after "stat /x").
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	b.WriteString(": ")
	msg := e.Message
	labelled := e.Code != connect.CodeUnavailable || e.Status != 0
	code := strings.ReplaceAll(e.Code.String(), "_", " ")
	if labelled {
		msg = strings.TrimPrefix(msg, code+": ")
		if msg == code {
			msg = ""
		}
	}
	msg = strings.TrimPrefix(msg, e.Op+": ")
	if head, rest, ok := strings.Cut(msg, ": "); ok && head != "" && rest != "" && strings.HasSuffix(e.Op, " "+head) {
		msg = rest
	}
	status := ""
	if e.Status != 0 {
		status = fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	switch {
	case !labelled:
		b.WriteString(msg)
	case msg != "" && strings.Contains(strings.ToLower(msg), code):
		b.WriteString(msg + status)
	case msg == "":
		b.WriteString(code + status)
	default:
		b.WriteString(code + status + ": " + msg)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrNotFound) and the other sentinels match by
// code, and the standard library's where one means the same:
// context.DeadlineExceeded and context.Canceled; for a file operation
// fs.ErrNotExist, fs.ErrExist and fs.ErrPermission; for starting a command
// that does not exist, exec.ErrNotFound.
func (e *Error) Is(target error) bool {
	if s, ok := target.(*sentinel); ok {
		return s.code == e.Code
	}
	switch target {
	case context.DeadlineExceeded:
		return e.Code == connect.CodeDeadlineExceeded
	case context.Canceled:
		return e.Code == connect.CodeCanceled
	case fs.ErrNotExist:
		return e.about == aboutFile && e.Code == connect.CodeNotFound
	case fs.ErrExist:
		return e.about == aboutFile && e.Code == connect.CodeAlreadyExists
	case fs.ErrPermission:
		return e.about == aboutFile && e.Code == connect.CodePermissionDenied
	case exec.ErrNotFound:
		return e.about == aboutCommand && e.Code == connect.CodeInvalidArgument &&
			(strings.Contains(e.Message, "executable not found") || strings.Contains(e.Message, "no such file or directory"))
	}
	return false
}

// concerning marks err, if it is an *Error, as concerning s.
func concerning(s subject, err error) error {
	if e, ok := errors.AsType[*Error](err); ok {
		e.about = s
	}
	return err
}

// sentinel is an error that stands for a Connect code.
type sentinel struct {
	code connect.Code
	text string
}

func (s *sentinel) Error() string { return s.text }

// Sentinels for errors.Is: each matches every *Error of its code.
var (
	ErrNotFound           error = &sentinel{connect.CodeNotFound, "not found"}
	ErrAlreadyExists      error = &sentinel{connect.CodeAlreadyExists, "already exists"}
	ErrInvalidArgument    error = &sentinel{connect.CodeInvalidArgument, "invalid argument"}
	ErrFailedPrecondition error = &sentinel{connect.CodeFailedPrecondition, "failed precondition"}
	ErrUnauthenticated    error = &sentinel{connect.CodeUnauthenticated, "unauthenticated"}
	ErrPermissionDenied   error = &sentinel{connect.CodePermissionDenied, "permission denied"}
	ErrResourceExhausted  error = &sentinel{connect.CodeResourceExhausted, "resource exhausted"}
	ErrDeadlineExceeded   error = &sentinel{connect.CodeDeadlineExceeded, "deadline exceeded"}
	ErrCanceled           error = &sentinel{connect.CodeCanceled, "canceled"}
	ErrUnavailable        error = &sentinel{connect.CodeUnavailable, "unavailable"}
	ErrUnimplemented      error = &sentinel{connect.CodeUnimplemented, "unimplemented"}
	ErrDataLoss           error = &sentinel{connect.CodeDataLoss, "data loss"}
	ErrInternal           error = &sentinel{connect.CodeInternal, "internal"}
)

// CodeOf returns err's Connect code: connect.CodeUnknown if err is not from
// this package (or from connect-go).
func CodeOf(err error) connect.Code {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Code
	}
	return connect.CodeOf(err)
}

// rpcError turns an error of a generated Connect client into an *Error.
func rpcError(op string, err error) error {
	if err == nil {
		return nil
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	out := &Error{Op: op, Code: connect.CodeOf(err), Err: err}
	if d, ok := errors.AsType[*DialError](err); ok {
		out.Code = connect.CodeUnavailable
		out.Message = d.Error()
		return out
	}
	switch {
	case errors.Is(err, context.Canceled):
		out.Code, out.Message = connect.CodeCanceled, "canceled"
		return out
	case errors.Is(err, context.DeadlineExceeded):
		out.Code, out.Message = connect.CodeDeadlineExceeded, "deadline exceeded"
		return out
	}
	if ce, ok := errors.AsType[*connect.Error](err); ok {
		out.Message = ce.Message()
		if out.Message == "" {
			out.Message = ce.Error()
		}
		switch {
		case ce.Code() == connect.CodeUnavailable && out.Message != "" && !strings.Contains(out.Message, "envd"):
			out.Message = "envd unavailable: " + out.Message
		case ce.Code() == connect.CodeUnimplemented && strings.HasPrefix(out.Message, "HTTP status 404"):
			// No such route: an envd without this service.
			out.Message = "this envd does not serve the call (" + out.Message + ")"
		}
	} else {
		out.Message = err.Error()
	}
	return out
}

// httpError reads an HTTP API error response: {"code":<status>,"message":...}
// or plain text. It closes the body.
func httpError(op string, resp *http.Response) error {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body struct {
		Message string `json:"message"`
	}
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &body) == nil && body.Message != "" {
		msg = body.Message
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	return &Error{Op: op, Code: codeOfStatus(resp.StatusCode), Status: resp.StatusCode, Message: msg}
}

// transportError is the *Error of an HTTP API call that got no response.
func transportError(op string, err error) error {
	if e, ok := errors.AsType[*DialError](err); ok {
		return &Error{Op: op, Code: connect.CodeUnavailable, Message: e.Error(), Err: err}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return &Error{Op: op, Code: connect.CodeCanceled, Message: "canceled", Err: err}
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Op: op, Code: connect.CodeDeadlineExceeded, Message: "deadline exceeded", Err: err}
	}
	return &Error{Op: op, Code: connect.CodeUnavailable, Message: "envd unavailable: " + err.Error(), Err: err}
}

// codeOfStatus maps an HTTP API status to the Connect code of its kind.
func codeOfStatus(status int) connect.Code {
	switch status {
	case http.StatusBadRequest, http.StatusNotAcceptable, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
		return connect.CodeInvalidArgument
	case http.StatusUnauthorized:
		return connect.CodeUnauthenticated
	case http.StatusForbidden:
		return connect.CodePermissionDenied
	case http.StatusNotFound:
		return connect.CodeNotFound
	case http.StatusConflict:
		return connect.CodeAlreadyExists
	case http.StatusTooManyRequests, http.StatusInsufficientStorage:
		return connect.CodeResourceExhausted
	case http.StatusNotImplemented:
		return connect.CodeUnimplemented
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return connect.CodeUnavailable
	case http.StatusMethodNotAllowed:
		return connect.CodeUnimplemented
	}
	if status >= 500 {
		return connect.CodeInternal
	}
	return connect.CodeUnknown
}
