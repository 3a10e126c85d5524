package process

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"connectrpc.com/connect"
)

// TestErrorCodes: each kind of domain error has one wire code, and a failure
// to start a program is invalid_argument only when the request is at fault:
// a system out of resources is resource_exhausted, anything else internal.
func TestErrorCodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want connect.Code
	}{
		{"not found", errorf(ErrNotFound, "process with pid 7 not found"), connect.CodeNotFound},
		{"invalid", errorf(ErrInvalid, "cmd is empty"), connect.CodeInvalidArgument},
		{"wrong state", errorf(ErrWrongState, "no terminal"), connect.CodeFailedPrecondition},
		{"unauthorized", errorf(ErrUnauthorized, "no user"), connect.CodeUnauthenticated},
		{"permission", errorf(ErrPermission, "cwd '/root/x': user 'user' may not enter '/root': permission denied"), connect.CodePermissionDenied},
		{"shutting down", errorf(ErrUnavailable, "envd is shutting down"), connect.CodeUnavailable},
		{"wrapped kind", fmt.Errorf("context: %w", errorf(ErrNotFound, "gone")), connect.CodeNotFound},
		{"fork ENOMEM", spawnError(syscall.ENOMEM, "start x"), connect.CodeResourceExhausted},
		{"fork EAGAIN", spawnError(syscall.EAGAIN, "start x"), connect.CodeResourceExhausted},
		{"pipe EMFILE", spawnError(syscall.EMFILE, "create stdout pipe"), connect.CodeResourceExhausted},
		{"pty ENFILE", spawnError(syscall.ENFILE, "open terminal"), connect.CodeResourceExhausted},
		{"exec ENOENT", spawnError(syscall.ENOENT, "start x"), connect.CodeInvalidArgument},
		{"exec EACCES", spawnError(syscall.EACCES, "start x"), connect.CodeInvalidArgument},
		{"exec ENOEXEC", spawnError(syscall.ENOEXEC, "start x"), connect.CodeInvalidArgument},
		{"pty EIO", spawnError(syscall.EIO, "open terminal"), connect.CodeInternal},
		{"fork EINVAL", spawnError(syscall.EINVAL, "start x"), connect.CodeInternal},
		{"plain error", errors.New("boom"), connect.CodeInternal},
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
}
