package handover_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	hpb "github.com/envd-dev/envd/gen/envd/handover/v1"
	"github.com/envd-dev/envd/internal/handover"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRecordRoundTrip: a record written to its memfd reads back whole,
// and the memfd is sealed against changes.
func TestRecordRoundTrip(t *testing.T) {
	t.Parallel()
	in := &hpb.Handover{Schema: handover.Schema, FromVersion: "1.2.3", Settings: &hpb.Settings{AccessToken: "tok"},
		Processes: []*hpb.Process{{Pid: 42, Output: &hpb.Output{Start: 3, End: 6, Records: []*hpb.Record{{Offset: 3, Kind: 1, Data: []byte("abc")}}}}}}
	f, err := handover.Write(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out, err := handover.Read(handover.FD(f))
	if err != nil {
		t.Fatal(err)
	}
	if out.GetFromVersion() != "1.2.3" || out.GetSettings().GetAccessToken() != "tok" || string(out.GetProcesses()[0].GetOutput().GetRecords()[0].GetData()) != "abc" {
		t.Errorf("read back %v", out)
	}
	if _, err := f.Write([]byte("x")); !errors.Is(err, unix.EPERM) {
		t.Errorf("write to the sealed record: %v, want EPERM", err)
	}
}

// TestRecordNewerSchemaRefused: the error names both schemas.
func TestRecordNewerSchemaRefused(t *testing.T) {
	t.Parallel()
	f, err := handover.Write(&hpb.Handover{Schema: handover.Schema + 1})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = handover.Read(handover.FD(f))
	var se *handover.SchemaError
	if !errors.As(err, &se) {
		t.Fatalf("read a newer record: %v, want a SchemaError", err)
	}
	for _, want := range []string{"schema 2 is newer than schema 1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestOpenBinaryRefusals: what may not replace envd, checked on the open
// file (the e2e tests cover the rest through POST /upgrade).
func TestOpenBinaryRefusals(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the checks want root-owned files")
	}
	dir := t.TempDir()
	write := func(name string, b []byte, mode os.FileMode) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	elf := append([]byte("\x7fELF"), make([]byte, 60)...)
	for _, tc := range []struct {
		name, path, sha string
		kind            error
		want            string
	}{
		{"relative", "x/envd", "", handover.ErrInvalid, "relative"},
		{"empty", "", "", handover.ErrInvalid, "missing"},
		{"bad sha", write("a", elf, 0o755), "zz", handover.ErrInvalid, "64 hex digits"},
		{"group-writable", write("b", elf, 0o775), "", handover.ErrRefused, "writable by its group"},
		{"not elf", write("c", []byte("#!/bin/sh\n"), 0o755), "", handover.ErrRefused, "not an ELF"},
		{"directory", dir, "", handover.ErrRefused, "not a regular file"},
	} {
		_, err := handover.OpenBinary(tc.path, tc.sha)
		if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %v with %q", tc.name, err, tc.kind, tc.want)
		}
	}
	b, err := handover.OpenBinary(write("ok", elf, 0o755), "")
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
}
