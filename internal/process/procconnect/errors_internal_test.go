package procconnect

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"connectrpc.com/connect"

	"github.com/envd-dev/envd/internal/errkind"
	"github.com/envd-dev/envd/internal/outbuf"
	"github.com/envd-dev/envd/internal/process"
)

// TestErrorCodes: each kind of domain error has one wire code, the
// adapter's own refusals included; an error of a kind with no code here (a
// failure that is envd's, not the request's) or of no kind is internal; the
// wire message is the error's own.
func TestErrorCodes(t *testing.T) {
	t.Parallel()
	errOther := errors.New("another domain's kind")
	tests := []struct {
		name string
		err  error
		want connect.Code
	}{
		{"not found", errkind.Errorf(process.ErrNotFound, "process with pid 7 not found"), connect.CodeNotFound},
		{"invalid", errkind.Errorf(process.ErrInvalid, "cmd is empty"), connect.CodeInvalidArgument},
		{"wrong state", errkind.Errorf(process.ErrWrongState, "no terminal"), connect.CodeFailedPrecondition},
		{"unauthorized", errkind.Errorf(process.ErrUnauthorized, "no user"), connect.CodeUnauthenticated},
		{"permission", errkind.Errorf(process.ErrPermission, "cwd '/root/x': user 'user' may not enter '/root': permission denied"), connect.CodePermissionDenied},
		{"shutting down", errkind.Errorf(process.ErrUnavailable, "envd is shutting down"), connect.CodeUnavailable},
		{"exhausted", errkind.New(process.ErrExhausted, syscall.ENOMEM, "start x: cannot allocate memory: the sandbox is out of resources"), connect.CodeResourceExhausted},
		{"wrapped kind", fmt.Errorf("context: %w", errkind.Errorf(process.ErrNotFound, "gone")), connect.CodeNotFound},
		{"kind with no code", errkind.New(errors.New("internal error"), syscall.EIO, "open terminal: input/output error"), connect.CodeInternal},
		{"plain error", errors.New("boom"), connect.CodeInternal},
		{"deadline", fmt.Errorf("write: %w", context.DeadlineExceeded), connect.CodeDeadlineExceeded},
		{"canceled", context.Canceled, connect.CodeCanceled},
		{"reader behind", fmt.Errorf("process 7: this reader fell behind: %w", &outbuf.LostError{From: 0, To: 10}), connect.CodeDataLoss},
		{"no user", errNoUser, connect.CodeUnauthenticated},
		{"refused", invalid("terminal size %dx%d is too large", 70000, 24), connect.CodeInvalidArgument},
		// The adapter's kind wins over a cause's.
		{"refused with a cause of a kind", invalid("%w", errkind.Errorf(errOther, "cannot expand another user's home directory")), connect.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ce := new(connect.Error)
			if !errors.As(toConnectErr(tt.err), &ce) || ce.Code() != tt.want {
				t.Fatalf("toConnectErr(%v) = %v, want code %v", tt.err, toConnectErr(tt.err), tt.want)
			}
			if ce.Message() != tt.err.Error() {
				t.Errorf("wire message %q, want the domain's %q", ce.Message(), tt.err.Error())
			}
		})
	}
	if toConnectErr(nil) != nil {
		t.Error("toConnectErr(nil) is not nil")
	}
}
