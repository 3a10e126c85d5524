package daemon

import (
	"os"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	hpb "github.com/envd-dev/envd/gen/envd/handover/v1"
	"github.com/envd-dev/envd/internal/handover"
	"github.com/envd-dev/envd/internal/outbuf"
	"github.com/envd-dev/envd/internal/process"
	"github.com/envd-dev/envd/internal/reaper"
)

// TestProcessesRoundTrip: the processes a live upgrade hands over come
// back from the record, written and read back, as the process domain
// described them, every field; the record names every descriptor, and the
// domain accepts what comes back (PrepareAdopt, which changes nothing).
func TestProcessesRoundTrip(t *testing.T) {
	t.Parallel()
	pipe := func() (r, w *os.File) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(); w.Close() })
		return r, w
	}
	outR, _ := pipe()
	errR, _ := pipe()
	_, inW := pipe()
	ptyR, _ := pipe() // stands for a terminal's master: PrepareAdopt checks that it is open
	fd := handover.FD
	tag, cwd := "web", "/srv"
	recs := []outbuf.Record{
		{Off: 100, Kind: process.Stdout, Data: []byte("out\n")},
		{Off: 104, Kind: process.Stderr, Data: []byte("err\n")},
		{Off: 108, Kind: process.Stdout, Data: []byte("more")},
	}
	s := process.Snapshot{
		Live: []process.LiveState{
			{
				Pid: 4242, Tag: &tag, Owner: 1000,
				Config: process.Config{Cmd: "/bin/sh", Args: []string{"-c", "serve"}, Envs: map[string]string{"A": "1"}, Cwd: &cwd},
				Output: process.Output{Start: 100, End: 112, Records: recs},
				Stdout: fd(outR), Stderr: fd(errR), Stdin: fd(inW), PTY: process.NoFD,
				Timeout: 90 * time.Second, Cgroup: "user/p-4242", Killed: true,
				Sent:   map[syscall.Signal]process.EndReason{syscall.SIGTERM: process.EndShutdown, syscall.SIGKILL: process.EndTimedOut, syscall.SIGINT: process.EndClientSignal},
				Reaped: &reaper.Exit{Status: 9, Usage: &syscall.Rusage{Utime: syscall.Timeval{Sec: 1, Usec: 500}, Stime: syscall.Timeval{Usec: 20}, Maxrss: 2048}},
			},
			{
				Pid: 4243, Owner: 0, Config: process.Config{Cmd: "bash"},
				Output: process.Output{Start: 0, End: 3, Records: []outbuf.Record{{Off: 0, Kind: process.PTY, Data: []byte("$ \a")}}},
				Stdout: process.NoFD, Stderr: process.NoFD, Stdin: process.NoFD, PTY: fd(ptyR),
			},
			{
				Pid: 4244, Owner: 1000, Config: process.Config{Cmd: "cat"},
				Stdout: fd(outR), Stderr: fd(errR), Stdin: process.NoFD, PTY: process.NoFD,
				Reaped: &reaper.Exit{Status: 0},
			},
		},
	}
	reasons := []process.EndReason{process.EndExited, process.EndSignaled, process.EndTimedOut, process.EndClientSignal, process.EndShutdown, process.EndOOMKilled}
	for i, r := range reasons {
		ex := process.Exit{Code: i, Exited: r == process.EndExited, Status: "status " + r.String(), Reason: r}
		if i%2 == 0 {
			ex.Usage = &process.Usage{UserCPU: time.Duration(i+1) * time.Millisecond, SystemCPU: 3 * time.Microsecond, MaxRSS: 1 << 20, MemoryPeak: 3 << 20}
		}
		s.Ended = append(s.Ended, process.EndedState{
			Pid: uint32(5000 + i), Tag: &tag, Owner: 1000, Config: process.Config{Cmd: "echo", Args: []string{r.String()}},
			PTY: i == 1, Exit: ex, Output: process.Output{Start: 7, End: 11, Records: []outbuf.Record{{Off: 7, Kind: process.Stdout, Data: []byte("done")}}},
			Retention: time.Duration(i+1) * time.Second,
		})
	}

	live, ended, fds := processesToProto(s)
	want := []int{fd(outR), fd(errR), fd(inW), fd(ptyR), fd(outR), fd(errR)}
	if !reflect.DeepEqual(fds, want) {
		t.Errorf("descriptors named = %v, want %v", fds, want)
	}
	b, err := proto.Marshal(&hpb.Handover{Processes: live, Ended: ended})
	if err != nil {
		t.Fatal(err)
	}
	var rec hpb.Handover
	if err := proto.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&rec, &hpb.Handover{Processes: live, Ended: ended}) {
		t.Error("the record read back is not the record written")
	}
	got, err := processesFromProto(rec.GetProcesses(), rec.GetEnded())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, s)
	}
	m := process.NewManager(process.Options{})
	if _, err := m.PrepareAdopt(got); err != nil {
		t.Errorf("PrepareAdopt of the processes read back: %v", err)
	}
}

// TestProcessesFromBadRecord: a record the domain cannot hold is refused
// with what is wrong, and an end reason this envd does not know reads as a
// signal's.
func TestProcessesFromBadRecord(t *testing.T) {
	t.Parallel()
	cmd := &hpb.Command{Cmd: "true"}
	badOutput := &hpb.Output{End: 1, Records: []*hpb.Record{{Offset: 0, Kind: 256, Data: []byte("x")}}}
	tests := []struct {
		name  string
		live  []*hpb.Process
		ended []*hpb.EndedProcess
		want  string
	}{
		{"no command", []*hpb.Process{{Pid: 7}}, nil, "a process without pid or command"},
		{"record kind", []*hpb.Process{{Pid: 7, Command: cmd, Output: badOutput}}, nil, "process 7: output record kind 256"},
		{"ended record kind", nil, []*hpb.EndedProcess{{Pid: 8, Command: cmd, Output: badOutput}}, "ended process 8: output record kind 256"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := processesFromProto(tt.live, tt.ended)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
	s, err := processesFromProto(nil, []*hpb.EndedProcess{{Pid: 9, Exit: &hpb.Exit{Reason: hpb.EndReason_END_REASON_UNSPECIFIED}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := s.Ended[0].Exit.Reason; r != process.EndSignaled {
		t.Errorf("an unspecified reason reads as %v, want %v", r, process.EndSignaled)
	}
}
