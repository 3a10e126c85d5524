package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"

	fspb "github.com/envd-dev/envd/gen/filesystem"
	pb "github.com/envd-dev/envd/gen/process"
)

// envdThread is a thread of pid other than its main one.
func envdThread(t *testing.T, pid int) int {
	t.Helper()
	des, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if tid, err := strconv.Atoi(de.Name()); err == nil && tid != pid {
			return tid
		}
	}
	t.Fatalf("envd (pid %d) has a single thread", pid)
	return 0
}

// envdSocketFD is a descriptor of pid that is a socket: what a link to it
// resolves to ("socket:[inode]") is envd's, not guest's, to know.
func envdSocketFD(t *testing.T, pid int) (fd int, target string) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		l, err := os.Readlink(filepath.Join(dir, de.Name()))
		if n, aerr := strconv.Atoi(de.Name()); err == nil && aerr == nil && strings.HasPrefix(l, "socket:") {
			return n, l
		}
	}
	t.Fatalf("envd (pid %d) has no socket open", pid)
	return 0, ""
}

// downloadAccept is download with an Accept header.
func downloadAccept(t *testing.T, ctx context.Context, c clientsAs, path, accept string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.urlFor(path), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", accept)
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// TestStrictOwnProc: in strict mode a thread of envd acting as a user is
// still in envd's thread group, which the kernel lets read envd's own
// /proc/PID whatever its ids. envd refuses it to every user but root, on
// what a path leads to (through /proc/self, /proc/thread-self, a thread's
// /proc/TID, the user's own symlinks, odd spellings), for downloads,
// archives, stats, listings and watches; it follows no /proc magic link
// (fd, cwd, root, exe) for them either. guest's own processes are still
// guest's to read; root, and the default mode, are unchanged.
func TestStrictOwnProc(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{guest: true, args: []string{"-strict-users", "-default-user", guestName}})
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	root, guest := clientsFor(t, e, "root"), clientsFor(t, e, guestName)
	pid := e.cmd.Process.Pid
	tid := envdThread(t, pid)
	sockFD, sockTarget := envdSocketFD(t, pid)
	guestPid := startProcess(t, guest.proc, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"300"}}})

	// guest's own links into envd's /proc.
	links := map[string]string{
		"maps-link": fmt.Sprintf("/proc/%d/maps", pid),
		"self-link": "/proc/self",
		"fd-link":   fmt.Sprintf("/proc/%d/fd/%d", pid, sockFD),
		"rel-link":  fmt.Sprintf("../../../../../../../../proc/%d/status", pid),
	}
	for name, target := range links {
		p := filepath.Join(e.guestHome, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, guestUID, guestUID); err != nil {
			t.Fatal(err)
		}
	}
	home := e.guestHome

	refused := []string{
		fmt.Sprintf("/proc/%d/maps", pid),
		fmt.Sprintf("/proc/%d/status", pid),
		fmt.Sprintf("/proc/%d/environ", pid),
		"/proc/self/status",
		"/proc/self/maps",
		"/proc/thread-self/status",
		"/proc/./self/status",
		fmt.Sprintf("/proc//%d/maps", pid),
		fmt.Sprintf("/proc/%d/task/%d/maps", pid, tid),
		fmt.Sprintf("/proc/%d/status", tid), // a thread's own /proc/TID, not listed in /proc
		"/proc/net/unix",                    // /proc/net is self/net
		fmt.Sprintf("/proc/%d/root/etc/passwd", pid),
		fmt.Sprintf("/proc/%d/cwd/.", pid),
		home + "/maps-link",
		home + "/self-link/status",
		home + "/rel-link",
		"~/maps-link",
	}
	t.Run("downloads", func(t *testing.T) {
		for _, p := range refused {
			status, body := download(t, ctx, guest, p)
			if status != http.StatusForbidden || !strings.Contains(body, "envd") {
				t.Errorf("GET %s as guest: %d %.200s, want 403 naming envd's own /proc", p, status, body)
			}
		}
		// An archive's root is never a symlink: /proc/self itself is not a
		// directory to it.
		for _, p := range []string{fmt.Sprintf("/proc/%d/fd", pid), "/proc/self/fd", fmt.Sprintf("/proc/%d/task", pid), fmt.Sprintf("/proc/%d", tid), home + "/self-link/fd"} {
			status, body := downloadAccept(t, ctx, guest, p, "application/x-tar")
			if status != http.StatusForbidden {
				t.Errorf("GET %s as a tar as guest: %d %.200s, want 403", p, status, body)
			}
		}
		for _, p := range []string{fmt.Sprintf("/proc/%d/status", guestPid), fmt.Sprintf("/proc/%d/maps", guestPid)} {
			status, body := download(t, ctx, guest, p)
			if status != http.StatusOK || body == "" {
				t.Errorf("GET %s (guest's own process) as guest: %d %.200s, want 200", p, status, body)
			}
		}
		if status, body := download(t, ctx, guest, fmt.Sprintf("/proc/%d/status", guestPid)); !strings.Contains(body, fmt.Sprintf("Uid:\t%d", guestUID)) {
			t.Errorf("guest's own status: %d %.300s", status, body)
		}
		for _, p := range []string{fmt.Sprintf("/proc/%d/maps", pid), "/proc/self/status"} {
			if status, body := download(t, ctx, root, p); status != http.StatusOK || body == "" {
				t.Errorf("GET %s as root: %d %.200s, want 200", p, status, body)
			}
		}
	})

	t.Run("stats and listings", func(t *testing.T) {
		// A link of guest's own is guest's to stat (Stat does not follow
		// it): only what goes through it is refused.
		ownLinks := []string{home + "/maps-link", home + "/rel-link", "~/maps-link"}
		statRefused := slices.DeleteFunc(slices.Clone(refused), func(p string) bool { return slices.Contains(ownLinks, p) })
		for _, p := range ownLinks {
			if _, err := guest.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: p})); err != nil {
				t.Errorf("Stat guest's own link %s as guest: %v", p, err)
			}
		}
		for _, p := range append(statRefused, "/proc/self", "/proc/thread-self", fmt.Sprintf("/proc/%d", pid), fmt.Sprintf("/proc/%d/fd/%d", pid, sockFD)) {
			_, err := guest.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: p}))
			if connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Errorf("Stat %s as guest: %v, want permission_denied", p, err)
			}
		}
		for _, p := range []string{fmt.Sprintf("/proc/%d/fd", pid), fmt.Sprintf("/proc/%d", pid), "/proc/self", "/proc/thread-self/fd", fmt.Sprintf("/proc/%d/task", pid), fmt.Sprintf("/proc/%d", tid), home + "/self-link", fmt.Sprintf("/proc/%d/root/", pid)} {
			_, err := guest.fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: p}))
			if connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Errorf("ListDir %s as guest: %v, want permission_denied", p, err)
			}
		}
		// /proc itself lists, without envd's own entries, and a listing
		// deeper than one level goes into none of them.
		res, err := guest.fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "/proc", Depth: 2}))
		if err != nil {
			t.Fatalf("ListDir /proc as guest: %v", err)
		}
		var sawGuest bool
		for _, en := range res.Msg.GetEntries() {
			p := en.GetPath()
			if p == fmt.Sprintf("/proc/%d", guestPid) {
				sawGuest = true
			}
			for _, own := range []string{fmt.Sprintf("/proc/%d", pid), "/proc/self", "/proc/thread-self"} {
				if p == own || strings.HasPrefix(p, own+"/") {
					t.Errorf("ListDir /proc as guest lists %s", p)
				}
			}
			if strings.Contains(en.GetSymlinkTarget(), fmt.Sprintf("/proc/%d/", pid)) {
				t.Errorf("ListDir /proc as guest: %s resolves to %s", p, en.GetSymlinkTarget())
			}
		}
		if !sawGuest {
			t.Errorf("ListDir /proc as guest lacks guest's own process %d", guestPid)
		}
		// guest's link to envd's socket: listed and stated as a link, but
		// where it leads is not told.
		for _, ls := range []func() ([]*fspb.EntryInfo, error){
			func() ([]*fspb.EntryInfo, error) {
				res, err := guest.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: home + "/fd-link"}))
				return []*fspb.EntryInfo{res.Msg.GetEntry()}, err
			},
			func() ([]*fspb.EntryInfo, error) {
				res, err := guest.fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: home}))
				return res.Msg.GetEntries(), err
			},
		} {
			es, err := ls()
			if err != nil {
				t.Fatalf("guest's own home: %v", err)
			}
			for _, en := range es {
				if strings.Contains(en.GetSymlinkTarget(), sockTarget) || strings.Contains(en.GetSymlinkTarget(), fmt.Sprintf("/proc/%d/", pid)) {
					t.Errorf("%s resolves, for guest, to %q", en.GetPath(), en.GetSymlinkTarget())
				}
			}
		}
		if _, err := guest.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: fmt.Sprintf("/proc/%d/status", guestPid)})); err != nil {
			t.Errorf("Stat guest's own /proc/%d/status as guest: %v", guestPid, err)
		}
		if _, err := guest.fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: fmt.Sprintf("/proc/%d", guestPid)})); err != nil {
			t.Errorf("ListDir guest's own /proc/%d as guest: %v", guestPid, err)
		}
		res, err = root.fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: fmt.Sprintf("/proc/%d/fd", pid)}))
		if err != nil || len(res.Msg.GetEntries()) == 0 {
			t.Errorf("ListDir envd's /proc/%d/fd as root: %v, %d entries", pid, err, len(res.Msg.GetEntries()))
		}
	})

	t.Run("watches", func(t *testing.T) {
		for _, p := range []string{fmt.Sprintf("/proc/%d/fd", pid), "/proc/self", fmt.Sprintf("/proc/%d", tid), home + "/self-link"} {
			_, err := guest.fs.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: p}))
			if connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Errorf("CreateWatcher %s as guest: %v, want permission_denied", p, err)
			}
			wctx, wcancel := context.WithCancel(ctx)
			stream, err := guest.fs.WatchDir(wctx, connect.NewRequest(&fspb.WatchDirRequest{Path: p, Recursive: true}))
			if err == nil {
				stream.Receive()
				err = stream.Err()
				stream.Close()
			}
			wcancel()
			if connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Errorf("WatchDir %s as guest: %v, want permission_denied", p, err)
			}
		}
	})
}

// TestStrictOwnProcDefaultMode: without -strict-users reads are root's, as
// upstream's: envd's own /proc is readable as any user, as before.
func TestStrictOwnProcDefaultMode(t *testing.T) {
	t.Parallel()
	e := startEnvd(t, startOptions{guest: true})
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	guest := clientsFor(t, e, guestName)
	p := fmt.Sprintf("/proc/%d/maps", e.cmd.Process.Pid)
	if status, body := download(t, ctx, guest, p); status != http.StatusOK || body == "" {
		t.Errorf("GET %s as guest in the default mode: %d %.200s, want 200", p, status, body)
	}
	if _, err := guest.fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "/proc/self/fd"})); err != nil {
		t.Errorf("ListDir /proc/self/fd as guest in the default mode: %v", err)
	}
}
