package process

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/envd-dev/envd/internal/errkind"
)

// Kinds of domain errors: every error of this package that a caller can act
// on is an *Error of one of these kinds (errors.Is(err, ErrNotFound)), and
// the adapter maps each kind to one wire code (procconnect's toConnectErr).
var (
	ErrNotFound     = errors.New("process not found")
	ErrInvalid      = errors.New("invalid request")
	ErrWrongState   = errors.New("process cannot do that")
	ErrUnauthorized = errors.New("not allowed")
	ErrPermission   = errors.New("permission denied")
	ErrUnavailable  = errors.New("unavailable")
	ErrExhausted    = errors.New("out of resources")
)

// Error is a domain error: a kind, the message a user reads, and the cause
// (envd's one idiom, internal/errkind).
type Error = errkind.Error

// errorf is an *Error of kind with a formatted message; a %w in format
// becomes its cause.
func errorf(kind error, format string, args ...any) error {
	return errkind.Errorf(kind, format, args...)
}

// spawnError classifies a failure to start a program: what the request
// named (a missing or unrunnable program, a cwd it may not enter) is invalid,
// a system out of processes, memory or files is exhausted, anything else is
// internal.
func spawnError(err error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	switch {
	case errors.Is(err, syscall.ENOMEM), errors.Is(err, syscall.EAGAIN),
		errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return &Error{Kind: ErrExhausted, Msg: fmt.Sprintf("%s: %v: the sandbox is out of resources; try again when fewer processes run", msg, err), Cause: err}
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM),
		errors.Is(err, syscall.ENOEXEC), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR),
		errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.E2BIG),
		errors.Is(err, syscall.ETXTBSY):
		return &Error{Kind: ErrInvalid, Msg: fmt.Sprintf("%s: %v", msg, err), Cause: err}
	default:
		return &Error{Kind: errInternal, Msg: fmt.Sprintf("%s: %v", msg, err), Cause: err}
	}
}

// errInternal is the kind of failures that are envd's, not the request's.
var errInternal = errors.New("internal error")
