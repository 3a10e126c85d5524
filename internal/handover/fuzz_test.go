package handover_test

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	hpb "github.com/envd-dev/envd/gen/envd/handover/v1"
	"github.com/envd-dev/envd/internal/handover"
)

// fillRecord sets every field of m, down to depth, one member of each
// oneof: a record that says everything a record can.
func fillRecord(m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && od.Fields().Get(0) != fd {
			continue
		}
		value := func(v protoreflect.Value) protoreflect.Value {
			if fd.Message() != nil {
				fillRecord(v.Message(), depth-1)
				return v
			}
			return recordScalar(fd)
		}
		switch {
		case fd.Message() != nil && depth <= 0:
		case fd.IsList():
			l := m.Mutable(fd).List()
			l.Append(value(l.NewElement()))
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			v := recordScalar(fd.MapValue())
			if fd.MapValue().Message() != nil {
				v = mp.NewValue()
				fillRecord(v.Message(), depth-1)
			}
			mp.Set(recordScalar(fd.MapKey()).MapKey(), v)
		default:
			m.Set(fd, value(m.NewField(fd)))
		}
	}
}

func recordScalar(fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(fd.Enum().Values().Get(fd.Enum().Values().Len() - 1).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(3)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(1 << 33)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(handover.Schema)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(1 << 34)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(0.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(1.5)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("envd é")
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte("out\x00\xff"))
	}
	panic(fd.Kind().String())
}

// memfd is a new memfd holding b.
func memfd(t *testing.T, b []byte) int {
	t.Helper()
	fd, err := unix.MemfdCreate("fuzz-handover", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err != nil {
			t.Fatal(err)
		}
		b = b[n:]
	}
	return fd
}

// FuzzRead: any bytes in the handover memfd (what the previous envd
// wrote; at a live upgrade across versions, what another envd wrote) are
// read as a record of a schema this envd reads, or refused, without a
// panic; a record read lists its descriptors (FDs), and written again
// (Write) reads back the same.
func FuzzRead(f *testing.F) {
	lo, hi := handover.Reads()
	for _, depth := range []int{0, 1, 2, 4} {
		rec := &hpb.Handover{}
		fillRecord(rec.ProtoReflect(), depth)
		rec.Schema = handover.Schema
		b, err := proto.Marshal(rec)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []uint32{0, lo - 1, hi + 1, 1 << 31} {
		b, _ := proto.Marshal(&hpb.Handover{Schema: s, FromVersion: "9.9.9"})
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x08, 0x81})
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := handover.Read(memfd(t, data))
		if err != nil {
			var se *handover.SchemaError
			if errors.As(err, &se) && (se.Got >= lo && se.Got <= hi || se.Min != lo || se.Max != hi) {
				t.Fatalf("%v: schema %d is read", err, se.Got)
			}
			return
		}
		if rec.GetSchema() < lo || rec.GetSchema() > hi {
			t.Fatalf("a record of schema %d read", rec.GetSchema())
		}
		handover.FDs(rec)
		w, err := handover.Write(rec)
		if err != nil {
			t.Fatalf("Write(%v): %v", rec, err)
		}
		defer w.Close()
		back, err := handover.Read(handover.FD(w))
		if err != nil || !proto.Equal(back, rec) {
			t.Fatalf("%v written again reads back as %v, %v", rec, back, err)
		}
	})
}
