// Package errkind is envd's one idiom for domain errors: an error of a kind
// (a sentinel the domain declares, matched with errors.Is), a message the
// user reads, and the underlying cause (matched with errors.Is/As through
// Unwrap). Each domain declares its kinds; each adapter maps the kinds to
// its wire codes in one function.
package errkind

import (
	"errors"
	"fmt"
)

// Error is a domain error.
type Error struct {
	Kind  error // the domain's sentinel
	Msg   string
	Cause error // may be nil
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Cause }

// Is matches the kind.
func (e *Error) Is(target error) bool { return target == e.Kind }

// New returns an error of kind with a formatted message and cause.
func New(kind, cause error, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...), Cause: cause}
}

// Errorf returns an error of kind with a formatted message; the error a %w
// in format wraps becomes its cause.
func Errorf(kind error, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &Error{Kind: kind, Msg: err.Error(), Cause: errors.Unwrap(err)}
}
