package legacysdk_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	fspb "github.com/envd-dev/envd/gen/filesystem"
	procpb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/internal/legacysdk"
)

// responseTypes are the answers of process.Process and
// filesystem.Filesystem: what legacysdk converts.
func responseTypes(tb testing.TB) []protoreflect.MessageType {
	var out []protoreflect.MessageType
	for _, s := range []protoreflect.ServiceDescriptor{
		procpb.File_process_process_proto.Services().ByName("Process"),
		fspb.File_filesystem_filesystem_proto.Services().ByName("Filesystem"),
	} {
		for i := range s.Methods().Len() {
			mt, err := protoregistry.GlobalTypes.FindMessageByName(s.Methods().Get(i).Output().FullName())
			if err != nil {
				tb.Fatal(err)
			}
			out = append(out, mt)
		}
	}
	return out
}

// fill sets every field of m, down to depth, one member of each oneof
// (the member-th, wrapping), to values of every kind.
func fill(m protoreflect.Message, depth, member int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && od.Fields().Get(member%od.Fields().Len()) != fd {
			continue
		}
		value := func(new func() protoreflect.Value) protoreflect.Value {
			if fd.Message() == nil {
				return fillScalar(fd)
			}
			v := new()
			fill(v.Message(), depth-1, member)
			return v
		}
		switch {
		case fd.Message() != nil && depth <= 0:
		case fd.IsList():
			l := m.Mutable(fd).List()
			l.Append(value(l.NewElement))
			l.Append(value(l.NewElement))
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			vd := fd.MapValue()
			v := fillScalar(vd)
			if vd.Message() != nil {
				v = mp.NewValue()
				fill(v.Message(), depth-1, member)
			}
			mp.Set(fillScalar(fd.MapKey()).MapKey(), v)
		default:
			m.Set(fd, value(func() protoreflect.Value { return m.NewField(fd) }))
		}
	}
}

func fillScalar(fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(fd.Enum().Values().Get(fd.Enum().Values().Len() - 1).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(-3)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(1 << 40)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(0o755)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(1 << 50)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(0.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(2.5)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("/home/user/é x")
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte("out\x00\xff"))
	}
	panic(fd.Kind().String())
}

// sameKnown fails t unless every field of old, the frozen message, holds
// what the field of ours with its number holds, recursively.
func sameKnown(t *testing.T, path string, old, ours protoreflect.Message) {
	t.Helper()
	fields := old.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		ofd := ours.Descriptor().Fields().ByNumber(fd.Number())
		p := path + "." + string(fd.Name())
		if ofd == nil {
			t.Fatalf("%s: ours has no field %d", p, fd.Number())
		}
		if old.Has(fd) != ours.Has(ofd) {
			t.Fatalf("%s: set in one message only", p)
		}
		switch a, b := old.Get(fd), ours.Get(ofd); {
		case fd.IsList():
			if a.List().Len() != b.List().Len() {
				t.Fatalf("%s: %d elements, ours %d", p, a.List().Len(), b.List().Len())
			}
			for j := range a.List().Len() {
				sameValue(t, p, fd, a.List().Get(j), b.List().Get(j))
			}
		case fd.IsMap():
			if a.Map().Len() != b.Map().Len() {
				t.Fatalf("%s: %d entries, ours %d", p, a.Map().Len(), b.Map().Len())
			}
			a.Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
				sameValue(t, p+"["+k.String()+"]", fd.MapValue(), v, b.Map().Get(k))
				return true
			})
		default:
			sameValue(t, p, fd, a, b)
		}
	}
}

func sameValue(t *testing.T, path string, fd protoreflect.FieldDescriptor, a, b protoreflect.Value) {
	t.Helper()
	switch {
	case fd.Message() != nil:
		sameKnown(t, path, a.Message(), b.Message())
	case fd.Kind() == protoreflect.BytesKind:
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Fatalf("%s: %q, ours %q", path, a.Bytes(), b.Bytes())
		}
	case fd.Kind() == protoreflect.EnumKind:
		if a.Enum() != b.Enum() {
			t.Fatalf("%s: %d, ours %d", path, a.Enum(), b.Enum())
		}
	case a.Interface() != b.Interface():
		t.Fatalf("%s: %v, ours %v", path, a, b)
	}
}

// FuzzMessage: any answer of process.Process or filesystem.Filesystem
// (decoded from any bytes: file names, process output and tags come from
// sandbox code) converts for an older SDK without an error, into a
// message of its frozen type whose every field holds what ours does,
// that has nothing the frozen type does not know, and that encodes as
// JSON, as older SDKs read it.
func FuzzMessage(f *testing.F) {
	types := responseTypes(f)
	for i, mt := range types {
		for member := range 3 {
			m := mt.New()
			fill(m, 4, member)
			b, err := proto.Marshal(m.Interface())
			if err != nil {
				f.Fatal(err)
			}
			f.Add(uint8(i), b)
		}
		f.Add(uint8(i), []byte{})
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		mt := types[int(which)%len(types)]
		ours := mt.New().Interface()
		if err := proto.Unmarshal(data, ours); err != nil {
			return // not a message envd could send
		}
		old, err := legacysdk.Message(ours)
		if err != nil {
			t.Fatalf("Message(%v): %v", ours, err)
		}
		if old.ProtoReflect().Descriptor().FullName() == mt.Descriptor().FullName() {
			t.Fatalf("Message(%v) is of our own type", ours)
		}
		sameKnown(t, string(mt.Descriptor().Name()), old.ProtoReflect(), ours.ProtoReflect())
		b, err := proto.Marshal(old)
		known := old.ProtoReflect().New().Interface()
		if err != nil || (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, known) != nil || !proto.Equal(known, old) {
			t.Fatalf("Message(%v) = %v: keeps fields its type does not know", ours, old)
		}
		js, err := protojson.Marshal(old)
		if err != nil {
			t.Fatalf("Message(%v) = %v: no JSON: %v", ours, old, err)
		}
		back := old.ProtoReflect().New().Interface()
		if err := protojson.Unmarshal(js, back); err != nil || !proto.Equal(back, old) {
			t.Fatalf("Message(%v): JSON %s reads back as %v, %v", ours, js, back, err)
		}
	})
}
