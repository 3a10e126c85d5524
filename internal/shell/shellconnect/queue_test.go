package shellconnect_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/envd/shell/v1"
	"github.com/envd-dev/envd/internal/shell"
	"github.com/envd-dev/envd/internal/shell/shelltest"
)

// TestQueue: commands of a session run one at a time, in the order their
// Runs came; one that waits says how many are ahead; a full queue refuses.
func TestQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shelltest.Options{Shell: shell.Options{MaxQueued: 2}}, &pb.CreateRequest{})
	// The first command waits for input: the others queue behind it.
	first := e.start(&pb.RunRequest{Command: `head -c 1 >/dev/null; echo first`, Stdin: true})
	firstSeq := e.started.GetSeq()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	var streams []*connect.ServerStreamForClient[pb.RunResponse]
	for i := range 2 {
		st, err := e.c.Run(ctx, connect.NewRequest(&pb.RunRequest{SessionId: e.id, Command: fmt.Sprintf("echo queued%d", i)}))
		if err != nil {
			t.Fatal(err)
		}
		if !st.Receive() || st.Msg().GetEvent().GetQueued().GetAhead() != uint32(i+1) {
			t.Fatalf("command %d: first event %v (%v), want queued with %d ahead", i, st.Msg(), st.Err(), i+1)
		}
		streams = append(streams, st)
	}
	if s := e.state(); s.GetQueued() != 2 || s.GetRunning() == nil || !s.GetSession().GetBusy() {
		t.Errorf("state while busy: %v", s)
	}
	r := shelltest.Run(t, e.c, &pb.RunRequest{SessionId: e.id, Command: "echo too many"})
	wantErr(t, r.Err, connect.CodeResourceExhausted, "2 commands waiting")
	if _, err := e.c.SendInput(e.ctx(), connect.NewRequest(&pb.SendInputRequest{SessionId: e.id, Data: []byte("x")})); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	r = rest(first)
	seqs = append(seqs, firstSeq)
	if string(r.Stdout) != "first\n" {
		t.Errorf("first: %s", r)
	}
	for i, st := range streams {
		r := rest(st)
		if string(r.Stdout) != fmt.Sprintf("queued%d\n", i) || r.Order != "soe" {
			t.Errorf("queued command %d: %s", i, r)
		}
		seqs = append(seqs, r.Started.GetSeq())
	}
	if seqs[1] != seqs[0]+1 || seqs[2] != seqs[1]+1 {
		t.Errorf("seqs %v: not in the order of the Runs", seqs)
	}
	if s := e.state(); s.GetSession().GetCommands() != 3 || s.GetSession().GetBusy() || s.GetQueued() != 0 {
		t.Errorf("state after: %v", s)
	}
}

// TestConcurrentSessions: 8 sessions run at once, each its own shell.
func TestConcurrentSessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shelltest.Options{}, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			res, err := e.c.Create(ctx, connect.NewRequest(&pb.CreateRequest{Cwd: "/tmp"}))
			if err != nil {
				errs <- err
				return
			}
			id := res.Msg.GetSession().GetId()
			for j := range 3 {
				r := shelltest.Run(t, e.c, &pb.RunRequest{SessionId: id, Command: fmt.Sprintf("export N=${N:-%d}; echo $N-%d; echo err-%d >&2", i, j, j)})
				if want := fmt.Sprintf("%d-%d\n", i, j); string(r.Stdout) != want || string(r.Stderr) != fmt.Sprintf("err-%d\n", j) {
					errs <- fmt.Errorf("session %d command %d: %s, want stdout %q", i, j, r, want)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	res, err := e.c.List(e.ctx(), connect.NewRequest(&pb.ListRequest{}))
	if err != nil || len(res.Msg.GetSessions()) != 8 {
		t.Errorf("List: %v, %v", res, err)
	}
}
