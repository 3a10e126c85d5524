package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"

	fspb "github.com/envd-dev/envd/gen/filesystem"
	"github.com/envd-dev/envd/gen/filesystem/filesystemconnect"
	pb "github.com/envd-dev/envd/gen/process"
	"github.com/envd-dev/envd/gen/process/processconnect"
)

// asUser sends every request with Basic auth naming user.
type asUser struct {
	user string
	next http.RoundTripper
}

func (a asUser) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", basicAuth(a.user))
	return a.next.RoundTrip(r)
}

// clientsAs are the process and filesystem clients of one user.
type clientsAs struct {
	name string
	base string
	http *http.Client
	proc processconnect.ProcessClient
	fs   filesystemconnect.FilesystemClient
}

func clientsFor(t *testing.T, e *envd, name string) clientsAs {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: asUser{name, tr}}
	return clientsAs{
		name: name,
		base: e.url,
		http: c,
		proc: processconnect.NewProcessClient(c, e.url, connect.WithProtoJSON()),
		fs:   filesystemconnect.NewFilesystemClient(c, e.url, connect.WithProtoJSON()),
	}
}

// TestStrictUsers drives the real binary with -strict-users and a second
// unprivileged account (guest, no sudo) beside root and user: guest cannot
// read a root process's memory map, cannot see or signal root's or user's
// processes (they look like pids that do not exist), cannot learn what a
// root 0700 directory holds (files, cwd), and user cannot write where a
// shell as user cannot.
func TestStrictUsers(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{guest: true, args: []string{"-strict-users"}})
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	root, usr, guest := clientsFor(t, e, "root"), clientsFor(t, e, "user"), clientsFor(t, e, guestName)

	sleep := &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"300"}}}
	rootPid := startProcess(t, root.proc, sleep)
	userPid := startProcess(t, usr.proc, sleep)
	guestPid := startProcess(t, guest.proc, sleep)

	t.Run("processes", func(t *testing.T) {
		list := func(c clientsAs) []uint32 {
			res, err := c.proc.List(ctx, connect.NewRequest(&pb.ListRequest{}))
			if err != nil {
				t.Fatalf("List as %s: %v", c.name, err)
			}
			var pids []uint32
			for _, p := range res.Msg.GetProcesses() {
				pids = append(pids, p.GetPid())
			}
			return pids
		}
		if got := list(guest); !slices.Equal(got, []uint32{guestPid}) {
			t.Errorf("guest lists %v, want only its own %d", got, guestPid)
		}
		if got := list(usr); !slices.Equal(got, []uint32{userPid}) {
			t.Errorf("user lists %v, want only its own %d", got, userPid)
		}
		if got := list(root); !slices.Contains(got, rootPid) || !slices.Contains(got, userPid) || !slices.Contains(got, guestPid) {
			t.Errorf("root lists %v, want all of %d %d %d", got, rootPid, userPid, guestPid)
		}
		kill := func(c clientsAs, pid uint32) error {
			_, err := c.proc.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{
				Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}, Signal: pb.Signal_SIGNAL_SIGKILL}))
			return err
		}
		const bogus = 999999
		bogusErr := kill(guest, bogus)
		if connect.CodeOf(bogusErr) != connect.CodeNotFound {
			t.Fatalf("guest kills pid %d: %v, want not_found", bogus, bogusErr)
		}
		for _, pid := range []uint32{rootPid, userPid} {
			err := kill(guest, pid)
			want := strings.ReplaceAll(bogusErr.Error(), fmt.Sprint(bogus), fmt.Sprint(pid))
			if err == nil || err.Error() != want {
				t.Errorf("guest kills pid %d: %v, want exactly %q (as for a pid that does not exist)", pid, err, want)
			}
		}
		for _, pid := range []uint32{rootPid, userPid} {
			if p, ok := readProc(int(pid)); !ok || !p.running() {
				t.Errorf("pid %d is gone after guest's signal", pid)
			}
		}
	})

	t.Run("root's memory map", func(t *testing.T) {
		for _, c := range []clientsAs{guest, usr} {
			status, body := download(t, ctx, c, fmt.Sprintf("/proc/%d/maps", rootPid))
			if status != http.StatusForbidden {
				t.Errorf("GET /proc/%d/maps as %s: %d %s, want 403", rootPid, c.name, status, body)
			}
		}
		if status, body := download(t, ctx, root, fmt.Sprintf("/proc/%d/maps", rootPid)); status != http.StatusOK {
			t.Errorf("GET /proc/%d/maps as root: %d %s", rootPid, status, body)
		}
	})

	t.Run("root's 0700 directory", func(t *testing.T) {
		dir, err := os.MkdirTemp("", "envd-strict-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte("secret"), 0o644); err != nil {
			t.Fatal(err)
		}
		// Every path below it answers the same, whatever is there.
		var statMsgs, cwdMsgs []string
		for _, name := range []string{"d", "f", "missing"} {
			p := filepath.Join(dir, name)
			_, err := guest.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: p}))
			if connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Errorf("guest stats %s: %v, want permission_denied", p, err)
			}
			statMsgs = append(statMsgs, strings.ReplaceAll(fmt.Sprint(err), p, "<path>"))
			_, _, err = run(ctx, guest.proc, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/true", Cwd: &p}})
			if connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Errorf("guest starts a process in %s: %v, want permission_denied", p, err)
			}
			cwdMsgs = append(cwdMsgs, strings.ReplaceAll(fmt.Sprint(err), p, "<path>"))
		}
		for _, msgs := range [][]string{statMsgs, cwdMsgs} {
			if len(slices.Compact(slices.Clone(msgs))) != 1 {
				t.Errorf("answers differ with what the directory holds: %q", msgs)
			}
		}
		_, err = guest.fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: dir}))
		if connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("guest lists %s: %v, want permission_denied", dir, err)
		}
	})

	t.Run("root runs nothing from what the user can write", func(t *testing.T) {
		// The shared package environment (install-deps.sh gives the
		// sandbox user /opt/envd-python and R's /usr/local site library)
		// is for the others: a root process neither has the virtual
		// environment first on its PATH nor loads R packages from there.
		show := &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", `echo "venv=$VIRTUAL_ENV path=$PATH rsite=$R_LIBS_SITE"`}}}
		out, _, err := run(ctx, root.proc, show)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "venv=/") || strings.Contains(out, "envd-python") || !strings.Contains(out, "rsite=/usr/lib/R/site-library:/usr/lib/R/library") {
			t.Errorf("root's environment: %q", out)
		}
		if _, err := os.Stat("/opt/envd-python/bin/python"); err == nil {
			if out, _, err := run(ctx, usr.proc, show); err != nil || !strings.Contains(out, "venv=/opt/envd-python ") {
				t.Errorf("user's environment: %q, %v; want the shared virtual environment", out, err)
			}
		}
	})

	t.Run("user writes only where a shell as user can", func(t *testing.T) {
		for _, p := range []string{"/root/envd-strict-test", "/envd-strict-test/x", "/etc/envd-strict-test"} {
			status, body := upload(t, ctx, usr, p, "hello")
			if status != http.StatusForbidden {
				t.Errorf("upload %s as user: %d %s, want 403", p, status, body)
			}
			if _, err := os.Lstat(p); err == nil {
				os.RemoveAll(p)
				t.Errorf("%s exists after user's refused upload", p)
			}
		}
		if _, err := os.Lstat("/envd-strict-test"); err == nil {
			os.RemoveAll("/envd-strict-test")
			t.Errorf("/envd-strict-test was created for user")
		}
	})
}

// urlFor is the /files URL of path, as c's user (/files names the
// user in the query).
func (c clientsAs) urlFor(path string) string {
	return c.base + "/files?path=" + url.QueryEscape(path) + "&username=" + url.QueryEscape(c.name)
}

func download(t *testing.T, ctx context.Context, c clientsAs, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.urlFor(path), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

func upload(t *testing.T, ctx context.Context, c clientsAs, path, content string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.urlFor(path), bytes.NewReader([]byte(content)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}
