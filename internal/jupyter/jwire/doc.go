// Package jwire is the wire layer of envd's Jupyter client: the bytes a
// kernel and envd exchange, and nothing else.
//
//   - Jupyter messages (message.go): headers, content types, new requests,
//     and the legacy framing of the server's kernel WebSocket (a text frame
//     of JSON, or a binary frame with buffers).
//   - The bounded reading of one WebSocket message (frame.go, ReadFrame):
//     what a kernel prints never makes envd hold more than about
//     MaxMessageBytes of one message; a bigger print arrives in pieces,
//     other oversized messages are cut with a marker.
//   - A minimal ZeroMQ client (zmtp.go): ZMTP 3.0 over TCP with the NULL
//     mechanism, as a DEALER or a SUB, with every length a peer sends
//     bounded before anything is allocated for it.
//   - Jupyter messages over ZeroMQ (zmq.go): the signed frames of a request
//     (Message.ZMQFrames) and the bounded reading of a kernel's message
//     (ReadMessage).
//
// It is pure: no Kernel, no REST API, no server process, no goroutine of
// its own. Its only input is a reader or a connection, so that each
// decoder can be fuzzed alone. Package jupyter owns the connections, their
// lifetimes and what the messages mean.
package jwire
