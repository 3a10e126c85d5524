package wirecodec_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/wirecodec"
)

// output is the output a decoded response carries, if any.
func output(m proto.Message) []byte {
	var ev *pb.ProcessEvent
	switch r := m.(type) {
	case *pb.StartResponse:
		ev = r.GetEvent()
	case *pb.ConnectResponse:
		ev = r.GetEvent()
	}
	d := ev.GetData()
	switch {
	case d.GetStdout() != nil:
		return d.GetStdout()
	case d.GetStderr() != nil:
		return d.GetStderr()
	}
	return d.GetPty()
}

// FuzzUnmarshal: the client's codec decodes any bytes envd could send
// (a process's output is the sandbox code's) exactly as protobuf does:
// the same message, or an error where protobuf has one. Output decoded
// into a pooled buffer and given back (Release) is not seen by the next
// message but through its own bytes, and what it encodes decodes the
// same.
func FuzzUnmarshal(f *testing.F) {
	var c wirecodec.Codec
	for _, m := range []proto.Message{
		&pb.StartResponse{Event: stdout([]byte("hello\n"))},
		&pb.ConnectResponse{Event: data(&pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stderr{Stderr: []byte{0, 0xff}}})},
		&pb.StartResponse{Event: data(&pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Pty{Pty: bytes.Repeat([]byte("x"), 40<<10)}})},
		&pb.StartResponse{Event: stdout(nil)},
		&pb.StartResponse{Event: &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: 42}}}},
		&pb.ConnectResponse{Event: &pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}},
		&pb.ListResponse{Processes: []*pb.ProcessInfo{{Pid: 1, Tag: proto.String("t"), Config: &pb.ProcessConfig{Cmd: "sh"}}}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		which := uint8(0)
		switch m.(type) {
		case *pb.ConnectResponse:
			which = 1
		case *pb.ListResponse:
			which = 2
		}
		f.Add(which, b)
	}
	// Output followed by a second event, by an unknown field, or cut.
	one, _ := proto.Marshal(&pb.StartResponse{Event: stdout([]byte("a"))})
	f.Add(uint8(0), append(append([]byte{}, one...), one...))
	f.Add(uint8(0), protowire.AppendVarint(protowire.AppendTag(append([]byte{}, one...), 9, protowire.VarintType), 1))
	f.Add(uint8(1), one[:len(one)-1])
	f.Add(uint8(0), []byte{0x0a, 0x04, 0x12, 0x02, 0x22, 0x00}) // output of a field number it does not know
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		fresh := func() proto.Message {
			switch which % 3 {
			case 0:
				return &pb.StartResponse{}
			case 1:
				return &pb.ConnectResponse{}
			}
			return &pb.ListResponse{}
		}
		want := fresh()
		werr := proto.Unmarshal(b, want)
		got := fresh()
		gerr := c.Unmarshal(b, got)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("protobuf: %v; codec: %v", werr, gerr)
		}
		if werr != nil {
			return
		}
		if !proto.Equal(got, want) {
			t.Fatalf("decoded %v, protobuf decodes %v", got, want)
		}
		enc, err := c.Marshal(got)
		back := fresh()
		if err != nil || proto.Unmarshal(enc, back) != nil || !proto.Equal(back, want) {
			t.Fatalf("encoded %x, %v: reads back as %v", enc, err, back)
		}
		// Given back, the buffer may serve the next message: that one
		// holds its own bytes.
		out := output(got)
		copied := bytes.Clone(out)
		wirecodec.Release(out)
		again := fresh()
		if err := c.Unmarshal(b, again); err != nil || !bytes.Equal(output(again), copied) || !proto.Equal(again, want) {
			t.Fatalf("decoded again after Release: %v, %v", again, err)
		}
		wirecodec.Release(output(again))
	})
}
