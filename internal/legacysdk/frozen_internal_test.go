package legacysdk

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/emptypb"

	legacyfs "github.com/envd-dev/envd/gen/envd/legacy/filesystem/v1"
	legacyproc "github.com/envd-dev/envd/gen/envd/legacy/process/v1"
	fspb "github.com/envd-dev/envd/gen/filesystem"
	"github.com/envd-dev/envd/gen/filesystem/filesystemconnect"
	procpb "github.com/envd-dev/envd/gen/process"
)

// unfrozen are the responses of the two services that the old services do
// not have, and that Message turns into an empty message. A new RPC fails
// TestEveryResponseFrozen until its response gets a frozen copy or joins
// this list (only if old clients may get it empty).
var unfrozen = map[protoreflect.FullName]bool{
	"process.CloseStdinResponse": true,
}

// TestEveryResponseFrozen: every response of process.Process and
// filesystem.Filesystem has a frozen copy of the same name whose every
// field, recursively, is a field of ours with the same number, name, JSON
// name, kind, cardinality, presence and oneof, and whose enum values are
// ours: so the binary round trip of Message is exact, and an old client
// reads the JSON names it knows.
func TestEveryResponseFrozen(t *testing.T) {
	t.Parallel()
	services := []protoreflect.ServiceDescriptor{
		procpb.File_process_process_proto.Services().ByName("Process"),
		fspb.File_filesystem_filesystem_proto.Services().ByName("Filesystem"),
	}
	n := 0
	for _, s := range services {
		for i := range s.Methods().Len() {
			m := s.Methods().Get(i)
			out := m.Output()
			c, ok := frozen[out.FullName()]
			if !ok {
				if !unfrozen[out.FullName()] {
					t.Errorf("%s returns %s, which has no frozen copy: add one to frozen (proto/envd/legacy), or to unfrozen if old clients may get it empty", m.FullName(), out.FullName())
				}
				if out.Fields().Len() != 0 {
					t.Errorf("%s has fields, but old clients get it empty", out.FullName())
				}
				continue
			}
			n++
			mt, err := protoregistry.GlobalTypes.FindMessageByName(out.FullName())
			if err != nil {
				t.Fatal(err)
			}
			f, err := c.message(mt.New().Interface())
			if err != nil {
				t.Fatalf("%s: %v", out.FullName(), err)
			}
			fd := f.ProtoReflect().Descriptor()
			if fd.Name() != out.Name() {
				t.Errorf("%s is frozen as %s", out.FullName(), fd.FullName())
			}
			subset(t, fd, out, map[protoreflect.FullName]bool{})
		}
	}
	if n != len(frozen) {
		t.Errorf("%d responses have frozen copies, the table has %d", n, len(frozen))
	}
}

func subset(t *testing.T, frozen, ours protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) {
	t.Helper()
	if seen[frozen.FullName()] {
		return
	}
	seen[frozen.FullName()] = true
	for i := range frozen.Fields().Len() {
		f := frozen.Fields().Get(i)
		o := ours.Fields().ByNumber(f.Number())
		if o == nil {
			t.Errorf("%s: %s has no field %d", f.FullName(), ours.FullName(), f.Number())
			continue
		}
		if o.Name() != f.Name() || o.JSONName() != f.JSONName() || o.Kind() != f.Kind() || o.Cardinality() != f.Cardinality() ||
			o.IsMap() != f.IsMap() || o.HasPresence() != f.HasPresence() {
			t.Errorf("%s differs from %s", f.FullName(), o.FullName())
		}
		if (f.ContainingOneof() == nil) != (o.ContainingOneof() == nil) ||
			f.ContainingOneof() != nil && f.ContainingOneof().Name() != o.ContainingOneof().Name() {
			t.Errorf("%s and %s are not in the same oneof", f.FullName(), o.FullName())
		}
		switch {
		case f.Message() != nil && o.Message() != nil:
			subset(t, f.Message(), o.Message(), seen)
		case f.Enum() != nil && o.Enum() != nil:
			for j := range f.Enum().Values().Len() {
				v := f.Enum().Values().Get(j)
				if ov := o.Enum().Values().ByNumber(v.Number()); ov == nil || ov.Name() != v.Name() {
					t.Errorf("%s: %s = %d is not ours", f.FullName(), v.Name(), v.Number())
				}
			}
		}
	}
}

func TestIsLegacy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ua   string
		want bool
	}{
		{"bare", "connect-python", true},
		{"version", "connect-python/0.4", true},
		{"case", "Connect-Python/1.0", true},
		{"new python sdk", "e2b-python-sdk/1.5.0", false},
		{"js sdk", "e2b-js-sdk/2.51.0", false},
		{"go", "connect-go/1.21.1 (go1.26)", false},
		{"short", "connect-pytho", false},
		{"inside", "x connect-python", false},
		{"empty", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := IsLegacy(tc.ua); got != tc.want {
				t.Errorf("IsLegacy(%q) = %v", tc.ua, got)
			}
		})
	}
}

// TestSymlinkType: a file type the frozen enum lacks (FILE_TYPE_SYMLINK,
// which envd does not send today: a symlink has its target's type) goes to
// an old client as its number, as upstream: proto3 enums are open, so it
// decodes (the Python SDK then knows neither file nor directory).
func TestSymlinkType(t *testing.T) {
	t.Parallel()
	m, err := Message(&fspb.StatResponse{Entry: &fspb.EntryInfo{Name: "l", Type: fspb.FileType_FILE_TYPE_SYMLINK, Path: "/l", Size: 3}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Entry map[string]any `json:"entry"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	if raw.Entry["type"] != float64(3) || len(raw.Entry) != 3 {
		t.Errorf("entry %s: want name, path and type 3", b)
	}
	var got legacyfs.StatResponse
	if err := protojson.Unmarshal(b, &got); err != nil || got.GetEntry().GetType() != 3 {
		t.Errorf("strict decode of %s: %v, %v", b, err, got.GetEntry())
	}
}

// TestUnfrozenIsEmpty: a response without a frozen copy goes as "{}".
func TestUnfrozenIsEmpty(t *testing.T) {
	t.Parallel()
	m, err := Message(&procpb.CloseStdinResponse{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.(*emptypb.Empty); !ok {
		t.Errorf("CloseStdinResponse became %T", m)
	}
}

// TestUnary: the interceptor converts a legacy client's unary answer and
// keeps its header; an error, and every other client's answer, are the
// handler's own.
func TestUnary(t *testing.T) {
	t.Parallel()
	full := &fspb.StatResponse{Entry: &fspb.EntryInfo{Name: "a", Type: fspb.FileType_FILE_TYPE_FILE, Path: "/a", Size: 5, Owner: "root"}}
	handlerErr := connect.NewError(connect.CodeNotFound, errors.New("no such file"))
	call := func(ua string, fail bool) (connect.AnyResponse, error) {
		next := func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
			if fail {
				return nil, handlerErr
			}
			res := connect.NewResponse(full)
			res.Header().Set("X-Mine", "1")
			res.Trailer().Set("X-Trailer", "2")
			return res, nil
		}
		req := &fakeRequest{connect.NewRequest(&fspb.StatRequest{}), filesystemconnect.FilesystemStatProcedure}
		req.Header().Set("User-Agent", ua)
		return Interceptor().WrapUnary(next)(context.Background(), req)
	}

	res, err := call("connect-python/0.4", false)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := res.Any().(*legacyfs.StatResponse)
	if !ok || got.GetEntry().GetName() != "a" || got.GetEntry().GetPath() != "/a" || got.GetEntry().GetType() != legacyfs.FileType_FILE_TYPE_FILE {
		t.Errorf("legacy answer %T %v", res.Any(), res.Any())
	}
	if res.Header().Get(Header) != "true" || res.Header().Get("X-Mine") != "1" || res.Trailer().Get("X-Trailer") != "2" {
		t.Errorf("legacy header %v, trailer %v", res.Header(), res.Trailer())
	}

	if _, err := call("connect-python", true); !errors.Is(err, handlerErr) {
		t.Errorf("error %v, want the handler's", err)
	}

	res, err = call("e2b-js-sdk/2.51.0", false)
	if err != nil || res.Any() != full || res.Header().Get(Header) != "" {
		t.Errorf("other client got %T %v (%v), header %v", res.Any(), res.Any(), err, res.Header())
	}
}

// TestOtherServices: a legacy client of another service gets its answers
// as they are.
func TestOtherServices(t *testing.T) {
	t.Parallel()
	want := connect.NewResponse(&fspb.StatResponse{Entry: &fspb.EntryInfo{Size: 5}})
	next := func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) { return want, nil }
	req := &fakeRequest{connect.NewRequest(&fspb.StatRequest{}), "/envd.ports.v1.PortService/List"}
	req.Header().Set("User-Agent", "connect-python")
	res, err := Interceptor().WrapUnary(next)(context.Background(), req)
	if err != nil || res != want || res.Header().Get(Header) != "" {
		t.Errorf("got %v (%v), header %v", res, err, res.Header())
	}
}

// TestOthersCostNothing: for every other client the interceptor allocates
// nothing, unary or streaming: it reads one header.
func TestOthersCostNothing(t *testing.T) {
	res := connect.NewResponse(&fspb.StatResponse{})
	unary := Interceptor().WrapUnary(func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) { return res, nil })
	req := &fakeRequest{connect.NewRequest(&fspb.StatRequest{}), filesystemconnect.FilesystemStatProcedure}
	req.Header().Set("User-Agent", "e2b-js-sdk/2.51.0")
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() { unary(ctx, req) }); n != 0 {
		t.Errorf("unary: %v allocations per call", n)
	}

	stream := Interceptor().WrapStreamingHandler(func(context.Context, connect.StreamingHandlerConn) error { return nil })
	conn := &fakeConn{header: http.Header{"User-Agent": {"e2b-js-sdk/2.51.0"}}}
	if n := testing.AllocsPerRun(100, func() { stream(ctx, conn) }); n != 0 {
		t.Errorf("stream: %v allocations per call", n)
	}
}

// TestStreamSend: a legacy stream's messages are converted on Send.
func TestStreamSend(t *testing.T) {
	t.Parallel()
	conn := &fakeConn{header: http.Header{"User-Agent": {"connect-python"}}, procedure: "/process.Process/Start", resHeader: http.Header{}}
	stream := Interceptor().WrapStreamingHandler(func(_ context.Context, c connect.StreamingHandlerConn) error {
		return c.Send(&procpb.StartResponse{Event: &procpb.ProcessEvent{Event: &procpb.ProcessEvent_End{End: &procpb.ProcessEvent_EndEvent{
			ExitCode: 2, Exited: true, Status: "exit status 2", Reason: procpb.ProcessEvent_END_REASON_EXITED,
			Usage: &procpb.ProcessEvent_ResourceUsage{MaxRssBytes: 1 << 20},
		}}}})
	})
	if err := stream(context.Background(), conn); err != nil {
		t.Fatal(err)
	}
	if len(conn.sent) != 1 {
		t.Fatalf("sent %v", conn.sent)
	}
	want := &legacyproc.StartResponse{Event: &legacyproc.ProcessEvent{Event: &legacyproc.ProcessEvent_End{End: &legacyproc.ProcessEvent_EndEvent{
		ExitCode: 2, Exited: true, Status: "exit status 2",
	}}}}
	if got, ok := conn.sent[0].(proto.Message); !ok || !proto.Equal(got, want) {
		t.Errorf("sent %v, want %v", conn.sent[0], want)
	}
	if conn.resHeader.Get(Header) != "true" {
		t.Errorf("response header %v", conn.resHeader)
	}
}

// fakeRequest is a request to procedure.
type fakeRequest struct {
	*connect.Request[fspb.StatRequest]
	procedure string
}

func (r *fakeRequest) Spec() connect.Spec { return connect.Spec{Procedure: r.procedure} }

// fakeConn records what is sent on it.
type fakeConn struct {
	connect.StreamingHandlerConn // nil: only what is below is called
	header, resHeader            http.Header
	procedure                    string
	sent                         []any
}

func (c *fakeConn) RequestHeader() http.Header  { return c.header }
func (c *fakeConn) ResponseHeader() http.Header { return c.resHeader }
func (c *fakeConn) Spec() connect.Spec          { return connect.Spec{Procedure: c.procedure} }
func (c *fakeConn) Send(m any) error {
	c.sent = append(c.sent, m)
	return nil
}
