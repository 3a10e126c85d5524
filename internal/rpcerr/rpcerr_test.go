package rpcerr_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"github.com/envd-dev/envd/internal/rpcerr"
)

var (
	errMissing = errors.New("missing")
	errBad     = errors.New("bad")
)

func TestKinds(t *testing.T) {
	t.Parallel()
	kinds := rpcerr.Kinds{{errMissing, connect.CodeNotFound}, {errBad, connect.CodeInvalidArgument}}
	for _, tc := range []struct {
		err   error
		code  connect.Code
		known bool
	}{
		{fmt.Errorf("file a: %w", errMissing), connect.CodeNotFound, true},
		{fmt.Errorf("field b: %w", errBad), connect.CodeInvalidArgument, true},
		// The table comes first: a kind that wraps a context's end keeps
		// its own code.
		{fmt.Errorf("%w: %w", errMissing, context.Canceled), connect.CodeNotFound, true},
		{fmt.Errorf("waiting: %w", context.DeadlineExceeded), connect.CodeDeadlineExceeded, true},
		{fmt.Errorf("waiting: %w", context.Canceled), connect.CodeCanceled, true},
		{errors.New("disk on fire"), connect.CodeInternal, false},
	} {
		code, known := kinds.Code(tc.err)
		if code != tc.code || known != tc.known {
			t.Errorf("Code(%v) = %v, %v; want %v, %v", tc.err, code, known, tc.code, tc.known)
		}
		var ce *connect.Error
		if !errors.As(kinds.Error(tc.err), &ce) {
			t.Fatalf("Error(%v) is no *connect.Error", tc.err)
		}
		if ce.Code() != tc.code || ce.Message() != tc.err.Error() || !errors.Is(ce, tc.err) {
			t.Errorf("Error(%v) = %v (code %v), want code %v, the message as is, and the cause", tc.err, ce, ce.Code(), tc.code)
		}
	}
	if kinds.Error(nil) != nil {
		t.Error("Error(nil) is not nil")
	}
}

func TestContextCode(t *testing.T) {
	t.Parallel()
	if _, ok := rpcerr.ContextCode(errMissing); ok {
		t.Error("an error that is no context's end has a context code")
	}
	if code, ok := rpcerr.ContextCode(context.DeadlineExceeded); !ok || code != connect.CodeDeadlineExceeded {
		t.Errorf("ContextCode(DeadlineExceeded) = %v, %v", code, ok)
	}
}
