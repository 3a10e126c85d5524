// Package jupyter runs a local Jupyter Server and talks to it: the
// Supervisor starts the server (clean environment, random port and token,
// TCP_NODELAY patch), health-checks it and restarts it with backoff when it
// dies; the Client wraps its REST API (kernelspecs, start, interrupt,
// restart, delete); a Kernel is a connection to one kernel's channels over
// the server's WebSocket, on which Execute returns an Execution that
// delivers the request's messages in order and ends only when both the
// execute_reply and the iopub idle have arrived, or with a typed error when
// the kernel dies, restarts, finishes without replying, stops answering
// probes, or the connection drops.
//
// Memory is bounded whatever a kernel prints: frames are decoded as a
// stream (a big print arrives in pieces, other oversized messages are cut
// with a marker; see MaxMessageBytes), and each Execution queues a bounded
// amount of output for its reader (see Execution).
//
// Typical use by the layer above:
//
//	sup := jupyter.New(jupyter.Options{RunAs: defaultUser, Logger: log})
//	err := sup.Start(ctx)              // returns once healthy
//	defer sup.Stop(shutdownCtx)        // TERM, KILL, sweep of orphaned kernels
//	c, err := sup.Client(ctx)          // bound to the current server generation
//	m, err := c.StartKernel(ctx, "python3", "/home/user")
//	k, err := c.Connect(ctx, m.ID, jupyter.KernelOptions{})
//	e, err := k.Execute(ctx, code, jupyter.ExecuteOptions{})
//	for { msg, err := e.Next(ctx); ... }  // io.EOF: completed; else why it ended
//
// Server restarts are state: when sup.Status().Generation changes, every
// kernel is gone and old clients answer ErrServerRestarted. Kernel restarts
// likewise show in k.Status().Restarts.
//
// Jupyter Server 1.23 (Debian bookworm) quirks this package absorbs: the
// ~40 ms Nagle delay, iopub messages lost right after a restart, kernels
// outside the server's process group, 500s that mean "not found", single
// frames of any size for big outputs (decoded as a stream,
// jwire.ReadFrame), and WebSocket pings that cut a connection whose pong
// queues behind output (turned off in the server's config).
//
// The bytes on the wire (Jupyter messages, the bounded decoding of a
// WebSocket frame, the ZeroMQ client of the direct path) are package
// jwire's; Message and the content types are its, under their names here.
//
// This is a domain package: it uses net/http only as a client and knows
// nothing of Connect or of the HTTP API above it.
package jupyter
