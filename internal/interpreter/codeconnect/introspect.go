package codeconnect

import (
	"context"
	"time"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/envd/interpreter/v1"
	"github.com/envd-dev/envd/internal/interpreter"
)

// queryContext bounds an introspection query's wait for a busy context:
// the call's deadline, less a margin so that the busy answer reaches the
// client before it gives up (a tenth of the time left, at most 1 s); or
// interpreter.QueryWait without a deadline.
func queryContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok {
		return context.WithTimeout(ctx, interpreter.QueryWait)
	}
	margin := min(time.Until(d)/10, time.Second)
	return context.WithDeadline(ctx, d.Add(-margin))
}

// contextID is the id a query names; empty is the default Python context.
func contextID(id string) string {
	if id == "" {
		return "default"
	}
	return id
}

// cursor is a request's cursor, interpreter.CursorEnd when unset.
func cursor(pos *uint32) int {
	if pos == nil {
		return interpreter.CursorEnd
	}
	return int(*pos)
}

// Complete answers the kernel's completions at the cursor.
func (s *Service) Complete(ctx context.Context, req *connect.Request[pb.CompleteRequest]) (*connect.Response[pb.CompleteResponse], error) {
	eng, err := s.engine()
	if err != nil {
		return nil, err
	}
	qctx, cancel := queryContext(ctx)
	defer cancel()
	c, err := eng.Complete(qctx, contextID(req.Msg.GetContextId()), req.Msg.GetCode(), cursor(req.Msg.CursorPos))
	if err != nil {
		return nil, s.toConnectErr(ctx, err)
	}
	out := &pb.CompleteResponse{Matches: c.Matches, CursorStart: uint32(c.CursorStart), CursorEnd: uint32(c.CursorEnd)}
	for _, t := range c.Types {
		out.Types = append(out.Types, &pb.CompletionType{Text: t.Text, Type: t.Type, Signature: t.Signature})
	}
	return connect.NewResponse(out), nil
}

// Inspect answers what the kernel knows of the name at the cursor.
func (s *Service) Inspect(ctx context.Context, req *connect.Request[pb.InspectRequest]) (*connect.Response[pb.InspectResponse], error) {
	eng, err := s.engine()
	if err != nil {
		return nil, err
	}
	qctx, cancel := queryContext(ctx)
	defer cancel()
	in, err := eng.Inspect(qctx, contextID(req.Msg.GetContextId()), req.Msg.GetCode(), cursor(req.Msg.CursorPos),
		int(req.Msg.GetDetailLevel()))
	if err != nil {
		return nil, s.toConnectErr(ctx, err)
	}
	out := &pb.InspectResponse{Found: in.Found, Text: in.Text, Data: make(map[string][]byte, len(in.Data))}
	for mime, v := range in.Data {
		out.Data[mime] = v
	}
	return connect.NewResponse(out), nil
}

// ListVariables lists the context's variables.
func (s *Service) ListVariables(ctx context.Context, req *connect.Request[pb.ListVariablesRequest]) (*connect.Response[pb.ListVariablesResponse], error) {
	eng, err := s.engine()
	if err != nil {
		return nil, err
	}
	qctx, cancel := queryContext(ctx)
	defer cancel()
	vars, err := eng.Variables(qctx, contextID(req.Msg.GetContextId()))
	if err != nil {
		return nil, s.toConnectErr(ctx, err)
	}
	out := &pb.ListVariablesResponse{Total: uint32(vars.Total), Truncated: vars.Truncated,
		Variables: make([]*pb.Variable, 0, len(vars.Variables))}
	for _, v := range vars.Variables {
		pv := &pb.Variable{Name: v.Name, Type: v.Type, Repr: v.Repr, Dtype: v.DType}
		if v.Len != nil && *v.Len >= 0 {
			n := uint64(*v.Len)
			pv.Len = &n
		}
		for _, d := range v.Shape {
			pv.Shape = append(pv.Shape, uint64(max(d, 0)))
		}
		out.Variables = append(out.Variables, pv)
	}
	return connect.NewResponse(out), nil
}
