package e2e_test

import (
	"context"
	"encoding/base64"
	"os/user"
	"strconv"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/process"
)

// basicAuth is the Authorization header that makes a request act as name.
func basicAuth(name string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(name+":"))
}

// TestGuestAccount: with startOptions.guest, a process started as guest
// through Basic auth runs with guest's ids and home, and the machine
// itself still has no such account.
func TestGuestAccount(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{guest: true})
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	pc := processClient(httpClient(t), e.url)
	req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{
		Cmd:  "/bin/sh",
		Args: []string{"-c", `echo "$(id -u) $(id -g) $(id -un) $HOME $(pwd)"`},
	}})
	req.Header().Set("Authorization", basicAuth(guestName))
	stream, err := pc.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var out string
	var end *pb.ProcessEvent_EndEvent
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		out += string(ev.GetData().GetStdout()) + string(ev.GetData().GetStderr())
		if ev.GetEnd() != nil {
			end = ev.GetEnd()
		}
	}
	stream.Close()
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v\nenvd:\n%s", err, e.stderr)
	}
	id := strconv.Itoa(guestUID)
	if want := id + " " + id + " " + guestName + " " + e.guestHome + " " + e.guestHome + "\n"; out != want || end.GetExitCode() != 0 {
		t.Errorf("as guest: %q, exit %d; want %q, exit 0", out, end.GetExitCode(), want)
	}
	if _, err := user.Lookup(guestName); err == nil {
		t.Errorf("the machine has an account %s: the test must not change it", guestName)
	}
}
