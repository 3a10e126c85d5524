package process

import (
	"errors"
	"syscall"
	"testing"
)

// TestSpawnErrorKinds: a failure to start a program is invalid only when
// the request is at fault: a system out of resources is exhausted, anything
// else internal. The message names what failed and why, and the cause stays
// matchable. (procconnect's TestErrorCodes maps each kind to its one wire
// code.)
func TestSpawnErrorKinds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cause syscall.Errno
		what  string
		want  error
		msg   string
	}{
		{"fork ENOMEM", syscall.ENOMEM, "start x", ErrExhausted, "start x: cannot allocate memory: the sandbox is out of resources; try again when fewer processes run"},
		{"fork EAGAIN", syscall.EAGAIN, "start x", ErrExhausted, "start x: resource temporarily unavailable: the sandbox is out of resources; try again when fewer processes run"},
		{"pipe EMFILE", syscall.EMFILE, "create stdout pipe", ErrExhausted, "create stdout pipe: too many open files: the sandbox is out of resources; try again when fewer processes run"},
		{"pty ENFILE", syscall.ENFILE, "open terminal", ErrExhausted, "open terminal: too many open files in system: the sandbox is out of resources; try again when fewer processes run"},
		{"exec ENOENT", syscall.ENOENT, "start x", ErrInvalid, "start x: no such file or directory"},
		{"exec EACCES", syscall.EACCES, "start x", ErrInvalid, "start x: permission denied"},
		{"exec ENOEXEC", syscall.ENOEXEC, "start x", ErrInvalid, "start x: exec format error"},
		{"pty EIO", syscall.EIO, "open terminal", errInternal, "open terminal: input/output error"},
		{"fork EINVAL", syscall.EINVAL, "start x", errInternal, "start x: invalid argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := spawnError(tt.cause, "%s", tt.what)
			var de *Error
			if !errors.As(err, &de) || de.Kind != tt.want {
				t.Fatalf("spawnError(%v) = %#v, want kind %v", tt.cause, err, tt.want)
			}
			if err.Error() != tt.msg {
				t.Errorf("message %q, want %q", err.Error(), tt.msg)
			}
			if !errors.Is(err, tt.cause) {
				t.Errorf("%v does not match its cause %v", err, tt.cause)
			}
			if tt.want == errInternal {
				for _, k := range []error{ErrNotFound, ErrInvalid, ErrWrongState, ErrUnauthorized, ErrPermission, ErrUnavailable, ErrExhausted} {
					if errors.Is(err, k) {
						t.Errorf("an internal failure is of the kind %v", k)
					}
				}
			}
		})
	}
}
