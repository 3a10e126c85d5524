package server

import "fmt"

// StatusError is a failure of an HTTP handler's step with the status to
// answer it with: the one type the plain-HTTP handlers (/files, /upgrade)
// pass such a failure up in.
type StatusError struct {
	Status int
	Msg    string
}

func (e *StatusError) Error() string { return e.Msg }

// Errorf returns a StatusError of status with a formatted message.
func Errorf(status int, format string, args ...any) *StatusError {
	return &StatusError{Status: status, Msg: fmt.Sprintf(format, args...)}
}
