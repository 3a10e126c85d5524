package fsconnect

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"github.com/envd-dev/envd/internal/errkind"
	"github.com/envd-dev/envd/internal/filesystem"
	"github.com/envd-dev/envd/internal/identity"
)

// TestToConnectErr: each kind of the domain's errors has its Connect code,
// the message is the error's own, and nil stays nil.
func TestToConnectErr(t *testing.T) {
	t.Parallel()
	kind := func(k error) error { return errkind.New(k, nil, "the message of %v", k) }
	tests := []struct {
		name string
		err  error
		code connect.Code
	}{
		{"no user", errNoUser, connect.CodeUnauthenticated},
		{"not found", kind(filesystem.ErrNotFound), connect.CodeNotFound},
		{"exists", kind(filesystem.ErrExists), connect.CodeAlreadyExists},
		{"invalid", kind(filesystem.ErrInvalid), connect.CodeInvalidArgument},
		{"bad path", fmt.Errorf("%w: %q: cannot expand another user's home directory", identity.ErrBadPath, "~root"), connect.CodeInvalidArgument},
		{"permission", kind(filesystem.ErrPermission), connect.CodePermissionDenied},
		{"loop", kind(filesystem.ErrLoop), connect.CodeFailedPrecondition},
		{"no space", kind(filesystem.ErrNoSpace), connect.CodeResourceExhausted},
		{"limit", kind(filesystem.ErrLimit), connect.CodeResourceExhausted},
		{"lagging", kind(filesystem.ErrLagging), connect.CodeDataLoss},
		{"closed", kind(filesystem.ErrClosed), connect.CodeUnavailable},
		{"deadline", fmt.Errorf("watch: %w", context.DeadlineExceeded), connect.CodeDeadlineExceeded},
		{"canceled", context.Canceled, connect.CodeCanceled},
		{"envd's own failure", errors.New("something broke"), connect.CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := toConnectErr(tt.err)
			var ce *connect.Error
			if !errors.As(got, &ce) {
				t.Fatalf("%v is not a *connect.Error", got)
			}
			if ce.Code() != tt.code {
				t.Errorf("code %v, want %v", ce.Code(), tt.code)
			}
			if ce.Message() != tt.err.Error() {
				t.Errorf("message %q, want %q", ce.Message(), tt.err.Error())
			}
			if !errors.Is(got, tt.err) {
				t.Errorf("%v does not wrap %v", got, tt.err)
			}
		})
	}
	if err := toConnectErr(nil); err != nil {
		t.Errorf("toConnectErr(nil) = %v", err)
	}
}
