// Package rpcerr turns a domain's errors into Connect errors. Each Connect
// adapter lists its domain's error kinds with their codes in one table
// (Kinds); what every adapter maps alike (a context's end, and an error of
// no known kind) is mapped here, once.
package rpcerr

import (
	"context"
	"errors"

	"connectrpc.com/connect"
)

// Kind maps errors that are Err (errors.Is) to Code.
type Kind struct {
	Err  error
	Code connect.Code
}

// Kinds is an adapter's table, tried in order.
type Kinds []Kind

// Code is err's code: that of the first kind err is; else
// DeadlineExceeded or Canceled for a context's end; else Internal, with
// known false (the adapter may log such an error: it is a bug or a failure
// nobody named).
func (ks Kinds) Code(err error) (code connect.Code, known bool) {
	for _, k := range ks {
		if errors.Is(err, k.Err) {
			return k.Code, true
		}
	}
	if code, ok := ContextCode(err); ok {
		return code, true
	}
	return connect.CodeInternal, false
}

// Error is err as a *connect.Error with its code (Code) and its message as
// is; nil for nil (an untyped nil: an adapter returns it as its error).
func (ks Kinds) Error(err error) error {
	if err == nil {
		return nil
	}
	code, _ := ks.Code(err)
	return connect.NewError(code, err)
}

// ContextCode is the code of a context's end: DeadlineExceeded for
// context.DeadlineExceeded, Canceled for context.Canceled; ok false for any
// other error.
func ContextCode(err error) (code connect.Code, ok bool) {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded, true
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled, true
	}
	return 0, false
}
