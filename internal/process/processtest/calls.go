package processtest

import (
	"context"
	"io"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/gen/process/processconnect"
)

// Call is one RPC that a test expects to be refused at once: it returns the
// call's error, nil when it succeeded.
type Call func(context.Context) error

// ErrAccepted is what a Start or Connect Call returns when its stream
// started: the request the test expected to be refused was accepted.
var ErrAccepted = connect.NewError(connect.CodeUnknown, io.ErrUnexpectedEOF)

// StartCall calls Start with req.
func StartCall(c processconnect.ProcessClient, req *pb.StartRequest) Call {
	return func(ctx context.Context) error {
		st, err := c.Start(ctx, connect.NewRequest(req))
		if err != nil {
			return err
		}
		return drain(st)
	}
}

// ConnectCall calls Connect with sel.
func ConnectCall(c processconnect.ProcessClient, sel *pb.ProcessSelector) Call {
	return func(ctx context.Context) error {
		st, err := c.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: sel}))
		if err != nil {
			return err
		}
		return drain(st)
	}
}

// drain reads a stream that should fail at once; a start event means the
// request was accepted (ErrAccepted).
func drain[T any, PT interface {
	*T
	Event
}](st *connect.ServerStreamForClient[T]) error {
	defer st.Close()
	for st.Receive() {
		if PT(st.Msg()).GetEvent().GetStart() != nil {
			return ErrAccepted
		}
	}
	return st.Err()
}

// SendInputCall calls SendInput with sel and in.
func SendInputCall(c processconnect.ProcessClient, sel *pb.ProcessSelector, in *pb.ProcessInput) Call {
	return func(ctx context.Context) error {
		_, err := c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: in}))
		return err
	}
}

// SendSignalCall calls SendSignal with sel and sig.
func SendSignalCall(c processconnect.ProcessClient, sel *pb.ProcessSelector, sig pb.Signal) Call {
	return func(ctx context.Context) error {
		_, err := c.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: sel, Signal: sig}))
		return err
	}
}

// CloseStdinCall calls CloseStdin with sel.
func CloseStdinCall(c processconnect.ProcessClient, sel *pb.ProcessSelector) Call {
	return func(ctx context.Context) error {
		_, err := c.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: sel}))
		return err
	}
}

// UpdateCall calls Update with sel and pty.
func UpdateCall(c processconnect.ProcessClient, sel *pb.ProcessSelector, pty *pb.PTY) Call {
	return func(ctx context.Context) error {
		_, err := c.Update(ctx, connect.NewRequest(&pb.UpdateRequest{Process: sel, Pty: pty}))
		return err
	}
}

// StreamInputCall calls StreamInput with start (when sel is set) and one
// data message.
func StreamInputCall(c processconnect.ProcessClient, sel *pb.ProcessSelector, in *pb.ProcessInput) Call {
	return func(ctx context.Context) error {
		st := c.StreamInput(ctx)
		if sel != nil {
			st.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: sel}}})
		}
		st.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: in}}})
		_, err := st.CloseAndReceive()
		return err
	}
}
