package wirecodec_test

import (
	"bytes"
	"testing"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/wirecodec"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func data(d *pb.ProcessEvent_DataEvent) *pb.ProcessEvent {
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: d}}
}

func stdout(b []byte) *pb.ProcessEvent {
	return data(&pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stdout{Stdout: b}})
}

// Every message decodes as protobuf decodes it, output of every size and
// stream, and every other event.
func TestDecodesAsProtobuf(t *testing.T) {
	t.Parallel()
	var events []*pb.ProcessEvent
	for _, n := range []int{0, 1, 32<<10 - 1, 32 << 10, 100 << 10, 512 << 10, 2 << 20, 2<<20 + 1} {
		b := bytes.Repeat([]byte{'x', 0, 0xff}, n/3+1)[:n]
		events = append(events,
			stdout(b),
			data(&pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stderr{Stderr: b}}),
			data(&pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Pty{Pty: b}}))
	}
	status := "exit status 3"
	events = append(events,
		nil,
		&pb.ProcessEvent{},
		data(&pb.ProcessEvent_DataEvent{}),
		&pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: 42}}},
		&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: &pb.ProcessEvent_EndEvent{ExitCode: 3, Exited: true, Status: status, Error: &status}}},
		&pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}})
	var c wirecodec.Codec
	for i, ev := range events {
		for _, msg := range []proto.Message{&pb.StartResponse{Event: ev}, &pb.ConnectResponse{Event: ev}} {
			wire, err := c.Marshal(msg)
			if err != nil {
				t.Fatal(err)
			}
			want := msg.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(wire, want); err != nil {
				t.Fatal(err)
			}
			got := msg.ProtoReflect().New().Interface()
			if err := c.Unmarshal(wire, got); err != nil {
				t.Fatalf("event %d: %v", i, err)
			}
			if !proto.Equal(want, got) {
				t.Fatalf("event %d (%T) decodes otherwise than by protobuf: %v, want %v", i, msg, got, want)
			}
		}
	}
	// Other messages are protobuf's.
	wire, err := c.Marshal(&pb.ListResponse{Processes: []*pb.ProcessInfo{{Pid: 7, Tag: proto.String("t")}}})
	if err != nil {
		t.Fatal(err)
	}
	var lr pb.ListResponse
	if err := c.Unmarshal(wire, &lr); err != nil || lr.GetProcesses()[0].GetPid() != 7 {
		t.Fatalf("ListResponse: %v, %v", &lr, err)
	}
}

// Output with anything beside it (a field envd does not send today) goes
// to protobuf, which keeps it; bad bytes are protobuf's error, not a panic.
func TestUnusualBytes(t *testing.T) {
	t.Parallel()
	var c wirecodec.Codec
	wire, err := c.Marshal(&pb.StartResponse{Event: stdout([]byte("hi"))})
	if err != nil {
		t.Fatal(err)
	}
	extra := protowire.AppendTag(append([]byte(nil), wire...), 9, protowire.VarintType)
	extra = protowire.AppendVarint(extra, 1)
	var got pb.StartResponse
	if err := c.Unmarshal(extra, &got); err != nil {
		t.Fatal(err)
	}
	if string(got.GetEvent().GetData().GetStdout()) != "hi" || len(got.ProtoReflect().GetUnknown()) == 0 {
		t.Fatalf("with an unknown field: %v (unknown %x)", &got, got.ProtoReflect().GetUnknown())
	}
	// The same inside the data event, and inside the event.
	field := func(num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), v)
	}
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 1)
	for _, b := range [][]byte{
		field(1, field(2, append(field(1, []byte("hi")), unknown...))),
		field(1, append(field(2, field(1, []byte("hi"))), unknown...)),
	} {
		var got, want pb.StartResponse
		if err := c.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if err := proto.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&got, &want) {
			t.Fatalf("%x: %v, want %v", b, &got, &want)
		}
	}
	for cut := 1; cut < len(wire); cut++ {
		var m pb.StartResponse
		if c.Unmarshal(wire[:cut], &m) == nil && proto.Unmarshal(wire[:cut], new(pb.StartResponse)) != nil {
			t.Fatalf("%d of %d bytes decoded without the error protobuf gives", cut, len(wire))
		}
	}
	if err := c.Unmarshal(wire, "not a message"); err == nil {
		t.Fatal("decoded into a string")
	}
	if _, err := c.Marshal(42); err == nil {
		t.Fatal("marshalled an int")
	}
	b, err := c.MarshalAppend([]byte("pre"), &pb.StartResponse{Event: stdout([]byte("hi"))})
	if err != nil || !bytes.Equal(b, append([]byte("pre"), wire...)) {
		t.Fatalf("MarshalAppend: %x, %v", b, err)
	}
}

// A released buffer takes a later message's output (a sync.Pool may drop
// some: the race detector's does at random, so a few tries).
func TestReleaseReuses(t *testing.T) {
	var c wirecodec.Codec
	wire, err := c.Marshal(&pb.StartResponse{Event: stdout(bytes.Repeat([]byte("a"), 100<<10))})
	if err != nil {
		t.Fatal(err)
	}
	decode := func() []byte {
		var m pb.StartResponse
		if err := c.Unmarshal(wire, &m); err != nil {
			t.Fatal(err)
		}
		return m.GetEvent().GetData().GetStdout()
	}
	for range 20 {
		b := decode()
		if len(b) != 100<<10 || cap(b) != 128<<10 {
			t.Fatalf("output of %d bytes in a buffer of %d", len(b), cap(b))
		}
		wirecodec.Release(b)
		if next := decode(); &next[0] == &b[0] {
			return
		}
	}
	t.Fatal("a released buffer was never reused")
}
