package client

import (
	"context"
	"encoding/json"

	ipb "github.com/envd-dev/envd/gen/envd/interpreter/v1"
)

// Introspection of a context: completion and inspection at a cursor, and
// its variables. A context running code makes these wait until the code
// ends, at most until ctx's deadline (10 s without one): then they fail
// with ErrUnavailable, saying the context is busy. A context without a
// running kernel fails with ErrUnavailable too, saying why; an unknown
// one with ErrNotFound; bad input with ErrInvalidArgument.

// CursorEnd as a cursor means the end of the code.
const CursorEnd = -1

// Completion is what the kernel completes at a cursor: each match
// replaces the code from Start to End (Unicode code points).
type Completion struct {
	Matches    []string
	Start, End int
	// Types describe the matches when the kernel tells (IPython does).
	Types []CompletionType
}

// CompletionType describes a match: its kind (function, instance,
// module, keyword...) and signature.
type CompletionType struct {
	Text, Type, Signature string
}

func cursorPos(cursor int) *uint32 {
	if cursor < 0 {
		return nil
	}
	p := uint32(cursor)
	return &p
}

// Complete asks the kernel of a context ("": the default Python one) for
// the completions at cursor, in Unicode code points from the start of code
// (CursorEnd: its end).
func (c *Client) Complete(ctx context.Context, contextID, code string, cursor int) (*Completion, error) {
	c.init()
	resp, err := c.code.Complete(ctx, request(c, &ipb.CompleteRequest{ContextId: contextID, Code: code, CursorPos: cursorPos(cursor)}, ""))
	if err != nil {
		return nil, rpcError("complete", err)
	}
	m := resp.Msg
	out := &Completion{Matches: m.GetMatches(), Start: int(m.GetCursorStart()), End: int(m.GetCursorEnd())}
	for _, t := range m.GetTypes() {
		out.Types = append(out.Types, CompletionType{Text: t.GetText(), Type: t.GetType(), Signature: t.GetSignature()})
	}
	return out, nil
}

// Inspection is what the kernel says of the name at a cursor.
type Inspection struct {
	// Found is false when the kernel knows nothing there.
	Found bool
	// Text is the text/plain form without ANSI escape sequences.
	Text string
	// Data maps each MIME type the kernel gave to its raw JSON value.
	Data map[string]json.RawMessage
}

// Inspect asks the kernel of a context ("": the default Python one) about
// the name at cursor (code points; CursorEnd: the end of code). detail 1
// asks for more (IPython: the source).
func (c *Client) Inspect(ctx context.Context, contextID, code string, cursor, detail int) (*Inspection, error) {
	c.init()
	resp, err := c.code.Inspect(ctx, request(c, &ipb.InspectRequest{ContextId: contextID, Code: code, CursorPos: cursorPos(cursor),
		DetailLevel: uint32(max(detail, 0))}, ""))
	if err != nil {
		return nil, rpcError("inspect", err)
	}
	out := &Inspection{Found: resp.Msg.GetFound(), Text: resp.Msg.GetText(), Data: map[string]json.RawMessage{}}
	for mime, v := range resp.Msg.GetData() {
		out.Data[mime] = v
	}
	return out, nil
}

// Variable is one of a context's variables.
type Variable struct {
	Name string
	// Type is the language's (a Python class, a JavaScript constructor,
	// an R class, bash's kind of variable).
	Type string
	// Repr is a short form of the value: at most 200 characters.
	Repr string
	// Len is a container's item count or a string's length; -1 when not
	// known.
	Len int64
	// Shape and DType of an array or data frame, when it has them.
	Shape []uint64
	DType string
}

// Variables is a context's variables, sorted by name.
type Variables struct {
	Variables []Variable
	// Total counts them all; more than listed when Truncated (at most
	// 1000 are).
	Total     int
	Truncated bool
}

// ListVariables lists the variables of a context ("": the default Python
// one), without touching its execution count or history.
func (c *Client) ListVariables(ctx context.Context, contextID string) (*Variables, error) {
	c.init()
	resp, err := c.code.ListVariables(ctx, request(c, &ipb.ListVariablesRequest{ContextId: contextID}, ""))
	if err != nil {
		return nil, rpcError("list variables", err)
	}
	out := &Variables{Total: int(resp.Msg.GetTotal()), Truncated: resp.Msg.GetTruncated(),
		Variables: make([]Variable, 0, len(resp.Msg.GetVariables()))}
	for _, v := range resp.Msg.GetVariables() {
		n := int64(-1)
		if v.Len != nil {
			n = int64(v.GetLen())
		}
		out.Variables = append(out.Variables, Variable{Name: v.GetName(), Type: v.GetType(), Repr: v.GetRepr(), Len: n,
			Shape: v.GetShape(), DType: v.GetDtype()})
	}
	return out, nil
}
