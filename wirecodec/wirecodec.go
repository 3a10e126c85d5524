// Package wirecodec is the Connect codec of envd's Go client: binary
// protobuf, as connect's own, except that a process's output (the bytes of
// a StartResponse's or ConnectResponse's data event) is decoded into a
// pooled buffer, which the reader gives back with [Release] once it has
// written the bytes on.
//
// Streaming a gigabyte of output, protobuf's decoding gave every message a
// fresh buffer of up to 512 KiB: a third of the client's time went to
// copying into memory the kernel had to fault in, and to collecting it.
//
// It lives at the module's root rather than under internal/ because the
// public client package decodes with it, and client must not import envd's
// internals; envd's own process tests use it to read output as the client
// does. It depends on gen/process and protobuf alone.
package wirecodec

import (
	"errors"
	"math/bits"
	"sync"

	pb "github.com/envd-dev/envd/gen/process"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Pooled buffers: one pool per power of two from minPooled to maxPooled.
// Smaller output is allocated (a copy is cheap there); larger output (envd
// sends at most 1 MiB of it in a message) too.
const (
	minPooledShift = 15 // 32 KiB
	maxPooledShift = 21 // 2 MiB
)

var pools [maxPooledShift - minPooledShift + 1]sync.Pool

// Codec is the codec; use it with connect.WithCodec on a client.
type Codec struct{}

var errNotProto = errors.New("wirecodec: not a protobuf message")

// Name is connect's name for binary protobuf.
func (Codec) Name() string { return "proto" }

// Marshal marshals m as protobuf.
func (Codec) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, errNotProto
	}
	return proto.Marshal(pm)
}

// MarshalAppend appends m's protobuf encoding to b.
func (Codec) MarshalAppend(b []byte, m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, errNotProto
	}
	return proto.MarshalOptions{}.MarshalAppend(b, pm)
}

// Unmarshal decodes data into m. A process event carrying output gets its
// bytes in a pooled buffer (see Release); everything else is decoded by
// protobuf.
func (Codec) Unmarshal(data []byte, m any) error {
	var ev **pb.ProcessEvent
	switch r := m.(type) {
	case *pb.StartResponse:
		ev = &r.Event
	case *pb.ConnectResponse:
		ev = &r.Event
	}
	if ev != nil {
		if e, ok := decodeOutput(data); ok {
			proto.Reset(m.(proto.Message))
			*ev = e
			return nil
		}
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return errNotProto
	}
	return proto.Unmarshal(data, pm)
}

// decodeOutput decodes a response that holds exactly one event with
// output and nothing else: field 1 (the event), its field 2 (the data
// event), and that one's stdout, stderr or pty bytes. Anything else is not
// for it (ok false), and goes to protobuf.
func decodeOutput(b []byte) (*pb.ProcessEvent, bool) {
	ev, ok := onlyField(b, 1)
	if !ok {
		return nil, false
	}
	de, ok := onlyField(ev, 2)
	if !ok {
		return nil, false
	}
	num, typ, n := protowire.ConsumeTag(de)
	if n < 0 || typ != protowire.BytesType {
		return nil, false
	}
	out, m := protowire.ConsumeBytes(de[n:])
	if m < 0 || n+m != len(de) {
		return nil, false
	}
	d := &pb.ProcessEvent_DataEvent{}
	switch num {
	case 1:
		d.Output = &pb.ProcessEvent_DataEvent_Stdout{Stdout: clone(out)}
	case 2:
		d.Output = &pb.ProcessEvent_DataEvent_Stderr{Stderr: clone(out)}
	case 3:
		d.Output = &pb.ProcessEvent_DataEvent_Pty{Pty: clone(out)}
	default:
		return nil, false
	}
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: d}}, true
}

// onlyField returns the bytes of field num when b holds that one
// length-delimited field and nothing else.
func onlyField(b []byte, num protowire.Number) ([]byte, bool) {
	got, typ, n := protowire.ConsumeTag(b)
	if n < 0 || got != num || typ != protowire.BytesType {
		return nil, false
	}
	v, m := protowire.ConsumeBytes(b[n:])
	if m < 0 || n+m != len(b) {
		return nil, false
	}
	return v, true
}

// clone copies b into a pooled buffer when it is large enough for one.
// Empty output decodes as protobuf does: an empty, non-nil slice.
func clone(b []byte) []byte {
	shift := poolShift(len(b))
	if shift < 0 {
		return append([]byte{}, b...)
	}
	var buf []byte
	if p, ok := pools[shift-minPooledShift].Get().(*[]byte); ok {
		buf = *p
	} else {
		buf = make([]byte, 1<<shift)
	}
	return append(buf[:0], b...)
}

// poolShift is the pool for n bytes (its buffers' size is 1<<shift), or -1.
func poolShift(n int) int {
	if n < 1<<minPooledShift || n > 1<<maxPooledShift {
		return -1
	}
	return bits.Len(uint(n - 1))
}

// Release gives an output buffer from a decoded event back, for the next
// message: the caller must not use b, or any slice of it, afterwards. Any
// other slice is left to the garbage collector, so releasing what did not
// come from a pool is harmless.
func Release(b []byte) {
	c := cap(b)
	shift := poolShift(c)
	if shift < 0 || c != 1<<shift {
		return
	}
	b = b[:0]
	pools[shift-minPooledShift].Put(&b)
}
