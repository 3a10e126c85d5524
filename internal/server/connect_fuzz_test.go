package server_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	interpreterv1 "github.com/envd-dev/envd/gen/envd/interpreter/v1"
	"github.com/envd-dev/envd/gen/envd/interpreter/v1/interpreterv1connect"
	packagesv1 "github.com/envd-dev/envd/gen/envd/packages/v1"
	"github.com/envd-dev/envd/gen/envd/packages/v1/packagesv1connect"
	portsv1 "github.com/envd-dev/envd/gen/envd/ports/v1"
	"github.com/envd-dev/envd/gen/envd/ports/v1/portsv1connect"
	"github.com/envd-dev/envd/gen/filesystem"
	"github.com/envd-dev/envd/gen/filesystem/filesystemconnect"
	"github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/gen/process/processconnect"
	"github.com/envd-dev/envd/internal/defaults"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/server"
)

// connectFiles are the services whose requests FuzzConnectRequest sends.
var connectFiles = []protoreflect.FileDescriptor{
	process.File_process_process_proto,
	filesystem.File_filesystem_filesystem_proto,
	interpreterv1.File_envd_interpreter_v1_interpreter_proto,
	packagesv1.File_envd_packages_v1_packages_proto,
	portsv1.File_envd_ports_v1_ports_proto,
}

// connectMethods is every method of connectFiles' services, by procedure.
func connectMethods() []protoreflect.MethodDescriptor {
	var out []protoreflect.MethodDescriptor
	for _, fd := range connectFiles {
		for i := range fd.Services().Len() {
			ms := fd.Services().Get(i).Methods()
			for j := range ms.Len() {
				out = append(out, ms.Get(j))
			}
		}
	}
	slices.SortFunc(out, func(a, b protoreflect.MethodDescriptor) int { return strings.Compare(procedure(a), procedure(b)) })
	return out
}

func procedure(m protoreflect.MethodDescriptor) string {
	return "/" + string(m.Parent().FullName()) + "/" + string(m.Name())
}

// decodedCode answers a call whose request was decoded: no other part of
// envd answers it.
const decodedCode = connect.CodeAborted

// capture is the innermost interceptor: it keeps the request message the
// procedure would have got, decoded by Connect, and answers decodedCode.
type capture struct{ got proto.Message }

func (c *capture) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		c.got = proto.Clone(req.Any().(proto.Message))
		return nil, connect.NewError(decodedCode, errors.New("decoded"))
	}
}

func (c *capture) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (c *capture) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if conn.Spec().StreamType == connect.StreamTypeServer {
			// The handler receives the one request itself.
			err := next(ctx, &captureConn{conn, c})
			if c.got != nil {
				return connect.NewError(decodedCode, errors.New("decoded"))
			}
			return err
		}
		// A client stream's handler would receive its messages: the
		// first, here.
		mt, err := protoregistry.GlobalTypes.FindMessageByName(conn.Spec().Schema.(protoreflect.MethodDescriptor).Input().FullName())
		if err != nil {
			return err
		}
		msg := mt.New().Interface()
		if err := conn.Receive(msg); err != nil {
			return err
		}
		c.got = msg
		return connect.NewError(decodedCode, errors.New("decoded"))
	}
}

type captureConn struct {
	connect.StreamingHandlerConn
	c *capture
}

func (cc *captureConn) Receive(msg any) error {
	err := cc.StreamingHandlerConn.Receive(msg)
	if err == nil && cc.c.got == nil {
		cc.c.got = proto.Clone(msg.(proto.Message))
	}
	return err
}

// sample sets every field of m, recursively to depth: a request with
// each field the client could send.
func sample(m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && od.Fields().Get(0) != fd {
			continue // one member of a oneof
		}
		if fd.Message() != nil && depth <= 0 {
			continue
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			l.Append(sampleValue(fd, l.NewElement, depth))
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			k := sampleScalar(fd.MapKey()).MapKey()
			mp.Set(k, sampleValue(fd.MapValue(), mp.NewValue, depth))
		default:
			m.Set(fd, sampleValue(fd, func() protoreflect.Value { return m.NewField(fd) }, depth))
		}
	}
}

func sampleValue(fd protoreflect.FieldDescriptor, newValue func() protoreflect.Value, depth int) protoreflect.Value {
	if fd.Message() == nil {
		return sampleScalar(fd)
	}
	v := newValue()
	switch fd.Message().FullName() {
	case "google.protobuf.Duration", "google.protobuf.Timestamp":
		v.Message().Set(fd.Message().Fields().ByName("seconds"), protoreflect.ValueOfInt64(90))
		v.Message().Set(fd.Message().Fields().ByName("nanos"), protoreflect.ValueOfInt32(5e8))
	default:
		sample(v.Message(), depth-1)
	}
	return v
}

func sampleScalar(fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(fd.Enum().Values().Get(fd.Enum().Values().Len() - 1).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(-7)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(1 << 40)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(7)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(1 << 50)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(1.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(-2.25)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("~/x y/é")
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte("\x00\xffin"))
	}
	panic("kind " + fd.Kind().String())
}

// answerCode is the Connect code of an answer: a unary call's status and
// body, or a stream's end message.
func answerCode(t *testing.T, stream bool, res *httptest.ResponseRecorder) string {
	t.Helper()
	body := res.Body.Bytes()
	if stream {
		for len(body) >= 5 {
			n := binary.BigEndian.Uint32(body[1:5])
			if uint32(len(body)-5) < n {
				break
			}
			if body[0]&2 != 0 { // the end of the stream
				body = body[5 : 5+n]
				var end struct {
					Error *struct{ Code string } `json:"error"`
				}
				if err := json.Unmarshal(body, &end); err != nil {
					t.Fatalf("end of stream %q: %v", body, err)
				}
				if end.Error == nil {
					return "ok"
				}
				return end.Error.Code
			}
			body = body[5+n:]
		}
		t.Fatalf("a stream's answer without its end: %d %q", res.Code, res.Body)
	}
	var e struct{ Code string }
	if err := json.Unmarshal(body, &e); err != nil || e.Code == "" {
		t.Fatalf("unary answer %d %q: %v", res.Code, body, err)
	}
	return e.Code
}

// FuzzConnectRequest: any body sent to any procedure of the process,
// filesystem, interpreter, packages and ports services, as Connect JSON
// or binary protobuf (a unary call's body, a stream's first message), is
// decoded by the very handlers envd serves, with the options it serves
// them with (server.HandlerOptions: the message limit, the interceptors,
// the recovery), or refused as a client's mistake (invalid_argument, or
// unimplemented for a stream without its message), never with an
// internal error. A request decoded comes back the same through both
// encodings.
func FuzzConnectRequest(f *testing.F) {
	methods := connectMethods()
	me, err := identity.Current()
	if err != nil {
		f.Skip(err)
	}
	c := &capture{}
	log := slog.New(slog.DiscardHandler)
	opts := append(server.HandlerOptions(log, defaults.New(me.Name, nil)), connect.WithInterceptors(c))
	mux := http.NewServeMux()
	mux.Handle(processconnect.NewProcessHandler(processconnect.UnimplementedProcessHandler{}, opts...))
	mux.Handle(filesystemconnect.NewFilesystemHandler(filesystemconnect.UnimplementedFilesystemHandler{}, opts...))
	mux.Handle(interpreterv1connect.NewInterpreterServiceHandler(interpreterv1connect.UnimplementedInterpreterServiceHandler{}, opts...))
	mux.Handle(packagesv1connect.NewPackageServiceHandler(packagesv1connect.UnimplementedPackageServiceHandler{}, opts...))
	mux.Handle(portsv1connect.NewPortServiceHandler(portsv1connect.UnimplementedPortServiceHandler{}, opts...))

	for i, m := range methods {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(m.Input().FullName())
		if err != nil {
			f.Fatal(err)
		}
		msg := mt.New()
		sample(msg, 3)
		js, err := protojson.Marshal(msg.Interface())
		if err != nil {
			f.Fatal(err)
		}
		bin, _ := proto.Marshal(msg.Interface())
		f.Add(uint8(i), false, js)
		f.Add(uint8(i), true, bin)
		f.Add(uint8(i), false, []byte("{}"))
	}
	index := func(proc string) uint8 {
		i := slices.IndexFunc(methods, func(m protoreflect.MethodDescriptor) bool { return procedure(m) == proc })
		if i < 0 {
			f.Fatalf("no procedure %s", proc)
		}
		return uint8(i)
	}
	for _, s := range [][2]string{
		{processconnect.ProcessStartProcedure, `{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],"envs":{"A":"1"},"cwd":"~"},"pty":{"size":{"cols":80,"rows":24}},"tag":"t","stdin":true}`},
		{processconnect.ProcessSendInputProcedure, `{"process":{"pid":1},"input":{"stdin":"aGVsbG8="}}`},
		{processconnect.ProcessSendInputProcedure, `{"process":{"pid":1},"input":{"pty":"aGVsbG8"}}`},
		{processconnect.ProcessSendSignalProcedure, `{"process":{"tag":"t"},"signal":"SIGNAL_SIGKILL"}`},
		{processconnect.ProcessSendSignalProcedure, `{"process":{"pid":1,"tag":"both"},"signal":9}`},
		{processconnect.ProcessStreamInputProcedure, `{"start":{"process":{"pid":1}}}`},
		{filesystemconnect.FilesystemListDirProcedure, `{"path":"/tmp","depth":4294967295}`},
		{filesystemconnect.FilesystemWatchDirProcedure, `{"path":"/tmp","recursive":true}`},
		{filesystemconnect.FilesystemMoveProcedure, `{"source":"~/a","destination":"../b"}`},
		{interpreterv1connect.InterpreterServiceExecuteProcedure, `{"code":"print(1)","language":"python","envVars":{"K":"V"},"timeout":"1.5s","contextId":"c"}`},
		{interpreterv1connect.InterpreterServiceExecuteProcedure, `{"code":"x","timeout":"-315576000000s"}`},
		{filesystemconnect.FilesystemStatProcedure, `{"unknownField":1,"path":"p"}`},
		{filesystemconnect.FilesystemStatProcedure, `{"path":"\ud800"}`},
		{filesystemconnect.FilesystemListDirProcedure, `{"path":null,"depth":"12","recursive":"true"}`},
		{filesystemconnect.FilesystemStatProcedure, `[]`},
		{filesystemconnect.FilesystemStatProcedure, `null`},
		{filesystemconnect.FilesystemStatProcedure, ``},
		{processconnect.ProcessStartProcedure, `{`},
		{processconnect.ProcessUpdateProcedure, `{"process":{"pid":1e999}}`},
	} {
		f.Add(index(s[0]), false, []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, which uint8, binaryCodec bool, body []byte) {
		m := methods[int(which)%len(methods)]
		stream := m.IsStreamingClient() || m.IsStreamingServer()
		ct := "application/json"
		if binaryCodec {
			ct = "application/proto"
		}
		sent := body
		if stream {
			ct = "application/connect+" + strings.TrimPrefix(ct, "application/")
			sent = envelope(0, body) // server_test.go
		}
		req := httptest.NewRequest(http.MethodPost, procedure(m), bytes.NewReader(sent))
		req.Header.Set("Content-Type", ct)
		if stream {
			req.Header.Set("Connect-Protocol-Version", "1")
		}
		res := httptest.NewRecorder()
		c.got = nil
		mux.ServeHTTP(res, req)
		code := answerCode(t, stream, res)
		got := c.got
		switch {
		case got != nil && code != decodedCode.String():
			t.Fatalf("%s: decoded, then %s", procedure(m), code)
		case got == nil && code != connect.CodeInvalidArgument.String() && code != connect.CodeUnimplemented.String():
			t.Fatalf("%s: %q refused with %s: %s", procedure(m), body, code, res.Body)
		case got == nil:
			return
		}
		if got.ProtoReflect().Descriptor() != m.Input() {
			t.Fatalf("%s: decoded a %s", procedure(m), got.ProtoReflect().Descriptor().FullName())
		}
		bin, err := proto.Marshal(got)
		again := got.ProtoReflect().New().Interface()
		if err != nil || proto.Unmarshal(bin, again) != nil || !proto.Equal(again, got) {
			t.Fatalf("%s: decoded %v; binary round trip %v, %v", procedure(m), got, again, err)
		}
		// JSON has no unknown fields (binary keeps them).
		known := got.ProtoReflect().New().Interface()
		if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(bin, known); err != nil {
			t.Fatal(err)
		}
		js, err := protojson.Marshal(got)
		if err != nil {
			t.Fatalf("%s: %v decoded, but not written back as JSON: %v", procedure(m), got, err)
		}
		again = got.ProtoReflect().New().Interface()
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(js, again); err != nil || !proto.Equal(again, known) {
			t.Fatalf("%s: decoded %v\nJSON %s\nread back %v, %v", procedure(m), got, js, again, err)
		}
	})
}
