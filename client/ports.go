package client

import (
	"context"
	"fmt"
	"iter"
	"sync"

	"connectrpc.com/connect"

	ptpb "github.com/envd-dev/envd/gen/envd/ports/v1"
)

// Port is a TCP listener in the sandbox, and how it is reached from
// outside: envd forwards the sandbox's external addresses to a listener
// bound only to loopback (unless envd runs with -forward-ports=false).
type Port struct {
	// PID is a process holding the socket, Process its name; 0 and ""
	// when envd could not tell.
	PID     int
	Process string
	// Address is the address bound: "0.0.0.0" or "::" for every one.
	Address string
	Port    int
	Family  string // "ipv4" or "ipv6"
	// Loopback: bound to a loopback address. Envd: private, never
	// forwarded: envd's own, its Jupyter server's or a kernel's line to
	// that server (Private says whose).
	Loopback, Envd bool
	// Private says whose a private listener is: "envd", "jupyter" or
	// "kernel"; "" for the workload's.
	Private string
	// Forwarded: at least one external address is forwarded to it, from
	// ForwardedFrom ("10.0.0.2:8080").
	Forwarded     bool
	ForwardedFrom []string
	// ForwardFailures are external addresses envd could not listen on for
	// it (taken); it tries again at each scan.
	ForwardFailures []PortFailure
}

// PortFailure is an external address that could not be forwarded.
type PortFailure struct {
	From, Message string
}

// PortFilter selects ports; the zero PortFilter selects every one.
type PortFilter struct {
	Ports         []int  // each 1-65535; empty: every port
	PID           int    // 0: any
	Family        string // "ipv4", "ipv6", or "" for both
	ForwardedOnly bool
}

func (f PortFilter) proto(op string) (*ptpb.Filter, error) {
	out := &ptpb.Filter{ForwardedOnly: f.ForwardedOnly}
	for i, p := range f.Ports {
		if p < 1 || p > 65535 {
			return nil, &Error{Op: op, Code: connect.CodeInvalidArgument, Message: fmt.Sprintf("ports[%d] is %d: a port is 1-65535", i, p)}
		}
		out.Ports = append(out.Ports, uint32(p))
	}
	if f.PID < 0 || f.PID > 1<<31-1 {
		return nil, &Error{Op: op, Code: connect.CodeInvalidArgument, Message: fmt.Sprintf("pid %d is not a process id", f.PID)}
	}
	out.Pid = uint32(f.PID)
	switch f.Family {
	case "":
	case "ipv4":
		out.Family = ptpb.Family_FAMILY_IPV4
	case "ipv6":
		out.Family = ptpb.Family_FAMILY_IPV6
	default:
		return nil, &Error{Op: op, Code: connect.CodeInvalidArgument, Message: fmt.Sprintf("family %q: give ipv4, ipv6 or nothing", f.Family)}
	}
	return out, nil
}

// ListPorts lists the sandbox's TCP listeners now, sorted by port.
func (c *Client) ListPorts(ctx context.Context, f PortFilter) ([]Port, error) {
	c.init()
	const op = "list ports"
	pf, err := f.proto(op)
	if err != nil {
		return nil, err
	}
	resp, err := c.ports.List(ctx, request(c, &ptpb.ListRequest{Filter: pf}, ""))
	if err != nil {
		return nil, rpcError(op, err)
	}
	return portsFromProto(resp.Msg.GetPorts()), nil
}

// PortChange is a listener that opened, closed or was updated (its
// forwarding, or its owner, changed). A closed one carries its last state.
type PortChange struct {
	Kind string // "opened", "closed" or "updated"
	Port Port
}

// PortWatch follows the sandbox's listeners: Snapshot is what they were
// when it began, Changes what happens next.
type PortWatch struct {
	Snapshot []Port

	stream    *connect.ServerStreamForClient[ptpb.WatchResponse]
	cancel    context.CancelFunc
	closeOnce sync.Once
}

// WatchPorts starts following the listeners f selects. Close it when
// done; cancelling ctx ends it too.
func (c *Client) WatchPorts(ctx context.Context, f PortFilter) (*PortWatch, error) {
	c.init()
	const op = "watch ports"
	pf, err := f.proto(op)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	s, err := c.ports.Watch(sctx, request(c, &ptpb.WatchRequest{Filter: pf}, ""))
	if err != nil {
		cancel()
		return nil, rpcError(op, err)
	}
	w := &PortWatch{stream: s, cancel: cancel}
	if !s.Receive() || s.Msg().GetSnapshot() == nil {
		err := s.Err()
		w.Close()
		if err == nil {
			return nil, &Error{Op: op, Code: connect.CodeInternal, Message: "the watch did not begin with a snapshot"}
		}
		return nil, rpcError(op, err)
	}
	w.Snapshot = portsFromProto(s.Msg().GetSnapshot().GetPorts())
	return w, nil
}

var changeKinds = map[ptpb.ChangeKind]string{
	ptpb.ChangeKind_CHANGE_KIND_OPENED:  "opened",
	ptpb.ChangeKind_CHANGE_KIND_CLOSED:  "closed",
	ptpb.ChangeKind_CHANGE_KIND_UPDATED: "updated",
}

// Changes iterates over the changes until the watch ends. It ends with an
// error, yielded last, unless Close or the context of WatchPorts ended it.
func (w *PortWatch) Changes() iter.Seq2[PortChange, error] {
	return func(yield func(PortChange, error) bool) {
		for w.stream.Receive() {
			ch := w.stream.Msg().GetChange()
			if ch == nil {
				continue // a keepalive
			}
			if !yield(PortChange{Kind: changeKinds[ch.GetKind()], Port: portFromProto(ch.GetPort())}, nil) {
				return
			}
		}
		err := w.stream.Err()
		w.Close()
		if err != nil && connect.CodeOf(err) != connect.CodeCanceled {
			yield(PortChange{}, rpcError("watch ports", err))
		} else if err == nil {
			yield(PortChange{}, &Error{Op: "watch ports", Code: connect.CodeUnavailable, Message: "envd ended the watch"})
		}
	}
}

// Close ends the watch.
func (w *PortWatch) Close() error {
	w.closeOnce.Do(func() {
		w.cancel()
		w.stream.Close()
	})
	return nil
}

var privates = map[ptpb.Private]string{
	ptpb.Private_PRIVATE_ENVD:    "envd",
	ptpb.Private_PRIVATE_JUPYTER: "jupyter",
	ptpb.Private_PRIVATE_KERNEL:  "kernel",
}

func portsFromProto(ps []*ptpb.Port) []Port {
	out := make([]Port, len(ps))
	for i, p := range ps {
		out[i] = portFromProto(p)
	}
	return out
}

func portFromProto(p *ptpb.Port) Port {
	out := Port{
		PID: int(p.GetPid()), Process: p.GetProcessName(), Address: p.GetAddress(), Port: int(p.GetPort()),
		Family: "ipv4", Loopback: p.GetLoopback(), Envd: p.GetEnvd(), Forwarded: p.GetForwarded(), ForwardedFrom: p.GetForwardedFrom(),
	}
	if p.GetFamily() == ptpb.Family_FAMILY_IPV6 {
		out.Family = "ipv6"
	}
	out.Private = privates[p.GetPrivate()]
	for _, f := range p.GetForwardFailures() {
		out.ForwardFailures = append(out.ForwardFailures, PortFailure{From: f.GetFrom(), Message: f.GetMessage()})
	}
	return out
}
