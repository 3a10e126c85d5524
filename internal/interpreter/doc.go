// Package interpreter runs code statefully in Jupyter kernels and serves
// E2B's code-interpreter HTTP API over it
// (shared/contracts/code-interpreter-http.md).
//
// The Engine owns contexts on top of one jupyter.Supervisor. A Context is
// a kernel of one language (python, javascript and typescript on Deno, r,
// bash) with a working directory. Its id is its first kernel's id and
// never changes: when the kernel dies Jupyter restarts it in place, and
// when the kernel is lost for good (the Jupyter server was restarted, or
// the kernel kept dying) the context gets a new kernel on its next use.
// Either way the next execution first re-applies the context's cwd and the
// sandbox-wide env vars (one silent execution per kernel incarnation; env
// changes are applied as they happen). The default Python context is
// created at Start; other languages' defaults on first use.
//
// An Execution runs on a goroutine of the engine, one at a time per
// context, in submission order. Its events (execution count, stdout,
// stderr, rich results with raw MIME values, the first error, the end with
// a typed reason) go to its own bounded outbuf.Log; Readers follow it, and
// the execution paces itself to them (see flow.go), so a client streaming
// a huge print gets all of it while memory stays bounded. Per-execution env
// vars are set by a silent execution before the code and restored after it
// whatever happened (interrupt, client gone). Interrupt stops the code; a
// kernel that does not stop within Options.InterruptGrace is restarted.
//
// What it does better than E2B's server, on the same wire: aborted replies
// end the execution (E2B hangs: it checks "abort"); a dead kernel ends the
// running execution at once with a clear error; restart keeps the cwd;
// removing a language default makes the next run create a new one; env
// values and paths travel as JSON, never pasted into code; a bad cwd is an
// error at creation; env vars are restored after an interrupted run; an
// unknown language is a 400 listing the available ones.
//
// Two adapters serve the one engine: http.go is E2B's HTTP API (the only
// place engine errors become statuses), with wire.go its NDJSON encoding
// (ASCII-only lines, as the JS SDK needs); service.go is envd's native
// Connect service, envd.interpreter.v1 (the only place engine errors
// become Connect codes), which adds execution ids, reattaching by seq,
// explicit interrupts and typed end reasons.
package interpreter
