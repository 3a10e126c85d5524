package process_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/gen/process/processconnect"
	"github.com/envd-dev/envd/internal/identity"
	"github.com/envd-dev/envd/internal/process/processtest"
)

// guest is a second unprivileged account, in no group of the machine's. It
// cannot be added to /etc/passwd here: the test servers know it as one of
// their Accounts, and a process runs as it all the same (uid and gid
// 54321, home "/").
var guest = &identity.User{Name: "guest-test", UID: 54321, GID: 54321, Groups: []uint32{54321}, Home: "/", Shell: "/bin/sh"}

// rootTree makes, for the cwd tests, a root-owned directory every user may
// enter, holding a file, a directory the others may see but not enter, and
// a root 0700 directory with a file f and a directory d inside. It is
// removed at cleanup.
func rootTree(t *testing.T) (base string) {
	t.Helper()
	base, err := os.MkdirTemp("", "envd-cwd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	for _, step := range []error{
		os.Chmod(base, 0o755),
		os.WriteFile(filepath.Join(base, "file"), nil, 0o644),
		os.Mkdir(filepath.Join(base, "closed"), 0o744),
		os.Mkdir(filepath.Join(base, "private"), 0o700),
		os.WriteFile(filepath.Join(base, "private", "f"), nil, 0o644),
		os.Mkdir(filepath.Join(base, "private", "d"), 0o755),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
	return base
}

// startErr starts cwd's process and returns the Connect error it gets, nil
// when the process ran.
func startErr(t *testing.T, c processconnect.ProcessClient, cwd string) *connect.Error {
	t.Helper()
	cfg := processtest.Sh("true")
	cfg.Cwd = &cwd
	err := processtest.StartCall(c, &pb.StartRequest{Process: cfg})(bounded(t))
	if errors.Is(err, processtest.ErrAccepted) {
		// A started process: see that it ends.
		return nil
	}
	var ce *connect.Error
	if err != nil && !errors.As(err, &ce) {
		t.Fatalf("Start in %s: %v", cwd, err)
	}
	return ce
}

// TestCwdAsUser: a cwd is checked with the requesting user's own rights, in
// both modes. Inside a root 0700 directory a user learns nothing: a missing
// path, a file and a directory all get the same permission denied, naming
// the directory the user may not enter, exactly as `cd` in a shell as that
// user. Where the user can see, the answer says what is wrong.
func TestCwdAsUser(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	base := rootTree(t)
	private := filepath.Join(base, "private")
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprintf("strict=%v", strict), func(t *testing.T) {
			t.Parallel()
			s := processtest.New(t, processtest.Options{StrictUsers: strict, Accounts: []*identity.User{guest}})
			for _, name := range []string{"user", guest.Name} {
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					c := s.Client(t, processtest.ClientOptions{User: name})
					const denied = "cwd '%s': user '%s' may not enter '%s': permission denied"
					for _, in := range []string{"missing", "f", "d", "d/deeper", "f/x"} {
						cwd := filepath.Join(private, in)
						ce := startErr(t, c, cwd)
						if ce == nil {
							t.Errorf("cwd %s: the process started", cwd)
							continue
						}
						if want := fmt.Sprintf(denied, cwd, name, private); ce.Code() != connect.CodePermissionDenied || ce.Message() != want {
							t.Errorf("cwd %s: %v %q, want %v %q", cwd, ce.Code(), ce.Message(), connect.CodePermissionDenied, want)
						}
					}
					for _, tc := range []struct {
						cwd  string
						code connect.Code
						msg  string
					}{
						{base + "/nope", connect.CodeInvalidArgument, "cwd '" + base + "/nope' does not exist"},
						{base + "/file", connect.CodeInvalidArgument, "cwd '" + base + "/file' is not a directory"},
						{base + "/file/x", connect.CodeInvalidArgument, "cwd '" + base + "/file/x' does not exist: part of its path is not a directory"},
						{base + "/closed", connect.CodePermissionDenied, fmt.Sprintf(denied, base+"/closed", name, base+"/closed")},
						{base + "/closed/x", connect.CodePermissionDenied, fmt.Sprintf(denied, base+"/closed/x", name, base+"/closed")},
					} {
						ce := startErr(t, c, tc.cwd)
						if ce == nil || ce.Code() != tc.code || ce.Message() != tc.msg {
							t.Errorf("cwd %s: %v, want %v %q", tc.cwd, ce, tc.code, tc.msg)
						}
					}
					if ce := startErr(t, c, base); ce != nil {
						t.Errorf("cwd %s: %v, want it to run", base, ce)
					}
				})
			}
			t.Run("root", func(t *testing.T) {
				t.Parallel()
				c := s.Client(t, processtest.ClientOptions{User: "root"})
				for _, tc := range []struct{ cwd, msg string }{
					{private + "/missing", "cwd '" + private + "/missing' does not exist"},
					{private + "/f", "cwd '" + private + "/f' is not a directory"},
				} {
					ce := startErr(t, c, tc.cwd)
					if ce == nil || ce.Code() != connect.CodeInvalidArgument || ce.Message() != tc.msg {
						t.Errorf("cwd %s as root: %v, want invalid_argument %q", tc.cwd, ce, tc.msg)
					}
				}
				if ce := startErr(t, c, private+"/d"); ce != nil {
					t.Errorf("cwd %s/d as root: %v, want it to run", private, ce)
				}
			})
		})
	}
}

// owned is one user's process in the ownership tests: `cat`, with stdin,
// after printing its uid.
type owned struct {
	name string
	c    processconnect.ProcessClient
	w    *processtest.Watcher
	pid  uint32
	tag  string
}

// startOwned starts, as each named user in turn, `id -u; exec cat` with a
// tag of its own.
func startOwned(t *testing.T, s *processtest.Server, names ...string) map[string]*owned {
	t.Helper()
	out := map[string]*owned{}
	for _, name := range names {
		o := &owned{name: name, c: s.Client(t, processtest.ClientOptions{User: name}), tag: processtest.UniqueTag("owned-" + name)}
		o.w = start(t, o.c, &pb.StartRequest{Process: processtest.Sh("id -u; exec cat"), Tag: &o.tag})
		o.pid = o.w.Pid(t)
		out[name] = o
	}
	return out
}

func uidOf(t *testing.T, name string) string {
	if name == guest.Name {
		return strconv.Itoa(int(guest.UID))
	}
	return strconv.Itoa(int(lookup(t, name).UID))
}

// listedPids is the requester's List, as pids.
func listedPids(t *testing.T, c processconnect.ProcessClient) []uint32 {
	t.Helper()
	res, err := c.List(bounded(t), connect.NewRequest(&pb.ListRequest{}))
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var pids []uint32
	for _, p := range res.Msg.GetProcesses() {
		pids = append(pids, p.GetPid())
	}
	slices.Sort(pids)
	return pids
}

// selectorCalls are every RPC that names a process, each as a call that
// should fail at once.
func selectorCalls(c processconnect.ProcessClient, sel *pb.ProcessSelector) map[string]processtest.Call {
	return map[string]processtest.Call{
		"Connect":            processtest.ConnectCall(c, sel),
		"SendInput":          processtest.SendInputCall(c, sel, processtest.StdinInput("leak\n")),
		"StreamInput":        processtest.StreamInputCall(c, sel, processtest.StdinInput("leak\n")),
		"CloseStdin":         processtest.CloseStdinCall(c, sel),
		"SendSignal SIGKILL": processtest.SendSignalCall(c, sel, pb.Signal_SIGNAL_SIGKILL),
		"SendSignal SIGTERM": processtest.SendSignalCall(c, sel, pb.Signal_SIGNAL_SIGTERM),
		"Update":             processtest.UpdateCall(c, sel, processtest.PTYSize(100, 30)),
	}
}

// wireErr is the code and message of a Connect error.
func wireErr(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return fmt.Sprintf("not a Connect error: %v", err)
	}
	return ce.Code().String() + ": " + ce.Message()
}

// TestStrictUsersOwnProcesses: in strict mode a user other than root finds
// only the processes it started. Another user's process, by pid or tag,
// running or ended, answers every RPC exactly as a process that does not
// exist; root finds and acts on all.
func TestStrictUsersOwnProcesses(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	s := processtest.New(t, processtest.Options{StrictUsers: true, Accounts: []*identity.User{guest}})
	users := []string{"root", "user", guest.Name}
	ps := startOwned(t, s, users...)
	for _, name := range users {
		if out := ps[name].w.Output(t, waitShort, "\n").Stdout; strings.TrimSpace(out) != uidOf(t, name) {
			t.Errorf("%s's process printed uid %q, want %s", name, out, uidOf(t, name))
		}
	}
	// A process of root's that ended, still retained.
	endedTag := processtest.UniqueTag("ended-root")
	ended := start(t, ps["root"].c, &pb.StartRequest{Process: processtest.Sh("exit 0"), Tag: &endedTag})
	endedPid := ended.Pid(t)
	ended.End(t, waitShort)

	all := []uint32{ps["root"].pid, ps["user"].pid, ps[guest.Name].pid}
	slices.Sort(all)
	if got := listedPids(t, ps["root"].c); !slices.Equal(got, all) {
		t.Errorf("root's List = %v, want all of %v", got, all)
	}
	for _, name := range []string{"user", guest.Name} {
		if got := listedPids(t, ps[name].c); !slices.Equal(got, []uint32{ps[name].pid}) {
			t.Errorf("%s's List = %v, want only its own %d", name, got, ps[name].pid)
		}
	}

	const bogusPid = 999_999_999
	bogusTag := processtest.UniqueTag("bogus")
	for _, name := range []string{"user", guest.Name} {
		c := ps[name].c
		// What a process that does not exist answers, by pid and by tag.
		nothing := map[string]string{}
		for call, fn := range selectorCalls(c, processtest.PidSel(bogusPid)) {
			nothing["pid "+call] = wireErr(fn(bounded(t)))
		}
		for call, fn := range selectorCalls(c, processtest.TagSel(bogusTag)) {
			nothing["tag "+call] = wireErr(fn(bounded(t)))
		}
		type target struct {
			pid uint32
			tag string
		}
		var others []target
		for _, o := range users {
			if o != name {
				others = append(others, target{ps[o].pid, ps[o].tag})
			}
		}
		others = append(others, target{endedPid, endedTag})
		for _, o := range others {
			t.Run(fmt.Sprintf("%s on pid %d", name, o.pid), func(t *testing.T) {
				for call, fn := range selectorCalls(c, processtest.PidSel(o.pid)) {
					want := strings.ReplaceAll(nothing["pid "+call], strconv.Itoa(bogusPid), strconv.Itoa(int(o.pid)))
					if got := wireErr(fn(bounded(t))); got != want || !strings.HasPrefix(got, "not_found: ") {
						t.Errorf("%s by pid: %s\n  want as a missing pid: %s", call, got, want)
					}
				}
				for call, fn := range selectorCalls(c, processtest.TagSel(o.tag)) {
					want := strings.ReplaceAll(nothing["tag "+call], bogusTag, o.tag)
					if got := wireErr(fn(bounded(t))); got != want || !strings.HasPrefix(got, "not_found: ") {
						t.Errorf("%s by tag: %s\n  want as a missing tag: %s", call, got, want)
					}
				}
			})
		}
	}
	// Nothing reached the others' processes: all still run, and none got
	// the input.
	if got := listedPids(t, ps["root"].c); !slices.Equal(got, all) {
		t.Errorf("after the others' attempts root's List = %v, want all of %v", got, all)
	}

	// Each user acts on its own: input, by tag too, and closing stdin.
	for _, name := range []string{"user", guest.Name} {
		o := ps[name]
		if _, err := o.c.SendInput(bounded(t), connect.NewRequest(&pb.SendInputRequest{Process: processtest.TagSel(o.tag), Input: processtest.StdinInput("mine\n")})); err != nil {
			t.Fatalf("%s SendInput to its own by tag: %v", name, err)
		}
		byTag := processtest.Connect(t, o.c, processtest.TagSel(o.tag), processtest.WatchOptions{})
		if got := byTag.Pid(t); got != o.pid {
			t.Errorf("%s Connect to its own tag: pid %d, want %d", name, got, o.pid)
		}
		byTag.Output(t, waitShort, "mine\n")
		if _, err := o.c.CloseStdin(bounded(t), connect.NewRequest(&pb.CloseStdinRequest{Process: processtest.PidSel(o.pid)})); err != nil {
			t.Fatalf("%s CloseStdin of its own: %v", name, err)
		}
		st := o.w.End(t, waitShort)
		checkEnd(t, st, exit0)
		if want := uidOf(t, name) + "\nmine\n"; st.Stdout != want {
			t.Errorf("%s's process: stdout %q, want %q", name, st.Stdout, want)
		}
	}
	// Root acts on all: it writes to root's own and kills it by tag.
	r := ps["root"]
	if _, err := r.c.SendInput(bounded(t), connect.NewRequest(&pb.SendInputRequest{Process: processtest.PidSel(r.pid), Input: processtest.StdinInput("root\n")})); err != nil {
		t.Fatalf("root SendInput: %v", err)
	}
	r.w.Output(t, waitShort, "root\n")
	if _, err := r.c.SendSignal(bounded(t), connect.NewRequest(&pb.SendSignalRequest{Process: processtest.TagSel(r.tag), Signal: pb.Signal_SIGNAL_SIGKILL})); err != nil {
		t.Fatalf("root SendSignal by tag: %v", err)
	}
	checkEnd(t, r.w.End(t, waitShort), killed)
}

// TestStrictUsersRootActsOnOthers: root connects to, writes to and signals
// the processes of the other users; a tag shared by several users picks, for
// each user, the newest of its own, and for root the newest of all.
func TestStrictUsersRootActsOnOthers(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	s := processtest.New(t, processtest.Options{StrictUsers: true, Accounts: []*identity.User{guest}})
	shared := processtest.UniqueTag("shared")
	clients := map[string]processconnect.ProcessClient{}
	watchers := map[string]*processtest.Watcher{}
	pids := map[string]uint32{}
	// Root's last: it is the newest with the tag.
	for _, name := range []string{"user", guest.Name, "root"} {
		clients[name] = s.Client(t, processtest.ClientOptions{User: name})
		watchers[name] = start(t, clients[name], &pb.StartRequest{Process: processtest.Sh("exec cat"), Tag: &shared})
		pids[name] = watchers[name].Pid(t)
	}
	newest := slices.Max([]uint32{pids["user"], pids[guest.Name], pids["root"]})
	for name, c := range clients {
		want := pids[name]
		if name == "root" {
			want = newest // pids may wrap: root's is not always the highest
		}
		w := processtest.Connect(t, c, processtest.TagSel(shared), processtest.WatchOptions{})
		if got := w.Pid(t); got != want {
			t.Errorf("%s Connect by the shared tag: pid %d, want %d", name, got, want)
		}
		w.Close()
	}
	root := clients["root"]
	for _, name := range []string{"user", guest.Name} {
		if _, err := root.SendInput(bounded(t), connect.NewRequest(&pb.SendInputRequest{Process: processtest.PidSel(pids[name]), Input: processtest.StdinInput("from root\n")})); err != nil {
			t.Fatalf("root SendInput to %s's: %v", name, err)
		}
		watchers[name].Output(t, waitShort, "from root\n")
		kill(t, root, pids[name])
		checkEnd(t, watchers[name].End(t, waitShort), killed)
	}
	kill(t, root, pids["root"])
	watchers["root"].End(t, waitShort)
}

// TestDefaultModeSharesProcesses: without strict mode every user finds every
// process, as upstream: `user` and the guest list, connect to, write to and
// signal root's.
func TestDefaultModeSharesProcesses(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	s := processtest.New(t, processtest.Options{Accounts: []*identity.User{guest}})
	ps := startOwned(t, s, "root", "user", guest.Name)
	all := []uint32{ps["root"].pid, ps["user"].pid, ps[guest.Name].pid}
	slices.Sort(all)
	for _, name := range []string{"root", "user", guest.Name} {
		if got := listedPids(t, ps[name].c); !slices.Equal(got, all) {
			t.Errorf("%s's List = %v, want all of %v", name, got, all)
		}
	}
	r := ps["root"]
	for _, name := range []string{"user", guest.Name} {
		c := ps[name].c
		w := processtest.Connect(t, c, processtest.TagSel(r.tag), processtest.WatchOptions{})
		if got := w.Pid(t); got != r.pid {
			t.Errorf("%s Connect by root's tag: pid %d, want %d", name, got, r.pid)
		}
		if _, err := c.SendInput(bounded(t), connect.NewRequest(&pb.SendInputRequest{Process: processtest.PidSel(r.pid), Input: processtest.StdinInput(name + "\n")})); err != nil {
			t.Fatalf("%s SendInput to root's: %v", name, err)
		}
		w.Output(t, waitShort, name+"\n")
		w.Close()
	}
	if _, err := ps["user"].c.CloseStdin(bounded(t), connect.NewRequest(&pb.CloseStdinRequest{Process: processtest.PidSel(r.pid)})); err != nil {
		t.Fatalf("user CloseStdin of root's: %v", err)
	}
	checkEnd(t, r.w.End(t, waitShort), exit0)
	kill(t, ps[guest.Name].c, ps["user"].pid)
	checkEnd(t, ps["user"].w.End(t, waitShort), killed)
	kill(t, ps["user"].c, ps[guest.Name].pid)
	checkEnd(t, ps[guest.Name].w.End(t, waitShort), killed)
}
