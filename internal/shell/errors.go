package shell

import (
	"errors"

	"github.com/envd-dev/envd/internal/errkind"
)

// Kinds of domain errors: every error of this package that a caller can act
// on is an *Error of one of these kinds (errors.Is(err, ErrNotFound)), and
// the adapter maps each kind to one wire code (shellconnect's kinds table).
var (
	// ErrNotFound: no such session (or one the requester may not see), or
	// no such command.
	ErrNotFound = errors.New("session not found")
	// ErrInvalid: the request itself is wrong (an empty command, a
	// negative timeout, a cwd that does not exist).
	ErrInvalid = errors.New("invalid request")
	// ErrEnded: the session has ended, or the request does not fit what it
	// does now (no command running, stdin not asked for).
	ErrEnded = errors.New("session cannot do that")
	// ErrUnauthorized: no user to act as.
	ErrUnauthorized = errors.New("not allowed")
	// ErrPermission: the requester may not act as the user it names.
	ErrPermission = errors.New("permission denied")
	// ErrExhausted: too many sessions, or too many commands waiting.
	ErrExhausted = errors.New("out of resources")
	// ErrUnavailable: envd is shutting down or being upgraded.
	ErrUnavailable = errors.New("unavailable")
)

// Error is a domain error: a kind, the message a user reads, and the cause
// (envd's one idiom, internal/errkind).
type Error = errkind.Error

// errorf is an *Error of kind with a formatted message; a %w in format
// becomes its cause.
func errorf(kind error, format string, args ...any) error {
	return errkind.Errorf(kind, format, args...)
}
