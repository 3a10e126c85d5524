// Package interpreter is the code-execution engine: it runs code
// statefully in Jupyter kernels. Its two adapters live in their own
// packages and use only its exported API: codehttp serves E2B's
// code-interpreter HTTP API (as the @e2b/code-interpreter SDK speaks it),
// codeconnect envd's native Connect service (envd.interpreter.v1).
//
// The Engine owns contexts on top of one jupyter.Supervisor. A Context is
// a kernel of one language with a working directory. The languages are
// what the installed kernelspecs run, as the Jupyter server lists them at
// the time of the request (so kernelspecs installed or removed after start
// count): envd's own mapping first (python, javascript and typescript on
// Deno, r, bash, with the aliases js, ts, py, sh and the kernelspecs'
// names), then any other kernelspec by its language field or its name
// (Languages lists them). Its id is its first kernel's id (a random one
// for the JavaScript default, listed before its kernel exists) and never
// changes: when the kernel dies Jupyter restarts it in place, and
// when the kernel is lost for good (the Jupyter server was restarted, or
// the kernel kept dying) the context gets a new kernel on its next use.
// Either way the next execution first re-applies the context's cwd and the
// sandbox-wide env vars (one silent execution per kernel incarnation; env
// changes are applied as they happen). The default Python context is
// created at Start, and the default JavaScript context is listed right
// after it, as E2B's server has both from the start, but its kernel (a
// Deno kernel costs ~200 MB) starts on its first use; other languages'
// defaults are created on first use. Creating a
// context goes through phases (wait for Jupyter, start the kernel, connect,
// set it up), each logged with its duration; a caller that stops waiting
// is told the phase (ErrNotReady). Requests are checked before any kernel
// starts. With Options.WarmKernels, a context (or a language default)
// takes a prestarted kernel instead of starting one, and setup makes it
// exactly what a kernel started for the context would be (see pool).
//
// An Execution runs on a goroutine of the engine, one at a time per
// context, in submission order (package fifo). Its events (started, with
// the execution id and count, stdout, stderr, rich results with raw MIME
// values, the first error, the end with a typed reason) go to its own
// bounded outbuf.Log; Readers follow it, and the execution paces itself to
// them (see flow.go), so a client streaming a huge print gets all of it
// while memory stays bounded. Per-execution env vars are set by a silent
// execution before the code and restored after it whatever happened
// (interrupt, client gone). Interrupt stops the code: the interrupt is sent
// again while the kernel stays silent (ipykernel loses a SIGINT that lands
// outside user code), a kernel that goes idle without a reply counts as
// interrupted, and only a kernel that does not stop within
// Options.InterruptGrace is restarted, as a last resort that says so.
//
// Complete, Inspect and Variables introspect a context (introspect.go,
// variables.go): Jupyter's complete_request and inspect_request, and a
// silent per-language query of its variables. They take the context's
// turn as an execution does (so a busy context makes them wait, bounded by
// their ctx, then ErrBusy), and never start a kernel
// (ErrKernelUnavailable).
//
// Errors match one of the Err* kinds with errors.Is; each adapter maps them
// in one function. Shutdown is graceful, then hard: every execution's end
// is published, its readers get a grace to deliver it, then the kernel
// connections close.
//
// What it does better than E2B's server, on the same wire: aborted replies
// end the execution (E2B hangs: it checks "abort"); a dead kernel ends the
// running execution at once with a clear error; restart keeps the cwd;
// removing a language default makes the next run create a new one; env
// values and paths travel as JSON, never pasted into code; a bad cwd is an
// error at creation; env vars are restored after an interrupted run; an
// unknown language is a 400 listing the available ones.
package interpreter
