package interpreter

import (
	"errors"

	"github.com/envd-dev/envd/internal/errkind"
)

// Kinds of failure. Every error the engine returns matches one of them
// with errors.Is, or none for a failure of Jupyter or of envd itself; its
// message is for the user. Each adapter maps the kinds to its codes in one
// function (codehttp, codeconnect).
var (
	// ErrContextNotFound: no context has the id.
	ErrContextNotFound = errors.New("context not found")
	// ErrExecutionNotFound: no execution has the id (any more).
	ErrExecutionNotFound = errors.New("execution not found")
	// ErrUnsupportedLanguage: no installed kernel runs the language; the
	// message lists the available ones.
	ErrUnsupportedLanguage = errors.New("unsupported language")
	// ErrContextAndLanguage: a request named both a context and a language.
	ErrContextAndLanguage = errors.New("only one of context_id or language can be provided")
	// ErrBadCwd: a context's working directory does not exist, is not a
	// directory, or the kernels' user cannot enter it.
	ErrBadCwd = errors.New("bad working directory")
	// ErrBadEnv: a per-execution env var cannot be set in the context's
	// language (e.g. a name that is not a bash identifier).
	ErrBadEnv = errors.New("bad environment variable")
	// ErrOutOfRange: a seq no reader of the execution can have reached.
	ErrOutOfRange = errors.New("out of range")
	// ErrNotReady: the caller's wait ended before its context was ready
	// (Jupyter not up yet, a kernel still starting); the message names the
	// phase of the context's creation it was in.
	ErrNotReady = errors.New("code execution is not ready")
	// ErrBadQuery: an introspection request is malformed (empty code, a
	// cursor out of the code, a bad detail level).
	ErrBadQuery = errors.New("bad introspection request")
	// ErrBusy: an introspection query's wait for a context running code
	// ended before its turn came (or the kernel did not answer in time).
	ErrBusy = errors.New("context busy")
	// ErrKernelUnavailable: the context has no usable kernel for an
	// introspection query (not started yet, gone, or it died during the
	// query); the message says which.
	ErrKernelUnavailable = errors.New("kernel unavailable")
	// ErrNotSupported: envd cannot answer this query in the context's
	// language.
	ErrNotSupported = errors.New("not supported")
	// ErrClosed: the engine is shutting down.
	ErrClosed = errors.New("code execution engine stopped")
)

// newErr is an error of one of the kinds above (internal/errkind), with a
// message for the user and the underlying cause.
func newErr(kind, cause error, format string, args ...any) error {
	return errkind.New(kind, cause, format, args...)
}

// errClosed is the engine's answer once it is shutting down.
var errClosed = newErr(ErrClosed, nil, "envd is shutting down: code execution has stopped")
