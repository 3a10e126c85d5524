package shellconnect_test

import (
	"testing"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/envd/shell/v1"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/process/processtest"
	"github.com/envd-dev/envd/internal/shell/shelltest"
)

// guest and other are unprivileged accounts the test server knows (see
// processtest.Options.Accounts): their shells run as uids 54321 and 54322.
var (
	guest = &identity.User{Name: "guest-test", UID: 54321, GID: 54321, Groups: []uint32{54321}, Home: "/", Shell: "/bin/sh"}
	other = &identity.User{Name: "other-test", UID: 54322, GID: 54322, Groups: []uint32{54322}, Home: "/", Shell: "/bin/sh"}
)

// TestStrictUsers: in strict mode a user sees and reaches only its own
// sessions; another user's answers as one that does not exist; a user
// other than root may not start a shell as someone else. Root sees all.
func TestStrictUsers(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("strict mode runs shells as other users")
	}
	srv := shelltest.New(t, shelltest.Options{StrictUsers: true, Accounts: []*identity.User{guest, other}})
	g := srv.Client(t, processtest.ClientOptions{User: guest.Name})
	o := srv.Client(t, processtest.ClientOptions{User: other.Name})
	root := srv.Client(t, processtest.ClientOptions{})
	id := shelltest.Create(t, g, &pb.CreateRequest{Cwd: "/tmp"})
	e := &env{t: t, srv: srv, c: g, id: id}
	if r := e.runOK(`id -u; echo "$PWD"`); string(r.Stdout) != "54321\n/tmp\n" {
		t.Errorf("guest's shell: %s", r)
	}
	ctx := e.ctx()
	// other cannot find guest's session, whatever it asks.
	for name, err := range map[string]error{
		"State": func() error { _, err := o.State(ctx, connect.NewRequest(&pb.StateRequest{SessionId: id})); return err }(),
		"Interrupt": func() error {
			_, err := o.Interrupt(ctx, connect.NewRequest(&pb.InterruptRequest{SessionId: id}))
			return err
		}(),
		"SendInput": func() error {
			_, err := o.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{SessionId: id, Data: []byte("x")}))
			return err
		}(),
		"Close": func() error { _, err := o.Close(ctx, connect.NewRequest(&pb.CloseRequest{SessionId: id})); return err }(),
		"Run":   shelltest.Run(t, o, &pb.RunRequest{SessionId: id, Command: "id"}).Err,
	} {
		var ce *connect.Error
		if !asConnect(err, &ce) || ce.Code() != connect.CodeNotFound || ce.Message() != `session "`+id+`" not found` {
			t.Errorf("%s by another user: %v, want exactly a missing session's not_found", name, err)
		}
	}
	if res, err := o.List(ctx, connect.NewRequest(&pb.ListRequest{})); err != nil || len(res.Msg.GetSessions()) != 0 {
		t.Errorf("other's List: %v, %v", res, err)
	}
	if res, err := g.List(ctx, connect.NewRequest(&pb.ListRequest{})); err != nil || len(res.Msg.GetSessions()) != 1 || res.Msg.GetSessions()[0].GetUser() != guest.Name {
		t.Errorf("guest's List: %v, %v", res, err)
	}
	if res, err := root.List(ctx, connect.NewRequest(&pb.ListRequest{})); err != nil || len(res.Msg.GetSessions()) != 1 {
		t.Errorf("root's List: %v, %v", res, err)
	}
	// guest may not start a shell as root; root may as anyone.
	_, err := g.Create(ctx, connect.NewRequest(&pb.CreateRequest{User: "root"}))
	wantErr(t, err, connect.CodePermissionDenied, "guest-test", "root")
	rid := shelltest.Create(t, root, &pb.CreateRequest{})
	if r := shelltest.Run(t, root, &pb.RunRequest{SessionId: id, Command: "id -u"}); string(r.Stdout) != "54321\n" {
		t.Errorf("root running in guest's session: %s", r)
	}
	if r := shelltest.Run(t, g, &pb.RunRequest{SessionId: rid, Command: "id -u"}); r.Err == nil {
		t.Errorf("guest running in root's session: %s", r)
	}
	// The shell's process is guest's in the process service too.
	pg := srv.ProcessClient(t, guest.Name)
	if got := processList(t, pg); len(got) != 1 || got[0] != "envd-shell:"+id {
		t.Errorf("guest's processes: %v", got)
	}
	if got := processList(t, srv.ProcessClient(t, other.Name)); len(got) != 0 {
		t.Errorf("other's processes: %v", got)
	}
}
